// Statements written with Kysely's builder, built and compiled once per dialect, then run with new
// values: a hot statement pays the builder's cost (tens of microseconds, more than SQLite takes
// to run it, and a tenth of a busy worker's CPU on PostgreSQL) once, not on every call.
import { CompiledQuery, type Kysely } from 'kysely';

/** Stands for the parameter `name` while a prepared query is compiled. */
class Slot {
  constructor(readonly name: string) {}
}

/** A compiled statement: its text, and for each of its parameters a slot or a fixed value. */
interface Compiled {
  readonly sql: string;
  readonly parameters: readonly unknown[];
}

/** What a prepared query returns: its rows, and for a write the rows it changed. */
export interface PreparedResult<Row> {
  readonly rows: Row[];
  readonly numAffectedRows?: bigint;
}

/** A query built once per dialect by {@link prepareQuery}; see there. */
export interface PreparedQuery<Params extends object, Row> {
  /**
   * Runs the query on `db` (a `Database`'s `db` or a transaction) with `params`, by name (every
   * one given; `null` for NULL). Rows come as the driver returns them; `numAffectedRows` counts
   * the rows an UPDATE, DELETE or INSERT changed. Rejects with a `TypeError` naming a parameter
   * that is missing or `undefined`, before anything runs.
   */
  execute(db: Kysely<any>, params: Params): Promise<PreparedResult<Row>>;
  /**
   * The query with `params`, compiled for `db`, not run: what `withCommit` takes as a
   * transaction's last statement (`withCommit(query.bind(trx, params), value)`). Throws the
   * same `TypeError` as `execute` for a missing parameter.
   */
  bind(db: Kysely<any>, params: Params): { compile(): CompiledQuery<Row> };
}

/**
 * A query written once with Kysely's builder and compiled once per dialect, then run with new
 * values. `build` receives the database and stand-ins for `params`: use each where the builder
 * takes a value (`.where('id', '=', p.id)`, `.set({ turn: p.at })`, `.limit(p.n)`, inside
 * ``sql`…${p.x}…` ``). Parameters are values only: what `build` writes as constants stays
 * constant, and a parameter it reads without placing it as a value (to branch on, as a column
 * name, in a list) is refused with a `TypeError` when the query first compiles.
 *
 * @example
 * const jobById = prepareQuery((db, p: { id: string }) =>
 *   db.selectFrom('jobs').selectAll().where('id', '=', p.id),
 * );
 * const { rows } = await jobById.execute(database.db, { id });
 */
export function prepareQuery<Params extends object, Row>(
  build: (db: Kysely<any>, params: Params) => { compile(db: Kysely<any>): CompiledQuery<Row> },
): PreparedQuery<Params, Row> {
  if (typeof build !== 'function') {
    throw new TypeError(`prepareQuery: build must be a function, got ${typeof build}`);
  }
  // One compiled statement per dialect adapter (a transaction shares its database's adapter).
  // A cache: what it holds follows from `build` and the dialect alone.
  const compiled = new WeakMap<object, Compiled>();
  const compile = (db: Kysely<any>): Compiled => {
    const used = new Set<string>();
    const stand = new Proxy({} as Params, {
      get: (_target, name) => {
        if (typeof name !== 'string') return undefined;
        used.add(name);
        return new Slot(name);
      },
    });
    // A builder compiles itself; a `sql` template with the database it is given.
    const { sql, parameters } = build(db, stand).compile(db);
    const placed = new Set(parameters.flatMap((p) => (p instanceof Slot ? [p.name] : [])));
    for (const name of used) {
      if (!placed.has(name)) {
        throw new TypeError(
          `prepareQuery: parameter '${name}' was read but is not a value of the query; a prepared query takes parameters only as values (no branch, column or list may depend on one)`,
        );
      }
    }
    return { sql, parameters };
  };
  const bound = (db: Kysely<any>, params: Params): CompiledQuery<Row> => {
    const adapter = db.getExecutor().adapter;
    let statement = compiled.get(adapter);
    if (!statement) compiled.set(adapter, (statement = compile(db)));
    const values = statement.parameters.map((p) => {
      if (!(p instanceof Slot)) return p;
      const value = (params as Record<string, unknown>)[p.name];
      if (value === undefined) {
        throw new TypeError(`prepareQuery: parameter '${p.name}' is missing (undefined)`);
      }
      return value;
    });
    return CompiledQuery.raw(statement.sql, values) as CompiledQuery<Row>;
  };
  return {
    async execute(db, params) {
      return db.executeQuery<Row>(bound(db, params));
    },
    bind(db, params) {
      const query = bound(db, params);
      return { compile: () => query };
    },
  };
}
