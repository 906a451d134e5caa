// PostgreSQL statements prepared by name on each pooled connection, so that a statement run again
// is bound and executed without being parsed and planned again; and the way back to unnamed
// statements when the server connection under a pooled one changes between transactions.
import { createHash } from 'node:crypto';
import type { Logger } from '@rigging/core';
import { SqlError } from './errors.js';
import {
  canCarry,
  isCommit,
  isOpening,
  isRollback,
  pipelinedQueryClass,
  unsentResult,
  WITH_COMMIT,
  type HeldStatement,
  type PgQueryClass,
} from './pg-pipeline.js';

/** A pg `Client`, as far as naming its statements needs it. @internal */
export interface NameableClient {
  query(config: unknown, values?: unknown, callback?: unknown): unknown;
  /** pg's connection: its record of the statements it has parsed, by name, and its messages. */
  connection?: {
    parsedStatements?: Record<string, unknown>;
    on?(event: 'readyForQuery', listener: (message: { status?: string }) => void): unknown;
  };
}

/** What the connections of one pool share: whether they still name statements. @internal */
export interface StatementNaming {
  /** Statements each connection names; `0` names none. */
  readonly size: number;
  /** False once a connection lost a statement it had prepared: a pooler is moving sessions. */
  enabled: boolean;
  readonly logger: Logger;
}

/** Named statements per pooled PostgreSQL connection unless the caller says otherwise. @internal */
export const DEFAULT_PREPARED_STATEMENTS = 100;

/**
 * Why a named statement failed before it ran, if it did: `'lost'` when the server connection
 * does not hold the name we prepared (`26000`: another server connection behind a pooler, or the
 * session was reset) or holds it already without this process having prepared it there
 * (`42P05`: a pooler gave us a server connection another client prepared it on); `'stale'` when
 * the server refuses its plan (`0A000` from `RevalidateCachedQuery`, "cached plan must not change
 * result type": a table it reads changed). Both are raised at Parse or Bind, before Execute, so
 * nothing of the statement ran. Any other error is the statement's own.
 */
function failedBeforeRunning(error: unknown): 'lost' | 'stale' | undefined {
  const e = error as { code?: unknown; routine?: unknown } | null;
  if (e?.code === '26000' || e?.code === '42P05') return 'lost';
  if (e?.code === '0A000' && e.routine === 'RevalidateCachedQuery') return 'stale';
  return undefined;
}

/**
 * Wraps `client.query` with what this package adds to each pooled pg connection:
 *
 * - **Named statements.** Every statement with parameters that it has been asked for a second
 *   time runs as a named prepared statement, for at most `naming.size` statements (the first
 *   ones that qualify; later ones keep running unnamed; `0` names none). A statement without
 *   parameters (`begin`, DDL, several statements in one text) is never named. Names come from a
 *   hash of the SQL text and a per-connection generation, so a name never stands for another
 *   text. A named statement that fails before running (see {@link failedBeforeRunning}) is run
 *   again unnamed when the connection was not in a transaction, so the caller sees its result;
 *   inside a transaction (which the failure aborted) the caller gets `sql.statement_invalidated`,
 *   which `isRetryableError` accepts and `database.transaction` retries. A lost statement turns
 *   naming off for the whole pool (logged once at `warn`): named statements do not survive a
 *   pooler that moves sessions between server connections. A stale one is prepared again at its
 *   next use; the server's old statement stays until the connection closes (one per such change).
 * - **A pipeline around a transaction** (when `Query` is pg's `Query` class, see
 *   `pg-pipeline.ts`): a transaction's `begin` on an idle connection is answered at once and
 *   sent with the transaction's first statement; the statements marked with
 *   {@link WITH_COMMIT} (`withCommit`, `sendWithCommit`) are answered at once and sent, in the
 *   order they came, with the `commit` that follows them — all in one write and one round trip.
 *   A statement sent before the commit takes the held ones along ahead of it, in its round trip
 *   when it has parameters. A statement that cannot carry them (one without parameters) goes
 *   between them, in separate round trips as before. A transaction that ends with nothing sent sends nothing; one rolled
 *   back drops its held statements.
 * @internal
 */
