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
 * Whether `error`, from running a named statement, means the connection no longer has that
 * statement (`26000`: the session was reset) or has one that can never run again (`0A000` from
 * `RevalidateCachedQuery`: "cached plan must not change result type", a table it reads changed).
 * The text then gets a new name at its next use; the server's old statement, in the second case,
 * stays until the connection closes (one per such change). Any other error leaves the name.
 */
function isStale(error: unknown): boolean {
  const e = error as { code?: unknown; routine?: unknown } | null;
  return e?.code === '26000' || (e?.code === '0A000' && e.routine === 'RevalidateCachedQuery');
}

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
      if (isStale(error)) {
        named.delete(config);
        const parsed = client.connection?.parsedStatements;
        if (parsed) delete parsed[name];
      }
      throw error;
    });
  };
}
