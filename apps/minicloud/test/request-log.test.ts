// The API's request log: one line per request, written once it is answered, with the request id
// the answer carries, the method, the URL and the status.
import { Writable } from 'node:stream';
import type { Logger } from '@rigging/core';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { createApp } from '../src/http/app.js';

describe('the request log', () => {
  it('has one line per request, once answered, with its id, method, URL and status', async () => {
    const lines: Record<string, any>[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) {
          if (line) lines.push(JSON.parse(line) as Record<string, any>);
        }
        done();
      },
    });
    const app = createApp(pino({ level: 'info' }, stream) as unknown as Logger);
    app.get('/api/thing', async () => ({ ok: true }));
    const found = await app.inject({ method: 'GET', url: '/api/thing?x=1' });
    const missing = await app.inject({ method: 'POST', url: '/api/nothing' });
    await app.close();
    expect(lines.map((l) => l.msg)).toEqual(['request completed', 'request completed']);
    expect(lines[0]).toMatchObject({
      reqId: found.headers['x-request-id'],
      req: { method: 'GET', url: '/api/thing?x=1' },
      res: { statusCode: 200 },
    });
    expect(lines[0]!.responseTime).toBeGreaterThanOrEqual(0);
    expect(lines[1]).toMatchObject({
      reqId: missing.headers['x-request-id'],
      req: { method: 'POST', url: '/api/nothing' },
      res: { statusCode: missing.statusCode },
    });
  });
});
