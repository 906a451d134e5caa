/**
 * `/placement`: the Placement-compatible API of `@rigging/reshape/http` on the cloud's reshape
 * store, with Placement's own token semantics once tokens are required.
 */
import { createPlacementHandler } from '@rigging/reshape/http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Cloud } from '../cloud/index.js';
import type { Auth } from './auth.js';
import type { HttpError } from './errors.js';

const PUBLIC = { access: 'public' } as const;

/**
 * Largest Placement request body. Placement's biggest real requests are `POST /reshaper` and
 * `POST /allocations` for a whole host (every provider's inventories and every consumer's
 * allocations): a host with 64 providers and 2,000 consumers sends about 400 KiB.
 */
export const PLACEMENT_BODY_LIMIT = 1024 * 1024;

/** Mounts the Placement API under `/placement` (left out of the OpenAPI document). */
export async function registerPlacementRoutes(
  app: FastifyInstance,
  cloud: Cloud,
  auth: Auth,
): Promise<void> {
  await app.register(async (scope) => {
    // The Placement handler reads and parses bodies itself: leave the request stream unread.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, _payload, done) => done(null, undefined));
    // Placement checks X-Auth-Token itself (401/403 with its own error body) once tokens are
    // required; until then every caller is admin, as with Placement's noauth.
    const common = { basePath: '/placement', maxBodyBytes: PLACEMENT_BODY_LIMIT };
    const open = createPlacementHandler(cloud.reshape, common);
    const checked = createPlacementHandler(cloud.reshape, {
      ...common,
      auth: {
        validate: async (token) => {
          const principal = await auth.tokens.verify(token);
          return principal && { roles: [principal.role] };
        },
      },
    });
    const route = async (req: FastifyRequest, reply: FastifyReply) => {
      const active = await auth.active();
      const token = req.headers['x-auth-token'];
      // A wrong token counts as a failure (429 past the limit; else Placement's own 401).
      // A valid one always passes.
      if (active && typeof token === 'string' && !(await auth.tokens.verify(token))) {
        try {
          auth.refuse(req.raw, token);
        } catch (error) {
          if ((error as HttpError).statusCode === 429) throw error;
        }
      }
      reply.hijack();
      (active ? checked : open)(req.raw, reply.raw);
    };
    scope.all('/placement', { config: PUBLIC, schema: { hide: true } }, route);
    scope.all('/placement/*', { config: PUBLIC, schema: { hide: true } }, route);
  });
}
