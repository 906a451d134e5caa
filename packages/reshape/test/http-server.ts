/** A Placement server on a free port and a client for it (no token: the server has no `auth`). */
import type { AddressInfo } from 'node:net';
import type { ReshapeStore } from '../src/index.js';
import { createPlacementServer } from '../src/http/index.js';

export async function serve(store: ReshapeStore) {
  const srv = createPlacementServer(store);
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  /** A request at microversion `version`; `body` is the parsed JSON answer, if any. */
  const call = async (
    method: string,
    path: string,
    body?: unknown,
    accept?: string,
    version = '1.39',
  ) => {
    const res = await fetch(url + path, {
      method,
      headers: {
        'openstack-api-version': `placement ${version}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...(accept === undefined ? {} : { accept }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    const json = /json/.test(res.headers.get('content-type') ?? '');
    return { status: res.status, body: text && json ? (JSON.parse(text) as any) : undefined };
  };
  const close = () => new Promise((resolve) => srv.close(resolve));
  return { call, close };
}
