/**
 * Authentication and roles of `minicloud serve`: a token in `Authorization: Bearer`, or the
 * dashboard's session cookie, checked before every `/api` route against the access the route
 * declares in `config.access`; clients that keep failing are refused for a while (429).
 */
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { FailureLimiter } from '../auth/limiter.js';
import { allows, type Access, type Principal, type TokenStore } from '../auth/tokens.js';
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
}

/** What a route is open to: an access level, or `public` (no token). */
export type RouteAccess = Access | 'public';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Who may call the route (default: `admin`). */
    access?: RouteAccess;
  }
}

/** The dashboard's session cookie (the token itself, HttpOnly, SameSite=Strict). */
export const SESSION_COOKIE = 'minicloud_token';

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

/** Checks tokens and roles for the HTTP server. */
export class Auth {
  readonly tokens: TokenStore;
  readonly mode: AuthMode;
  readonly limiter: FailureLimiter;

  constructor(options: AuthOptions) {
    this.tokens = options.tokens;
    this.mode = options.mode;
    this.limiter = options.limiter ?? new FailureLimiter();
  }

  /** Whether requests need a token right now. */
  async active(): Promise<boolean> {
    return this.mode === 'required' || (await this.tokens.configured());
  }

  /** Throws 429 `minicloud.rate_limited` when the client failed too often lately. */
  checkLimit(req: IncomingMessage): void {
    const waitMs = this.limiter.blockedFor(clientAddress(req));
    if (waitMs > 0) {
      throw new HttpError(
        429,
        'minicloud.rate_limited',
        `too many failed authentications from this address; retry in ${Math.ceil(waitMs / 1000)} s`,
        { 'retry-after': String(Math.ceil(waitMs / 1000)) },
      );
    }
  }

  /**
   * The caller of `req`, or a 401 (`minicloud.unauthorized`) when a token is required and
   * missing or wrong (a wrong one counts as a failure of the client).
   */
  async principal(req: IncomingMessage): Promise<Principal> {
    if (!(await this.active())) return OPEN;
    this.checkLimit(req);
    const token = requestToken(req);
    if (token === undefined) {
      throw new HttpError(401, 'minicloud.unauthorized', 'this API needs a token', {
        'www-authenticate': 'Bearer realm="minicloud"',
      });
    }
    const principal = await this.verify(req, token);
    if (!principal) {
      throw new HttpError(401, 'minicloud.unauthorized', 'the token is not valid', {
        'www-authenticate': 'Bearer realm="minicloud", error="invalid_token"',
      });
    }
    return principal;
  }

  /** Verifies `token`, counting a failure of the client when it is not valid. */
  async verify(req: IncomingMessage, token: string): Promise<Principal | undefined> {
    const principal = await this.tokens.verify(token);
    if (!principal) this.limiter.fail(clientAddress(req));
    return principal;
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
 * Adds the token check to every route of `app` (by its `config.access`, default `admin`) and
 * the dashboard's session routes: `GET /api/session` (who am I), `POST /api/session` (sign in
 * with `{ token }`: sets the HttpOnly cookie) and `DELETE /api/session` (sign out).
 */
export function installAuth(app: FastifyInstance, auth: Auth): void {
  app.addHook('onRequest', async (req: FastifyRequest) => {
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
      schema: { summary: 'Who the caller is', response: { 200: sessionSchema } },
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
        summary: 'Sign the dashboard in with a token (sets an HttpOnly cookie)',
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['token'],
          properties: { token: { type: 'string', minLength: 1, maxLength: 256 } },
        },
        response: { 200: sessionSchema },
      },
    },
    async (req, reply: FastifyReply) => {
      const { token } = req.body as { token: string };
      if (!(await auth.active())) return { auth: false, role: OPEN.role };
      auth.checkLimit(req.raw);
      const principal = await auth.verify(req.raw, token);
      if (!principal) throw new HttpError(401, 'minicloud.unauthorized', 'the token is not valid');
      void reply.header(
        'set-cookie',
        `${SESSION_COOKIE}=${encodeURIComponent(token)}; Path=/; HttpOnly; SameSite=Strict`,
      );
      return { auth: true, role: principal.role };
    },
  );

  app.delete(
    '/api/session',
    {
      config: { access: 'public' },
      schema: {
        summary: 'Sign the dashboard out',
        response: { 204: { type: 'null', description: 'the cookie is cleared' } },
      },
    },
    async (_req, reply) => {
      void reply.header(
        'set-cookie',
        `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`,
      );
      return reply.status(204).send();
    },
  );
}
