// PostgreSQL: a transaction's opening statement (`begin`, `start transaction …`) held back on its
// pooled connection and sent with the transaction's first statement, in the same write and under
// the same Sync: one round trip fewer per transaction, the same transaction.

/** The messages a pg `Connection` sends, as far as the opening needs them. @internal */
interface PgConnection {
  stream: { cork?(): void; uncork?(): void };
  parse(query: { text: string; name: string }): void;
  bind(config: { portal: string; statement: string; values: unknown[] }): void;
  execute(config: { portal: string; rows: number }): void;
}

/** pg's `Query`, as far as a subclass that sends an opening before it needs it. @internal */
export interface PgQuery {
  submit(connection: PgConnection): unknown;
  handleCommandComplete(message: unknown, connection: PgConnection): void;
}

/** pg's `Query` class (`pg.Query`). @internal */
export type PgQueryClass = new (
  config: { text: string; values: unknown[]; name?: string },
  values: undefined,
  callback: (error: Error | null, result: unknown) => void,
) => PgQuery;

/**
 * The texts Kysely opens a transaction with: `begin`, or `start transaction` with an isolation
 * level and an access mode. Nothing else is held back (a `begin` with options of its own, or one
 * in a text of several statements, is sent as it comes).
 */
const OPENING =
  /^(?:begin|start transaction(?: isolation level (?:serializable|repeatable read|read committed|read uncommitted))?(?: read (?:only|write))?)$/i;
/** The texts that end a transaction: with nothing sent since its opening, nothing is sent. */
const CLOSING = /^(?:commit|rollback)$/i;

/** Whether `text` opens a transaction the way {@link OPENING} describes. @internal */
export const isOpening = (text: string): boolean => OPENING.test(text);
/** Whether `text` ends a transaction (`commit`, `rollback`). @internal */
export const isClosing = (text: string): boolean => CLOSING.test(text);

/** What pg answers an opening or a closing that was not sent: what the server would have. */
export function unsentResult(text: string): { command: string; rowCount: null; rows: [] } {
  const word = text.split(' ', 1)[0]!.toUpperCase();
  return { command: word === 'START' ? 'BEGIN' : word, rowCount: null, rows: [] };
}

/**
 * A subclass of pg's `Query` that sends `opening` (Parse, Bind and Execute of the unnamed
 * statement) ahead of its own statement's messages, all corked into one write before the one
 * Sync: the server runs the opening, then the statement, in the transaction the opening began
 * (an error in the statement leaves it aborted, as if the two had been sent apart). The opening's
 * CommandComplete is not the statement's: it is skipped, so the caller gets the statement's
 * result alone. Its `opening` names the statement it carried (for instrumentation).
 *
 * pg's client marks the active query's name as parsed at every ParseComplete it receives, and
 * the opening's comes first: the query shows its name only while it is being submitted and once
 * the opening has completed, so that the opening's ParseComplete marks nothing and a failure of
 * the statement's own Parse leaves it unmarked (as pg does for a query sent alone).
 * @internal
 */
export function openingQueryClass(Query: PgQueryClass) {
  const names = new WeakMap<object, string | undefined>();
  return class OpeningQuery extends (Query as unknown as new (
    ...args: ConstructorParameters<PgQueryClass>
  ) => PgQuery) {
    readonly opening: string;
    #openingDone = false;
    #submitting = false;

    // pg's constructor assigns `name` (before this class's fields exist: kept aside); pg's client
    // reads it at each ParseComplete and error.
    get name(): string | undefined {
      return this.#submitting || this.#openingDone ? names.get(this) : undefined;
    }
    set name(name: string | undefined) {
      names.set(this, name);
    }

    constructor(
      opening: string,
      config: { text: string; values: unknown[]; name?: string },
      callback: (error: Error | null, result: unknown) => void,
    ) {
      super(config, undefined, callback);
      this.opening = opening;
    }

    override submit(connection: PgConnection): unknown {
      connection.stream.cork?.();
      this.#submitting = true;
      try {
        connection.parse({ text: this.opening, name: '' });
        connection.bind({ portal: '', statement: '', values: [] });
        connection.execute({ portal: '', rows: 0 });
        return super.submit(connection);
      } finally {
        this.#submitting = false;
        connection.stream.uncork?.();
      }
    }

    override handleCommandComplete(message: unknown, connection: PgConnection): void {
      if (!this.#openingDone) {
        this.#openingDone = true;
        return;
      }
      super.handleCommandComplete(message, connection);
    }
  };
}

/**
 * Whether a statement can carry a held opening: it has parameters, so pg sends it with the
 * extended protocol, where the opening can share its Sync. @internal
 */
export const canCarryOpening = (values: unknown): values is unknown[] =>
  Array.isArray(values) && values.length > 0;
