// PostgreSQL statements prepared by name on each pooled connection, so that a statement run again
// is bound and executed without being parsed and planned again. Types only flow out of this
// module: it imports nothing of the package.
import { createHash } from 'node:crypto';

/** A pg `Client`, as far as naming its statements needs it. @internal */
export interface NameableClient {
  query(config: unknown, values?: unknown, callback?: unknown): unknown;
  /** pg's record of the statements this connection has parsed, by name. */
  connection?: { parsedStatements?: Record<string, unknown> };
}

/**
 * Errors after which a connection no longer has the named statement it was asked to run, or has
 * one that cannot run any more: `26000` (it does not exist: the session was reset) and `0A000`
 * (its cached plan must not change result type: a table it reads changed). The text gets a new
 * name on its next use.
 */
const STALE = new Set(['26000', '0A000']);

/**
 * Makes `client` run every statement with parameters that it has been asked for a second time as
 * a named prepared statement, for at most `size` statements (the first ones that qualify; later
 * ones keep running unnamed). A statement without parameters (`begin`, DDL, several statements in
 * one text) is never named. Names come from a hash of the SQL text and a per-connection
 * generation, so a name never stands for another text.
 * @internal
 */
export function nameStatements(client: NameableClient, size: number): void {
  if (size <= 0) return;
  const query = client.query.bind(client);
  const named = new Map<string, string>();
  // Texts seen once; cleared when it reaches its bound (one-off statements never fill it up).
  const seen = new Set<string>();
  let generation = 0;
  const nameOf = (text: string): string | undefined => {
    const name = named.get(text);
    if (name !== undefined) return name;
    if (named.size >= size) return undefined;
    if (!seen.has(text)) {
      if (seen.size >= 4 * size) seen.clear();
      seen.add(text);
      return undefined;
    }
    seen.delete(text);
    const hash = createHash('sha256').update(text).digest('base64url').slice(0, 32);
    const fresh = `rigging_${hash}_${generation++}`;
    named.set(text, fresh);
    return fresh;
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
      if (STALE.has((error as { code?: string } | null)?.code ?? '')) {
        named.delete(config);
        const parsed = client.connection?.parsedStatements;
        if (parsed) delete parsed[name];
      }
      throw error;
    });
  };
}
