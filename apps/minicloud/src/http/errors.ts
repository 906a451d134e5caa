import { RiggingError } from '@rigging/core';

/** The body of every error answer of the API: `{ error: { code, message } }`. */
export interface ApiErrorBody {
  error: { code: string; message: string; details?: unknown; requestId?: string };
}

/** An error the API answers with a given status (thrown by route handlers). */
export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    /** Extra response headers (`retry-after`, `www-authenticate`). */
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

/**
 * HTTP status of the `RiggingError` codes a user can cause. Anything not listed is a bug or an
 * outage and answers 500 with a generic body (the details go to the log).
 */
export const STATUS_BY_CODE: Readonly<Record<string, number>> = {
  'minicloud.invalid_input': 400,
  'minicloud.usage': 400,
  'minicloud.env_not_found': 404,
  'minicloud.package_not_found': 404,
  'minicloud.env_exists': 409,
  'minicloud.no_compute_node': 409,
  'minicloud.demo_running': 409,
  'locks.timeout': 409,
  'package-cache.invalid_ref': 400,
  'package-cache.unsafe_archive': 400,
  'package-cache.unsupported_format': 400,
  'package-cache.corrupt_archive': 400,
  'package-cache.too_large': 413,
  'package-cache.too_many_entries': 413,
  'package-cache.ratio_exceeded': 413,
  'async-queue.not_json': 400,
  'async-queue.unknown_type': 400,
  'async-queue.closed': 503,
  'package-cache.closed': 503,
};

/** Status and body for any error thrown while answering a request. */
export function toApiError(error: unknown): {
  status: number;
  body: ApiErrorBody;
  internal: boolean;
  headers?: Readonly<Record<string, string>>;
} {
  if (error instanceof HttpError) {
    return {
      status: error.statusCode,
      body: { error: { code: error.code, message: error.message } },
      internal: false,
      headers: error.headers,
    };
  }
  if (RiggingError.isInstance(error)) {
    const status = STATUS_BY_CODE[error.code];
    if (status !== undefined) {
      return {
        status,
        body: { error: { code: error.code, message: error.message } },
        internal: status >= 500,
      };
    }
  }
  const e = error as {
    validation?: unknown;
    validationContext?: string;
    statusCode?: number;
    code?: string;
    message?: string;
  } | null;
  if (e && Array.isArray(e.validation)) {
    return {
      status: 400,
      body: { error: { code: 'minicloud.invalid_input', message: e.message ?? 'invalid request' } },
      internal: false,
    };
  }
  // Fastify's own client errors: malformed JSON, empty JSON body, body too large, bad media type.
  if (
    e &&
    typeof e.statusCode === 'number' &&
    e.statusCode >= 400 &&
    e.statusCode < 500 &&
    typeof e.message === 'string'
  ) {
    return {
      status: e.statusCode,
      body: {
        error: {
          code: fastifyCode(e.statusCode, e.code),
          message: e.message,
        },
      },
      internal: false,
    };
  }
  return {
    status: 500,
    body: {
      error: {
        code: 'minicloud.internal',
        message: 'internal error (see the server log; set MINICLOUD_LOG_LEVEL=error)',
      },
    },
    internal: true,
  };
}

function fastifyCode(status: number, code: string | undefined): string {
  switch (status) {
    case 413:
      return 'minicloud.body_too_large';
    case 415:
      return 'minicloud.unsupported_media_type';
    default:
      return code === 'FST_ERR_CTP_EMPTY_JSON_BODY' || code?.startsWith('FST_ERR_CTP')
        ? 'minicloud.invalid_body'
        : 'minicloud.invalid_input';
  }
}
