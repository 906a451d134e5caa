/**
 * What an API answer may say about the server: no stack traces, no absolute paths. Failures
 * recorded by the task engine and the queue keep their stack and full message in the database
 * and the log; answers carry the code, the message with server directories cut off, and the
 * request id.
 */
import { homedir, tmpdir } from 'node:os';
import { sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Keys never sent: where the code failed. */
const DROPPED = new Set(['stack', 'cause']);

/** Deepest object an answer is scrubbed to (deeper values are sent as they are: none are). */
const MAX_DEPTH = 32;

/**
 * An absolute POSIX path or `file://` URL of two parts or more, up to the next quote, space or
 * bracket (not part of a URL, not an API path such as `/api/…` or `/placement/…`).
 */
const ABSOLUTE = /(?:file:\/\/|(?<![\w.:/]))\/(?!api\/|placement\/)(?:[\w.@+~-]+\/)+[\w.@+~-]*/g;
/** An absolute Windows path. */
const WINDOWS = /\b[A-Za-z]:\\(?:[\w.@+~ -]+\\)*[\w.@+~-]*/g;

/** Cuts server directories out of messages and drops stacks from answers. */
export class Redactor {
  /** Directories cut from the front of a path (longest first), each with its separator. */
  readonly #roots: string[];

  constructor(roots: readonly string[]) {
    const here = fileURLToPath(new URL('.', import.meta.url));
    this.#roots = [...roots, here, process.cwd(), tmpdir(), homedir()]
      .filter((r) => r.length > 1)
      .map((r) => (r.endsWith(sep) ? r : r + sep))
      .sort((a, b) => b.length - a.length);
  }

  /** `text` with every absolute path made relative to its root, or cut to its last two parts. */
  text(text: string): string {
    let out = text;
    for (const root of this.#roots) {
      if (out.includes(root)) out = out.split(root).join('');
    }
    const shorten = (path: string) => {
      const parts = path.split(/[\\/]/).filter(Boolean);
      if (parts.length <= 1 && !path.startsWith('file:')) return path;
      return `…/${parts.slice(-2).join('/')}`;
    };
    return out.replace(ABSOLUTE, shorten).replace(WINDOWS, shorten);
  }

  /** A copy of `value` without `stack`/`cause` keys and with every string passed through {@link text}. */
  value(value: unknown, depth = 0): unknown {
    if (typeof value === 'string') return this.text(value);
    if (depth > MAX_DEPTH || value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) return value.map((v) => this.value(v, depth + 1));
    if (value instanceof Date || Buffer.isBuffer(value)) return value;
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) {
      if (DROPPED.has(key)) continue;
      out[key] = this.value(v, depth + 1);
    }
    return out;
  }
}
