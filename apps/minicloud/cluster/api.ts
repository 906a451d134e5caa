/** A minimal client of minicloud's HTTP API across several API hosts. */
import { Agent, request } from 'node:http';

/** An HTTP answer: status and parsed JSON body (or the text when it is not JSON). */
export interface Answer<T = any> {
  status: number;
  body: T;
  ms: number;
}

const NEVER_ARRIVED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH']);
const PLACEMENT_VERSION = 'placement 1.30';

/** An API host as `node:http` takes it (parsed once, not per request). */
interface Host {
  host: string;
  port: number;
}

/**
 * One HTTP exchange: the status and the body's text. Past `timeoutMs` the request is destroyed
 * (a timer per request: the load generator shares the machine with the hosts it measures, and
 * an `AbortSignal` per request costs it several times more).
 */
function exchange(
  to: Host,
  path: string,
  method: string,
  headers: Record<string, string>,
  body: string | undefined,
  agent: Agent,
  timeoutMs: number,
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const fail = (error: Error) => {
      clearTimeout(timer);
      reject(error);
    };
    const req = request({ ...to, path, method, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') });
      });
      res.on('error', fail);
    });
    const timer = setTimeout(
      () =>
        req.destroy(
          Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' }),
        ),
      timeoutMs,
    );
    req.on('error', fail);
    req.end(body);
  });
}

/**
 * Sends requests to the API hosts in turn; a host that refuses the connection (killed,
 * unreachable) is skipped for the next one, up to `attempts` hosts. Every request is bounded by
 * `timeoutMs`. Connections are kept alive between requests (`node:http`, not `fetch`: the load
 * generator shares the machine with the hosts it measures, and spends a fraction of the CPU).
 */
export class Api {
  #next = 0;
  readonly #agent = new Agent({ keepAlive: true });
  readonly #hosts: readonly Host[];
  constructor(
    urls: readonly string[],
    private readonly token: string,
    private readonly timeoutMs = 30_000,
  ) {
    if (urls.length === 0) throw new RangeError('no API host');
    this.#hosts = urls.map((url) => {
      const { hostname, port } = new URL(url);
      return { host: hostname, port: Number(port || 80) };
    });
  }

  /** `/api/...` with `Authorization: Bearer`. */
  api<T = any>(
    method: string,
    path: string,
    body?: unknown,
    timeoutMs?: number,
  ): Promise<Answer<T>> {
    return this.#send(
      method,
      `/api${path}`,
      body,
      { authorization: `Bearer ${this.token}` },
      timeoutMs,
    );
  }

  /** `/placement/...` with `X-Auth-Token` and the latest microversion. */
  placement<T = any>(method: string, path: string, body?: unknown): Promise<Answer<T>> {
    return this.#send(method, `/placement${path}`, body, {
      'x-auth-token': this.token,
      'openstack-api-version': PLACEMENT_VERSION,
    });
  }

  async #send(
    method: string,
    path: string,
    body: unknown,
    headers: Record<string, string>,
    timeoutMs = this.timeoutMs,
  ): Promise<Answer> {
    let lastError: unknown;
    for (let attempt = 0; attempt < this.#hosts.length; attempt++) {
      const to = this.#hosts[this.#next++ % this.#hosts.length]!;
      const started = performance.now();
      try {
        const payload = body === undefined ? undefined : JSON.stringify(body);
        const { status, text } = await exchange(
          to,
          path,
          method,
          {
            ...headers,
            ...(payload === undefined
              ? {}
              : {
                  'content-type': 'application/json',
                  'content-length': String(Buffer.byteLength(payload)),
                }),
          },
          payload,
          this.#agent,
          timeoutMs,
        );
        let parsed: unknown = text;
        try {
          parsed = text ? JSON.parse(text) : undefined;
        } catch {
          // not JSON: keep the text
        }
        return { status, body: parsed, ms: performance.now() - started };
      } catch (error) {
        // Only a request that surely never arrived goes to the next host (no double submission).
        const code = (error as { code?: string }).code;
        if (!code || !NEVER_ARRIVED.has(code)) throw error;
        lastError = error;
      }
    }
    throw new Error(`no API host answered ${method} ${path}: ${String(lastError)}`);
  }

  /** Closes the kept-alive connections. */
  close(): void {
    this.#agent.destroy();
  }
}
