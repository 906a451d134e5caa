/**
 * Authentication and roles of `minicloud serve`: a token in `Authorization: Bearer`, or the
 * dashboard's session cookie (a server-side session, not the token), checked before every `/api`
 * route against the access the route declares in `config.access`. Wrong credentials are counted
 * per client address and per presented token prefix; past the limit they answer 429 instead of
 * 401. A valid credential always passes.
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { FailureLimiter } from '../auth/limiter.js';
import {
  allows,
  SESSION_TTL_MS,
  type Access,
  type Principal,
  type TokenStore,
} from '../auth/tokens.js';
import { HttpError } from './errors.js';

/**
 * When tokens are required. `required`: always (a non-loopback listener). `auto`: once a token
 * exists or `MINICLOUD_ADMIN_TOKEN` is set (a loopback listener: no set-up for a local demo).
 */
export type AuthMode = 'required' | 'auto';

/** Options of {@link Auth}. */
export interface AuthOptions {
  tokens: TokenStore;
  mode: AuthMode;
  limiter?: FailureLimiter;
  /**
   * Always mark the session cookie `Secure` (served over TLS, e.g. behind a TLS proxy); it is
   * marked anyway when a request says `X-Forwarded-Proto: https`. @default false
   */
  secureCookies?: boolean;
}

/** What a route is open to: an access level, or `public` (no token). */
export type RouteAccess = Access | 'public';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Who may call the route (default: `admin`). */
    access?: RouteAccess;
  }
}

/** The dashboard's session cookie (a session secret, HttpOnly, SameSite=Strict). */
export const SESSION_COOKIE = 'minicloud_session';

/** Characters of a presented credential its failures are also counted by. */
const PREFIX_CHARS = 12;

/** The principal used when no token is required: everything is allowed. */
const OPEN: Principal = { id: 'anonymous', role: 'admin' };

function cookieToken(req: IncomingMessage): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0 || part.slice(0, eq).trim() !== SESSION_COOKIE) continue;
    try {
      return decodeURIComponent(part.slice(eq + 1).trim()) || undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** The token a request carries: `Authorization: Bearer <t>`, else the session cookie. */
export function requestToken(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization;
  if (header !== undefined) {
    const m = /^Bearer +(\S+) *$/i.exec(header);
    return m ? m[1] : '';
  }
  return cookieToken(req);
}

/** The client address rate limits are counted by. */
export function clientAddress(req: IncomingMessage): string {
  return req.socket.remoteAddress ?? 'unknown';
}

/** The limiter keys of a failed credential: its source address and its prefix. */
function failureKeys(req: IncomingMessage, token: string): string[] {
  return [`addr:${clientAddress(req)}`, `prefix:${token.slice(0, PREFIX_CHARS)}`];
}

/** Checks tokens and roles for the HTTP server. */
export class Auth {
  readonly tokens: TokenStore;
  readonly mode: AuthMode;
  readonly limiter: FailureLimiter;
  readonly secureCookies: boolean;

  constructor(options: AuthOptions) {
    this.tokens = options.tokens;
    this.mode = options.mode;
    this.limiter = options.limiter ?? new FailureLimiter();
    this.secureCookies = options.secureCookies ?? false;
  }

  /** Whether requests need a token right now. */
  async active(): Promise<boolean> {
    return this.mode === 'required' || (await this.tokens.configured());
  }

  /**
   * Counts a failed credential of `req` and throws: 429 `minicloud.rate_limited` when its source
   * or its prefix failed too often lately, else 401 `minicloud.unauthorized`.
   */
  refuse(req: IncomingMessage, token: string): never {
    const keys = failureKeys(req, token);
    for (const key of keys) this.limiter.fail(key);
    const waitMs = Math.max(...keys.map((key) => this.limiter.blockedFor(key)));
    if (waitMs > 0) {
      throw new HttpError(
        429,
        'minicloud.rate_limited',
        `too many failed authentications; retry in ${Math.ceil(waitMs / 1000)} s`,
        { 'retry-after': String(Math.ceil(waitMs / 1000)) },
      );
    }
    throw new HttpError(401, 'minicloud.unauthorized', 'the token is not valid', {
      'www-authenticate': 'Bearer realm="minicloud", error="invalid_token"',
    });
  }

  /**
   * The caller of `req`, or a 401 (`minicloud.unauthorized`) when a token is required and
   * missing or wrong (a wrong one counts as a failure: 429 past the limit).
   */
  async principal(req: IncomingMessage): Promise<Principal> {
    if (!(await this.active())) return OPEN;
    const token = requestToken(req);
    if (token === undefined) {
      throw new HttpError(401, 'minicloud.unauthorized', 'this API needs a token', {
        'www-authenticate': 'Bearer realm="minicloud"',
      });
    }
    return (await this.tokens.verify(token)) ?? this.refuse(req, token);
  }

  /** Verifies `token`; a wrong one counts as a failure and throws 401 or 429. */
  async verify(req: IncomingMessage, token: string): Promise<Principal> {
    return (await this.tokens.verify(token)) ?? this.refuse(req, token);
  }

  /** Checks that `req` may use a route that needs `access`; resolves with its caller. */
  async authorize(req: IncomingMessage, access: RouteAccess): Promise<Principal | undefined> {
    if (access === 'public') return undefined;
    const principal = await this.principal(req);
    if (!allows(principal.role, access)) {
      throw new HttpError(
        403,
        'minicloud.forbidden',
        `a ${principal.role} token may not do this (needs ${access} access)`,
      );
    }
    return principal;
  }
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Who made the request (set by {@link installAuth} on non-public routes). */
    principal?: Principal;
  }
}

