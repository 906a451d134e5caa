/**
 * The Fastify instance under `minicloud serve`: body and time limits, strict validation, and one
 * error body shape (`{ error: { code, message } }`) for every error, unknown routes included.
 */
import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type { Logger } from '@rigging/core';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
} from 'fastify';
import { toApiError } from './errors.js';
import { Redactor } from './redact.js';

/** Largest body of every route that does not set its own. */
const BODY_LIMIT = 64 * 1024;

/** Time a client has to send a whole request (headers: a third of it). */
const REQUEST_TIMEOUT_MS = 30_000;

/** How often Node looks for requests past their header or request timeout. */
const CONNECTIONS_CHECK_MS = 1_000;

/** Connections served at once; more are closed as they arrive. */
export const MAX_CONNECTIONS = 1_000;

/**
 * Longest route parameter the router matches: the longest valid key (255 characters),
 * percent-encoded. Longer ones match no route (404).
 */
const MAX_PARAM_LENGTH = 255 * 3;

/** Longest part of a request path an error message repeats. */
const ECHO_PATH = 120;

/** `path` as an error message may repeat it (cut at {@link ECHO_PATH} characters). */
export function echoPath(path: string): string {
  return path.length > ECHO_PATH ? `${path.slice(0, ECHO_PATH)}…` : path;
}

/** Status and stable code of the errors Node's HTTP parser raises before a route runs. */
function clientErrorAnswer(code: string | undefined): [number, string, string] {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return [431, 'minicloud.headers_too_large', 'request headers too large'];
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [408, 'minicloud.request_timeout', 'request not received in time'];
    default:
      return [400, 'minicloud.bad_request', 'malformed HTTP request'];
  }
}

/** Creates the app with its limits and its error and not-found handlers (no routes yet). */
export function createApp(
  logger: Logger | undefined,
  redactor: Redactor = new Redactor([]),
): FastifyInstance {
  const app = Fastify({
    ...(logger ? { loggerInstance: logger as unknown as FastifyBaseLogger } : {}),
    bodyLimit: BODY_LIMIT,
    // Refuse what the schemas do not describe instead of silently dropping or coercing it.
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
    return503OnClosing: true,
    // A client must send its whole request within this time (slow uploads, stalled bodies).
    requestTimeout: REQUEST_TIMEOUT_MS,
    // Long keys are refused by the schemas with a clear 400; beyond any valid key, no route.
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    // Node only enforces headersTimeout/requestTimeout when it checks (default: every 30 s).
    http: { connectionsCheckingInterval: CONNECTIONS_CHECK_MS },
    // The answer's request id, echoed in error bodies and logs (`x-request-id`).
    requestIdHeader: false,
    genReqId: () => randomUUID(),
    // One log line per request, once answered (see the onResponse hook), instead of two.
    logController: new LogController({ disableRequestLogging: true }),
    // Errors of the HTTP parser (431 headers too large, 408 timeout, malformed requests): the
    // same body shape as every other error, never Node's bare status line.
    clientErrorHandler: (error: NodeJS.ErrnoException, socket) => {
      if (!socket.writable || (socket as { _httpMessage?: unknown })._httpMessage) {
        socket.destroy();
        return;
      }
      const [status, code, message] = clientErrorAnswer(error.code);
      const body = JSON.stringify({ error: { code, message } });
      socket.end(
        `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json; charset=utf-8\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    },
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
  app.server.maxConnections = MAX_CONNECTIONS;
  // No text/plain parser: an HTML form could otherwise post to the API without a preflight.
  app.removeContentTypeParser('text/plain');
  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });
  app.addHook('onResponse', async (request, reply) => {
    request.log.info(
      { req: request, res: reply, responseTime: reply.elapsedTime },
      'request completed',
    );
  });
  // No stack and no server directory in any answer (the log keeps them).
  app.addHook('preSerialization', async (_request, _reply, payload) => redactor.value(payload));

  app.setErrorHandler((error, request, reply) => {
    const { status, body, internal, headers } = toApiError(error);
    if (internal) request.log.error({ err: error }, 'minicloud serve: request failed');
    const message = redactor.text(body.error.message);
    if (!internal && message !== body.error.message) {
      request.log.warn({ err: error }, 'minicloud serve: request refused');
    }
    body.error.message = message;
    body.error.requestId = request.id;
    void reply
      .status(status)
      .headers(headers ?? {})
      .send(body);
  });
  // Every route's URL pattern by method, for 405 answers (not the dashboard's catch-all).
  const patterns: { method: string; pattern: RegExp }[] = [];
  app.addHook('onRoute', (route) => {
    if (route.url === '/*') return;
    const source = route.url
      .split('/')
      .map((part) =>
        part.startsWith(':')
          ? '[^/]+'
          : part === '*'
            ? '.*'
            : part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'),
      )
      .join('/');
    for (const method of [route.method].flat()) {
      patterns.push({ method, pattern: new RegExp(`^${source}$`) });
    }
  });
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0]!;
    const allowed = [
      ...new Set(patterns.filter((p) => p.pattern.test(path)).map((p) => p.method)),
    ].sort();
    if (allowed.length > 0) {
      void reply
        .status(405)
        .header('allow', allowed.join(', '))
        .send({
          error: {
            code: 'minicloud.method_not_allowed',
            message: `${request.method} is not allowed here (allowed: ${allowed.join(', ')})`,
            requestId: request.id,
          },
        });
      return;
    }
    void reply.status(404).send({
      error: {
        code: 'minicloud.not_found',
        message: `no route ${request.method} ${echoPath(request.url.split('?')[0]!)}`,
        requestId: request.id,
      },
    });
  });
  return app;
}
