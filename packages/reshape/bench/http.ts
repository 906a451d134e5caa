// The bench's HTTP client: node:http with a keep-alive agent (fetch's own overhead would
// dominate the shortest calls), one socket so calls are sequential.
import { Agent, request } from 'node:http';

const agent = new Agent({ keepAlive: true, maxSockets: 1 });

export interface Reply {
  status: number;
  body: any;
}

/** A reply's body as received, with the time from sending to its last byte. */
export interface RawReply {
  status: number;
  text: string;
  ms: number;
}

/** One request as a Placement client sends it (admin token, microversion `version`), unparsed. */
export function sendRaw(
  base: string,
  method: string,
  path: string,
  body: unknown,
  version: string,
): Promise<RawReply> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const req = request(
      base + path,
      {
        method,
        agent,
        headers: {
          'x-auth-token': 'admin',
          'openstack-api-version': `placement ${version}`,
          'content-type': 'application/json',
          ...(payload === undefined ? {} : { 'content-length': Buffer.byteLength(payload) }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const ms = performance.now() - t0;
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString(), ms });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** One request as a Placement client sends it (admin token, microversion `version`). */
export async function send(
  base: string,
  method: string,
  path: string,
  body: unknown,
  version: string,
): Promise<Reply> {
  const r = await sendRaw(base, method, path, body, version);
  return { status: r.status, body: r.text ? JSON.parse(r.text) : undefined };
}

/** `send`, refusing an error answer; resolves with the body. */
export async function ok(
  base: string,
  method: string,
  path: string,
  body: unknown,
  version: string,
): Promise<any> {
  const r = await send(base, method, path, body, version);
  if (r.status >= 400)
    throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
  return r.body;
}

/** Closes the agent's sockets, so that the process can exit. */
export function closeClient(): void {
  agent.destroy();
}
