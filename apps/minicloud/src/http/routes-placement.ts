/**
 * `/placement`: the Placement-compatible API of `@rigging/reshape/http` on the cloud's reshape
 * store, with Placement's own token semantics once tokens are required.
 */
import { createPlacementHandler } from '@rigging/reshape/http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Cloud } from '../cloud/index.js';
import type { Auth } from './auth.js';

const PUBLIC = { access: 'public' } as const;

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
    const open = createPlacementHandler(cloud.reshape, { basePath: '/placement' });
    const checked = createPlacementHandler(cloud.reshape, {
      basePath: '/placement',
      auth: {
        validate: async (token, req) => {
          const principal = await auth.verify(req, token);
          return principal && { roles: [principal.role] };
        },
      },
    });
    const route = async (req: FastifyRequest, reply: FastifyReply) => {
      const active = await auth.active();
      if (active) auth.checkLimit(req.raw);
      reply.hijack();
      (active ? checked : open)(req.raw, reply.raw);
    };
    scope.all('/placement', { config: PUBLIC, schema: { hide: true } }, route);
    scope.all('/placement/*', { config: PUBLIC, schema: { hide: true } }, route);
  });
}