export function wrapPgClient(
  client: NameableClient,
  naming: StatementNaming,
  Query?: PgQueryClass,
): void {
  // pg's own query, looked up at each call: instrumentation that wraps the prototype's `query`
  // later (a tracer, a test counting statements) still sees every statement.
  const prototype = Object.getPrototypeOf(client) as NameableClient;
  const query = (config: unknown, values?: unknown, callback?: unknown) =>
    prototype.query.call(client, config, values, callback);
  const Pipelined = Query ? pipelinedQueryClass(Query) : undefined;
  const named = new Map<string, string>();
  // Texts seen once; cleared when it reaches its bound (one-off statements never fill it up).
  const seen = new Set<string>();
  let generation = 0;
  // The transaction status of the connection's last ReadyForQuery ('I' idle, 'T' in a
  // transaction, 'E' in a failed one), or 'T' once a statement carrying an opening is sent. pg
  // runs one statement at a time on a connection.
  let status = 'I';
  client.connection?.on?.('readyForQuery', (message) => {
    if (typeof message.status === 'string') status = message.status;
  });
  // The opening held back on this connection, and the statements held for the commit, in order.
  let opening: string | undefined;
  let held: HeldStatement[] = [];

  /**
   * Sends one statement, with the held opening when there is one and the `before` statements
   * ahead of it, and `closing` (a `commit`) right after it (all in its round trip when it can
   * carry them).
   */
  const send = (
    config: unknown,
    values?: unknown,
    callback?: unknown,
    closing?: string,
    before: HeldStatement[] = [],
  ): unknown => {
    if (opening === undefined && closing === undefined && before.length === 0) {
      return query(config, values, callback);
    }
    const open = opening;
    opening = undefined;
    const text = typeof config === 'string' ? config : undefined;
    // A text, or a config of a text, its values and a name (this wrapper's named statements):
    // nothing else of pg's query config (row mode, types, a submittable) is carried over.
    const plain =
      text !== undefined ||
      (typeof config === 'object' &&
        config !== null &&
        Object.keys(config).every((k) => k === 'name' || k === 'text' || k === 'values'));
    const name = (config as { name?: string } | null)?.name;
    const statement = text ?? (config as { text?: unknown } | null)?.text;
    const queryValues = text === undefined ? (config as { values?: unknown }).values : values;
    if (
      Pipelined &&
      plain &&
      typeof statement === 'string' &&
      callback === undefined &&
      canCarry(queryValues)
    ) {
      if (open !== undefined) status = 'T';
      return new Promise((resolve, reject) => {
        const config = { text: statement, values: queryValues, ...(name ? { name } : {}) };
        const done = (error: Error | null, result: unknown) =>
          error ? reject(error) : resolve(result);
        query(new Pipelined(config, done, { opening: open, closing, before }));
      });
    }
    // The opening first, then the statement (pg sends a connection's queries in order).
    if (
      typeof callback === 'function' ||
      typeof (config as { submit?: unknown }).submit === 'function'
    ) {
      // Its own failure (a lost connection) fails the statement after it too.
      if (open !== undefined) void (query(open, []) as Promise<unknown>).catch(() => {});
      return query(config, values, callback);
    }
    const opened = (async () => {
      if (open !== undefined) await query(open, []);
      for (const b of before) await query(b.name ? b : b.text, b.name ? undefined : b.values);
    })();
    return opened.then(async () => {
      const result = await (query(config, values) as Promise<unknown>);
      if (closing !== undefined) await query(closing, []);
      return result;
    });
  };

  const nameOf = (text: string): string | undefined => {
    if (!naming.enabled || naming.size <= 0) return undefined;
    const name = named.get(text);
    if (name !== undefined) return name;
    if (named.size >= naming.size) return undefined;
    if (!seen.has(text)) {
      if (seen.size >= 4 * naming.size) seen.clear();
      seen.add(text);
      return undefined;
    }
    seen.delete(text);
    const hash = createHash('sha256').update(text).digest('base64url').slice(0, 32);
    const fresh = `rigging_${hash}_${generation++}`;
    named.set(text, fresh);
    return fresh;
  };
  const forget = (text: string, name: string) => {
    named.delete(text);
    const parsed = client.connection?.parsedStatements;
    if (parsed) delete parsed[name];
  };
  /**
   * Runs `text` with `values`, by name when it qualifies (see above), with the statements held
   * for the commit, `before`, ahead of it and `closing` after it.
   */
  const run = (
    text: string,
    values: unknown,
    closing?: string,
    before: HeldStatement[] = [],
  ): Promise<unknown> => {
    const ahead = before.map((b) => ({ ...b, name: nameOf(b.text) }));
    if (!Array.isArray(values) || values.length === 0) {
      return send(text, values, undefined, closing, ahead) as Promise<unknown>;
    }
    const name = nameOf(text);
    const statement = name === undefined ? text : { name, text, values };
    const sent = send(
      statement,
      name === undefined ? values : undefined,
      undefined,
      closing,
      ahead,
    );
    return (sent as Promise<unknown>).catch((error: unknown) => {
      const why = failedBeforeRunning(error);
      if (why === undefined) throw error;
      // Any of them may be the one refused: all are prepared again under new names.
      if (name !== undefined) forget(text, name);
      for (const b of ahead) if (b.name !== undefined) forget(b.text, b.name);
      if (why === 'lost' && naming.enabled) {
        naming.enabled = false;
        naming.logger.warn(
          { err: error },
          'PostgreSQL lost a statement this connection had prepared (a pooler moving sessions ' +
            'between server connections?); statements run unnamed from now on. Set ' +
            'preparedStatements: 0 to start that way.',
        );
      }
      // The status now is the one the statement was sent in, or the one after its failure if
      // that has arrived ('I' again outside a transaction, 'E' inside): either tells.
      if (status === 'I') {
        return send(text, values, undefined, closing, before) as Promise<unknown>;
      }
      throw new SqlError(
        'sql.statement_invalidated',
        `a prepared statement could not run (${(error as Error).message}); nothing of it ran, ` +
          'but its transaction is aborted: run the transaction again',
        { cause: error },
      );
    });
  };

  client.query = (config: unknown, values?: unknown, callback?: unknown) => {
    if (typeof config !== 'string' || callback !== undefined) return send(config, values, callback);
    if (Pipelined) {
      const bare = values === undefined || (Array.isArray(values) && values.length === 0);
      if (
        bare &&
        isOpening(config) &&
        opening === undefined &&
        held.length === 0 &&
        status === 'I'
      ) {
        opening = config;
        return Promise.resolve(unsentResult(config));
      } else if (
        config.startsWith(WITH_COMMIT) &&
        canCarry(values) &&
        (opening !== undefined || status === 'T')
      ) {
        held.push({ text: config.slice(WITH_COMMIT.length), values });
        return Promise.resolve(unsentResult(''));
      } else if (bare && held.length > 0 && isCommit(config)) {
        const before = held;
        held = [];
        const last = before.pop()!;
        return run(last.text, last.values, config, before).then(() => unsentResult(config));
      } else if (bare && (isCommit(config) || isRollback(config))) {
        held = [];
        if (opening !== undefined) {
          opening = undefined;
          return Promise.resolve(unsentResult(config));
        }
      } else if (held.length > 0) {
        // A statement after those held for the commit: the held ones go first, in its round
        // trip when it can carry them (it has parameters), else in one of their own.
        const before = held;
        held = [];
        if (canCarry(values)) return run(config, values, undefined, before);
        const last = before.pop()!;
        return run(last.text, last.values, undefined, before).then(() => run(config, values));
      }
    }
    return run(config, values);
  };
}