/**
 * Whether `req` reached a TLS proxy as HTTPS (`X-Forwarded-Proto: https`). Trusting it is safe
 * here: it can only add `Secure`, which keeps a cookie off plain HTTP.
 */
function forwardedHttps(req: IncomingMessage): boolean {
  const proto = req.headers['x-forwarded-proto'];
  const first = (Array.isArray(proto) ? proto[0] : proto)?.split(',')[0]?.trim().toLowerCase();
  return first === 'https';
}

/** The session cookie's attributes: `Secure` with `--secure-cookies` or behind a TLS proxy. */
function cookieAttributes(auth: Auth, req: IncomingMessage): string {
  const secure = auth.secureCookies || forwardedHttps(req);
  return `Path=/; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
}

/**
 * Adds the token check to every route of `app` (by its `config.access`, default `admin`) and
 * the dashboard's session routes: `GET /api/session` (who am I), `POST /api/session` (sign in
 * with `{ token }`: sets the HttpOnly cookie) and `DELETE /api/session` (sign out).
 */
export function installAuth(app: FastifyInstance, auth: Auth): void {
  app.addHook('onRequest', async (req: FastifyRequest) => {
    // No route: 404 or 405 (with Allow) for every caller alike, nothing to protect.
    if (req.is404) return;
    const principal = await auth.authorize(req.raw, req.routeOptions.config.access ?? 'admin');
    if (principal) req.principal = principal;
  });

  const sessionSchema = {
    type: 'object',
    additionalProperties: false,
    required: ['auth', 'role'],
    properties: {
      auth: { type: 'boolean', description: 'whether this server requires tokens' },
      role: { type: 'string', enum: ['admin', 'member', 'reader'] },
    },
  } as const;

  app.get(
    '/api/session',
    {
      config: { access: 'public' },
      schema: {
        operationId: 'getSession',
        summary: 'Who the caller is',
        response: { 200: { ...sessionSchema, description: "the caller's role" } },
      },
    },
    async (req) => {
      const principal = await auth.principal(req.raw);
      return { auth: await auth.active(), role: principal.role };
    },
  );

  app.post(
    '/api/session',
    {
      config: { access: 'public' },
      bodyLimit: 1024,
      schema: {
        operationId: 'signIn',
        summary: 'Sign the dashboard in with a token (sets an HttpOnly cookie)',
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['token'],
          properties: { token: { type: 'string', minLength: 1, maxLength: 256 } },
        },
        response: {
          200: {
            ...sessionSchema,
            description: 'signed in (the cookie is set once the server requires tokens)',
          },
        },
      },
    },
    async (req, reply: FastifyReply) => {
      const { token } = req.body as { token: string };
      if (!(await auth.active())) return { auth: false, role: OPEN.role };
      const principal = await auth.verify(req.raw, token);
      const session = await auth.tokens.createSession(principal);
      void reply.header(
        'set-cookie',
        `${SESSION_COOKIE}=${session}; ${cookieAttributes(auth, req.raw)}; Max-Age=${SESSION_TTL_MS / 1000}`,
      );
      return { auth: true, role: principal.role };
    },
  );

  app.delete(
    '/api/session',
    {
      config: { access: 'public' },
      schema: {
        operationId: 'signOut',
        summary: 'Sign the dashboard out',
        response: { 204: { type: 'null', description: 'the cookie is cleared' } },
      },
    },
    async (req, reply) => {
      const session = cookieToken(req.raw);
      if (session !== undefined) await auth.tokens.revokeSession(session);
      void reply.header(
        'set-cookie',
        `${SESSION_COOKIE}=; ${cookieAttributes(auth, req.raw)}; Max-Age=0`,
      );
      return reply.status(204).send();
    },
  );
}
