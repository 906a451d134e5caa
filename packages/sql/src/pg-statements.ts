// PostgreSQL statements prepared by name on each pooled connection, so that a statement run again
// is bound and executed without being parsed and planned again; and the way back to unnamed
// statements when the server connection under a pooled one changes between transactions.
import { createHash } from 'node:crypto';
import type { Logger } from '@rigging/core';
import { SqlError } from './errors.js';

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
 * Makes `client` run every statement with parameters that it has been asked for a second time as
 * a named prepared statement, for at most `naming.size` statements (the first ones that qualify;
 * later ones keep running unnamed). A statement without parameters (`begin`, DDL, several
 * statements in one text) is never named. Names come from a hash of the SQL text and a
 * per-connection generation, so a name never stands for another text.
 *
 * A named statement that fails before running (see {@link failedBeforeRunning}) is run again
 * unnamed when the connection was not in a transaction, so the caller sees its result; inside a
 * transaction (which the failure aborted) the caller gets `sql.statement_invalidated`, which
 * `isRetryableError` accepts and `database.transaction` retries. A lost statement turns naming
 * off for the whole pool (logged once at `warn`): named statements do not survive a pooler that
 * moves sessions between server connections. A stale one is prepared again at its next use; the
 * server's old statement stays until the connection closes (one per such change).
 * @internal
 */
export function nameStatements(client: NameableClient, naming: StatementNaming): void {
  if (naming.size <= 0) return;
  // pg's own query, looked up at each call: instrumentation that wraps the prototype's `query`
  // later (a tracer, a test counting statements) still sees every statement.
  const prototype = Object.getPrototypeOf(client) as NameableClient;
  const query = (config: unknown, values?: unknown, callback?: unknown) =>
    prototype.query.call(client, config, values, callback);
  const named = new Map<string, string>();
  // Texts seen once; cleared when it reaches its bound (one-off statements never fill it up).
  const seen = new Set<string>();
  let generation = 0;
  // The transaction status of the connection's last ReadyForQuery ('I' idle, 'T' in a
  // transaction, 'E' in a failed one). pg runs one statement at a time on a connection.
  let status = 'I';
  client.connection?.on?.('readyForQuery', (message) => {
    if (typeof message.status === 'string') status = message.status;
  });
  const nameOf = (text: string): string | undefined => {
    if (!naming.enabled) return undefined;
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
  client.query = (config: unknown, values?: unknown, callback?: unknown) => {
    if (
      typeof config !== 'string' ||
      !Array.isArray(values) ||
      values.length === 0 ||
      callback !== undefined
    ) {
      return query(config, values, callback);
    }
    const name = nameOf(config);
    if (name === undefined) return query(config, values);
    return (query({ name, text: config, values }) as Promise<unknown>).catch((error: unknown) => {
      const why = failedBeforeRunning(error);
      if (why === undefined) throw error;
      forget(config, name);
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
      if (status === 'I') return query(config, values);
      throw new SqlError(
        'sql.statement_invalidated',
        `a prepared statement could not run (${(error as Error).message}); nothing of it ran, ` +
          'but its transaction is aborted: run the transaction again',
        { cause: error },
      );
    });
  };
}
