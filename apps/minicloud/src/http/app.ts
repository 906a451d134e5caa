/**
 * The Fastify instance under `minicloud serve`: body and time limits, strict validation, and one
 * error body shape (`{ error: { code, message } }`) for every error, unknown routes included.
 */
import type { Logger } from '@rigging/core';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import { toApiError } from './errors.js';

/** Largest body of every route that does not set its own. */
const BODY_LIMIT = 64 * 1024;

/** Time a client has to send a whole request (headers: a third of it). */
const REQUEST_TIMEOUT_MS = 30_000;

/** Creates the app with its limits and its error and not-found handlers (no routes yet). */
export function createApp(logger: Logger | undefined): FastifyInstance {
  const app = Fastify({
    ...(logger ? { loggerInstance: logger as unknown as FastifyBaseLogger } : {}),
    bodyLimit: BODY_LIMIT,
    // Refuse what the schemas do not describe instead of silently dropping or coercing it.
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
    return503OnClosing: true,
    // A client must send its whole request within this time (slow uploads, stalled bodies).
    requestTimeout: REQUEST_TIMEOUT_MS,
    // Long keys are refused by the schemas with a clear 400, not by the router.
    routerOptions: { maxParamLength: 1000 },
    // Errors the router raises before a route runs (bad URL encoding, …): same body shape.
    frameworkErrors: (error, _request, reply) => {
      const { status, body, headers } = toApiError(error);
      void (reply as FastifyReply)
        .status(status)
        .headers(headers ?? {})
        .send(body);
    },
  });
  app.server.headersTimeout = REQUEST_TIMEOUT_MS / 3;

  app.setErrorHandler((error, request, reply) => {
    const { status, body, internal, headers } = toApiError(error);
    if (internal) request.log.error({ err: error }, 'minicloud serve: request failed');
    void reply
      .status(status)
      .headers(headers ?? {})
      .send(body);
  });
  app.setNotFoundHandler((request, reply) => {
    void reply.status(404).send({
      error: {
        code: 'minicloud.not_found',
        message: `no route ${request.method} ${request.url.split('?')[0]}`,
      },
    });
  });
  return app;
}
