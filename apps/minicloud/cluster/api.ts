/** A minimal client of minicloud's HTTP API across several API hosts. */

/** An HTTP answer: status and parsed JSON body (or the text when it is not JSON). */
export interface Answer<T = any> {
  status: number;
  body: T;
  ms: number;
}

const NEVER_ARRIVED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH']);
const PLACEMENT_VERSION = 'placement 1.30';

/**
 * Sends requests to the API hosts in turn; a host that refuses the connection (killed,
 * unreachable) is skipped for the next one, up to `attempts` hosts. Every request is bounded by `timeoutMs`.
 */
export class Api {
  #next = 0;
  constructor(
    private readonly urls: readonly string[],
    private readonly token: string,
    private readonly timeoutMs = 30_000,
  ) {
    if (urls.length === 0) throw new RangeError('no API host');
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
    for (let attempt = 0; attempt < this.urls.length; attempt++) {
      const base = this.urls[this.#next++ % this.urls.length]!;
      const started = performance.now();
      try {
        const res = await fetch(base + path, {
          method,
          headers: {
            ...headers,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          body: body === undefined ? null : JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
        });
        const text = await res.text();
        let parsed: unknown = text;
        try {
          parsed = text ? JSON.parse(text) : undefined;
        } catch {
          // not JSON: keep the text
        }
        return { status: res.status, body: parsed, ms: performance.now() - started };
      } catch (error) {
        // Only a request that surely never arrived goes to the next host (no double submission).
        const code = (error as { cause?: { code?: string } }).cause?.code;
        if (!code || !NEVER_ARRIVED.has(code)) throw error;
        lastError = error;
      }
    }
    throw new Error(`no API host answered ${method} ${path}: ${String(lastError)}`);
  }
}
