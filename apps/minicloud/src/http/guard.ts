/**
 * What a web page must not be able to do to a local `minicloud serve`: reach it under a foreign
 * name (DNS rebinding: the `Host` allow-list), change anything from another origin (CSRF: the
 * `Origin` / `Sec-Fetch-Site` check on every non-GET request, with or without tokens), or frame
 * the dashboard (`frame-ancestors 'none'`, `X-Frame-Options: DENY`, a strict CSP).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { HttpError } from './errors.js';

/** Options of {@link RequestGuard}. */
export interface RequestGuardOptions {
  /**
   * Host names (or `name:port`) accepted in `Host` besides the bound address, `localhost`,
   * `127.0.0.1` and `[::1]` (`--allowed-host`, e.g. the name of a reverse proxy).
   */
  allowedHosts?: readonly string[];
  /**
   * Origins (`https://ops.example.com`) whose pages may send state-changing requests besides the
   * server's own (`--allowed-origin`).
   */
  allowedOrigins?: readonly string[];
}

/** The headers every answer carries (the dashboard's files included). */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy':
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; " +
    "form-action 'none'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin',
  'cross-origin-opener-policy': 'same-origin',
};

/** Methods that never change anything (the Origin check leaves them alone). */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** `Host` names that always mean this machine. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** Splits a `Host` value into a lower-case host name (IPv6 in brackets) and its port, if any. */
export function parseHost(value: string): { name: string; port: string | undefined } | undefined {
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::(\d{1,5}))?$/i.exec(value.trim());
  if (!m) return undefined;
  const name = m[1]!.toLowerCase().replace(/\.$/, '');
  return { name, port: m[2] };
}

function normalizeName(host: string): string {
  const h = host.trim().toLowerCase();
  if (h.includes(':') && !h.startsWith('[') && isIP(h) === 6) return `[${h}]`;
  return h;
}

function isWildcard(address: string): boolean {
  return address === '0.0.0.0' || address === '::' || address === '[::]';
}

/** Refuses foreign hosts and cross-site writes; adds the security headers. */
export class RequestGuard {
  /** Allowed host names, and `name:port` entries that only match that port. */
  readonly #hosts = new Set<string>(LOOPBACK_NAMES);
  readonly #origins: ReadonlySet<string>;
  #wildcard = false;

  constructor(options: RequestGuardOptions = {}) {
    for (const h of options.allowedHosts ?? []) {
      const parsed = parseHost(h);
      if (!parsed) throw new TypeError(`not a host name: ${JSON.stringify(h)}`);
      this.#hosts.add(parsed.port ? `${parsed.name}:${parsed.port}` : parsed.name);
    }
    const origins = new Set<string>();
    for (const o of options.allowedOrigins ?? []) {
      let url: URL;
      try {
        url = new URL(o);
      } catch {
        throw new TypeError(`not an origin: ${JSON.stringify(o)}`);
      }
      if (url.origin === 'null') throw new TypeError(`not an origin: ${JSON.stringify(o)}`);
      origins.add(url.origin);
    }
    this.#origins = origins;
  }

  /**
   * Adds the address the server listens on. A wildcard address (`0.0.0.0`, `::`) accepts any IP
   * literal in `Host` (a rebinding attack needs a DNS name); names still need `allowedHosts`.
   */
  bind(address: string): void {
    if (isWildcard(address)) this.#wildcard = true;
    else this.#hosts.add(normalizeName(address));
  }

  /** Whether a `Host` header value names this server. */
  hostAllowed(value: string | undefined): boolean {
    if (value === undefined) return false;
    const parsed = parseHost(value);
    if (!parsed) return false;
    if (this.#hosts.has(parsed.name)) return true;
    if (parsed.port && this.#hosts.has(`${parsed.name}:${parsed.port}`)) return true;
    const bare = parsed.name.replace(/^\[|\]$/g, '');
    return this.#wildcard && isIP(bare) !== 0;
  }

  /**
   * Throws 421 `minicloud.host_not_allowed` for a foreign `Host`, and 403
   * `minicloud.cross_origin` for a non-GET request sent by a page of another origin.
   */
  check(req: IncomingMessage): void {
    const host = req.headers.host;
    if (!this.hostAllowed(host)) {
      throw new HttpError(
        421,
        'minicloud.host_not_allowed',
        'this server does not answer to that Host name (add it with --allowed-host)',
      );
    }
    if (SAFE_METHODS.has(req.method ?? 'GET')) return;
    const site = req.headers['sec-fetch-site'];
    const origin = req.headers.origin;
    if (origin !== undefined) {
      if (!this.#originAllowed(origin, host!)) {
        throw new HttpError(
          403,
          'minicloud.cross_origin',
          'requests that change state are only accepted from this server’s own pages (add an origin with --allowed-origin)',
        );
      }
      return;
    }
    // No Origin: a browser always sends one with a non-GET fetch; Sec-Fetch-Site still says.
    if (site !== undefined && site !== 'same-origin' && site !== 'none') {
      throw new HttpError(
        403,
        'minicloud.cross_origin',
        'requests that change state are only accepted from this server’s own pages',
      );
    }
  }

  #originAllowed(origin: string, host: string): boolean {
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      return false;
    }
    if (url.origin === 'null' || origin.trim() !== url.origin) return false;
    if (this.#origins.has(url.origin)) return true;
    return (
      (url.protocol === 'http:' || url.protocol === 'https:') &&
      url.host === host.trim().toLowerCase()
    );
  }

  /** Sets the security headers on a response (kept when a route writes the raw response). */
  static secure(res: ServerResponse): void {
    for (const [name, value] of Object.entries(SECURITY_HEADERS)) res.setHeader(name, value);
  }
}

/** Runs `guard` before anything else on every request of `app` (unknown routes included). */
export function installGuard(app: FastifyInstance, guard: RequestGuard): void {
  app.addHook('onRequest', async (req, reply) => {
    RequestGuard.secure(reply.raw);
    guard.check(req.raw);
  });
}
