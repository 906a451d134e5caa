// PostgreSQL: a transaction's opening statement (`begin`, `start transaction …`) held back on its
// pooled connection and sent with the transaction's first statement, and a last statement given
// to `withCommit` sent with the COMMIT — each pair in one write under one Sync: a round trip
// fewer for each, the same transaction.

/** The messages a pg `Connection` sends, as far as the pipeline needs them. @internal */
interface PgConnection {
  stream: { cork?(): void; uncork?(): void };
  parse(query: { text: string; name: string }): void;
  bind(config: { portal: string; statement: string; values: unknown[] }): void;
  execute(config: { portal: string; rows: number }): void;
  sync(): void;
}

/** pg's `Query`, as far as a subclass that sends statements around its own needs it. @internal */
export interface PgQuery {
  portal?: string;
  submit(connection: PgConnection): unknown;
  handleCommandComplete(message: unknown, connection: PgConnection): void;
  handleError(error: Error, connection: PgConnection): void;
  handleReadyForQuery(connection: PgConnection): void;
  _getRows(connection: PgConnection, rows: number | undefined): void;
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

/** Whether `text` opens a transaction the way {@link OPENING} describes. @internal */
export const isOpening = (text: string): boolean => OPENING.test(text);
/** Whether `text` is `commit`. @internal */
export const isCommit = (text: string): boolean => /^commit$/i.test(text);
/** Whether `text` is `rollback`. @internal */
export const isRollback = (text: string): boolean => /^rollback$/i.test(text);

/**
 * The prefix `database.transaction` gives the statement of `withCommit` on PostgreSQL: the
 * connection holds it back and sends it with the COMMIT (a comment, so that a connection that
 * does not know it runs it as it is). @internal
 */
export const WITH_COMMIT = '/* rigging: with commit */ ';

/** What pg answers a statement that was not sent (yet): what the server would have. @internal */
export function unsentResult(text: string): { command: string; rowCount: null; rows: [] } {
  const word = text.split(' ', 1)[0]!.toUpperCase();
  return { command: word === 'START' ? 'BEGIN' : word, rowCount: null, rows: [] };
}

/**
 * A subclass of pg's `Query` that sends `opening` (Parse, Bind and Execute of the unnamed
 * statement) ahead of its own statement's messages and `closing` after them, all corked into one
 * write before the one Sync: the server runs them in that order, in the transaction the opening
 * began, and skips the rest at the first error (the transaction is then aborted, as if they had
 * been sent apart, and a closing COMMIT never runs). The CommandComplete of the opening and of
 * the closing are not the statement's: they are skipped, so the caller gets the statement's
 * result alone; a closing COMMIT that the server answers `ROLLBACK` fails the query. `opening`
 * names the statement it carried (for instrumentation).
 *
 * pg's client marks the active query's name as parsed at every ParseComplete it receives, and an
 * opening's comes first: the query shows its name only while it is being submitted and once its
 * opening has completed, so that the opening's ParseComplete marks nothing and a failure of the
 * statement's own Parse leaves it unmarked (as pg does for a query sent alone). A closing's
 * ParseComplete comes after the statement's own and marks it again.
 * @internal
 */
export function pipelinedQueryClass(Query: PgQueryClass) {
  let made = pipelinedClasses.get(Query);
  if (!made) pipelinedClasses.set(Query, (made = makePipelinedQueryClass(Query)));
  return made;
}

/** One subclass per pg `Query` class (each pooled connection asks for it). */
const pipelinedClasses = new WeakMap<PgQueryClass, ReturnType<typeof makePipelinedQueryClass>>();

function makePipelinedQueryClass(Query: PgQueryClass) {
  const names = new WeakMap<object, string | undefined>();
  return class PipelinedQuery extends (Query as unknown as new (
    ...args: ConstructorParameters<PgQueryClass>
  ) => PgQuery) {
    readonly opening: string | undefined;
    readonly closing: string | undefined;
    #openingDone: boolean;
    #statementDone = false;
    #submitting = false;
    #closingRefused: string | undefined;

    // pg's constructor assigns `name` (before this class's fields exist: kept aside); pg's client
    // reads it at each ParseComplete and error.
    get name(): string | undefined {
      return this.#submitting || this.#openingDone ? names.get(this) : undefined;
    }
    set name(name: string | undefined) {
      names.set(this, name);
    }

    constructor(
      config: { text: string; values: unknown[]; name?: string },
      callback: (error: Error | null, result: unknown) => void,
      around: { opening?: string | undefined; closing?: string | undefined },
    ) {
      super(config, undefined, callback);
      this.opening = around.opening;
      this.closing = around.closing;
      this.#openingDone = around.opening === undefined;
    }

    override submit(connection: PgConnection): unknown {
      connection.stream.cork?.();
      this.#submitting = true;
      try {
        if (this.opening !== undefined) sendUnnamed(connection, this.opening);
        return super.submit(connection);
      } finally {
        this.#submitting = false;
        connection.stream.uncork?.();
      }
    }

    // pg's last step of sending the statement: its Execute, then the Sync.
    override _getRows(connection: PgConnection, rows: number | undefined): void {
      if (this.closing === undefined || rows) return super._getRows(connection, rows);
      connection.execute({ portal: this.portal ?? '', rows: 0 });
      sendUnnamed(connection, this.closing);
      connection.sync();
    }

    override handleCommandComplete(message: unknown, connection: PgConnection): void {
      if (!this.#openingDone) {
        this.#openingDone = true;
        return;
      }
      if (this.#statementDone) {
        const tag = (message as { text?: unknown }).text;
        if (tag !== 'COMMIT' && this.closing !== undefined && isCommit(this.closing)) {
          this.#closingRefused = String(tag);
        }
        return;
      }
      this.#statementDone = true;
      super.handleCommandComplete(message, connection);
    }

    override handleReadyForQuery(connection: PgConnection): void {
      if (this.#closingRefused !== undefined) {
        const error = new Error(`COMMIT was answered ${this.#closingRefused}: nothing committed`);
        this.handleError(error, connection);
        return;
      }
      super.handleReadyForQuery(connection);
    }
  };
}

/** Parse, Bind and Execute of `text` as the unnamed statement, without a Sync. */
function sendUnnamed(connection: PgConnection, text: string): void {
  connection.parse({ text, name: '' });
  connection.bind({ portal: '', statement: '', values: [] });
  connection.execute({ portal: '', rows: 0 });
}

/**
 * Whether a statement can carry an opening or a closing: it has parameters, so pg sends it with
 * the extended protocol, where they can share its Sync. @internal
 */
export const canCarry = (values: unknown): values is unknown[] =>
  Array.isArray(values) && values.length > 0;
