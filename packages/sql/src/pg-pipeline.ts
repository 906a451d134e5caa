// PostgreSQL: a transaction's opening statement (`begin`, `start transaction …`) held back on its
// pooled connection and sent with the transaction's first statement, and the statements given to
// `withCommit` and `sendWithCommit` sent with the COMMIT — all in one write under one Sync: a round
// trip fewer for each, the same transaction.

/** The messages a pg `Connection` sends, as far as the pipeline needs them. @internal */
interface PgConnection {
  stream: { cork?(): void; uncork?(): void };
  on(event: 'parseComplete', listener: () => void): unknown;
  off(event: 'parseComplete', listener: () => void): unknown;
  parse(query: { text: string; name: string }): void;
  parsedStatements: Record<string, string>;
  submittedNamedStatements: Record<string, string>;
  bind(config: { portal: string; statement: string; values: unknown[] }): void;
  execute(config: { portal: string; rows: number }): void;
  sync(): void;
}

/** pg's `Query`, as far as a subclass that sends statements around its own needs it. @internal */
export interface PgQuery {
  portal?: string;
  prepare(connection: PgConnection): void;
  handleRowDescription(message: unknown): void;
  handleDataRow(message: unknown): void;
  submit(connection: PgConnection): unknown;
  handleCommandComplete(message: unknown, connection: PgConnection): void;
  handleError(error: Error, connection: PgConnection): void;
  handleReadyForQuery(connection: PgConnection): void;
  _getRows(connection: PgConnection, rows: number | undefined): void;
}

/** A statement sent ahead of a pipelined query's own: its text, values and name, if named. */
export interface HeldStatement {
  text: string;
  values: unknown[];
  name?: string | undefined;
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
 * statement) and then the `before` statements (each with its values, by its name when it has one)
 * ahead of its own statement's messages, and `closing` after them, all corked into one write
 * before the one Sync: the server runs them in that order, in the transaction the opening began,
 * and skips the rest at the first error (the transaction is then aborted, as if they had been
 * sent apart, and a closing COMMIT never runs; the query fails with that error). The results of
 * the opening, of the `before` statements and of the closing are not the statement's: they are
 * skipped, so the caller gets the statement's result alone; a closing COMMIT that the server
 * answers `ROLLBACK` fails the query. `opening` names the statement it carried (for
 * instrumentation). A named `before` statement is parsed under its name when the connection has
 * not parsed it yet, and counts as parsed once its ParseComplete has arrived (counted, as the
 * server answers the messages in order), even if the query then fails.
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
    readonly before: readonly HeldStatement[];
    /** Per Parse sent ahead of the query's own, in order: the named `before` statement, if any. */
    #parses: (HeldStatement | undefined)[] = [];
    #parsed = 0;
    #onParse = () => {
      const held = this.#parses[this.#parsed++];
      if (held?.name && this.#connection) {
        this.#connection.parsedStatements[held.name] = held.text;
        delete this.#connection.submittedNamedStatements[held.name];
      }
    };
    #connection: PgConnection | undefined;
    /** Statements sent ahead of the query's own whose CommandComplete has not arrived. */
    #ahead: number;
    #statementDone = false;
    #submitting = false;
    #closingRefused: string | undefined;

    // pg's constructor assigns `name` (before this class's fields exist: kept aside); pg's client
    // reads it at each ParseComplete and error.
    get name(): string | undefined {
      return this.#submitting || this.#ahead === 0 ? names.get(this) : undefined;
    }
    set name(name: string | undefined) {
      names.set(this, name);
    }

    constructor(
      config: { text: string; values: unknown[]; name?: string },
      callback: (error: Error | null, result: unknown) => void,
      around: {
        opening?: string | undefined;
        closing?: string | undefined;
        before?: readonly HeldStatement[] | undefined;
      },
    ) {
      super(config, undefined, callback);
      this.opening = around.opening;
      this.closing = around.closing;
      this.before = around.before ?? [];
      this.#ahead = (around.opening === undefined ? 0 : 1) + this.before.length;
    }

    override submit(connection: PgConnection): unknown {
      connection.stream.cork?.();
      this.#submitting = true;
      if (this.before.length > 0) {
        this.#connection = connection;
        connection.on('parseComplete', this.#onParse);
      }
      try {
        if (this.opening !== undefined) {
          sendUnnamed(connection, this.opening);
          this.#parses.push(undefined);
        }
        for (const held of this.before) this.#sendHeld(connection, held);
        return super.submit(connection);
      } finally {
        this.#submitting = false;
        connection.stream.uncork?.();
      }
    }

    /**
     * Parse (unless the connection has it by that name), Bind, Describe and Execute of `held`,
     * by a pg `Query` of its own (which maps the values as pg does), without a Sync.
     */
    #sendHeld(connection: PgConnection, held: HeldStatement): void {
      const query = new Query(
        { text: held.text, values: held.values, ...(held.name ? { name: held.name } : {}) },
        undefined,
        () => {},
      );
      if (!held.name || !hasBeenParsed(connection, held.name)) this.#parses.push(held);
      query._getRows = (c) => c.execute({ portal: query.portal ?? '', rows: 0 });
      query.prepare(connection);
    }

    // pg's last step of sending the statement: its Execute, then the Sync.
    override _getRows(connection: PgConnection, rows: number | undefined): void {
      if (this.closing === undefined || rows) return super._getRows(connection, rows);
      connection.execute({ portal: this.portal ?? '', rows: 0 });
      sendUnnamed(connection, this.closing);
      connection.sync();
    }

    // The fields and rows of a statement sent ahead are not the query's.
    override handleRowDescription(message: unknown): void {
      if (this.#ahead === 0) super.handleRowDescription(message);
    }

    override handleDataRow(message: unknown): void {
      if (this.#ahead === 0) super.handleDataRow(message);
    }

    /** Stops counting ParseCompletes; a named `before` statement not parsed by then is not. */
    #settleParses(connection: PgConnection): void {
      if (!this.#connection) return;
      connection.off('parseComplete', this.#onParse);
      this.#connection = undefined;
      for (const held of this.#parses.slice(this.#parsed)) {
        if (held?.name) delete connection.submittedNamedStatements[held.name];
      }
    }

    override handleError(error: Error, connection: PgConnection): void {
      this.#settleParses(connection);
      // pg forgets the statement it submitted by name only through `name`, hidden while a
      // statement sent ahead was running: the server skipped its Parse.
      const name = names.get(this);
      if (this.#ahead > 0 && name && connection.parsedStatements[name] === undefined) {
        delete connection.submittedNamedStatements[name];
      }
      super.handleError(error, connection);
    }

    override handleCommandComplete(message: unknown, connection: PgConnection): void {
      if (this.#ahead > 0) {
        this.#ahead--;
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
      this.#settleParses(connection);
      if (this.#closingRefused !== undefined) {
        const error = new Error(`COMMIT was answered ${this.#closingRefused}: nothing committed`);
        this.handleError(error, connection);
        return;
      }
      super.handleReadyForQuery(connection);
    }
  };
}

/** Whether pg has sent a Parse of statement `name` on `connection` (or had it completed). */
const hasBeenParsed = (connection: PgConnection, name: string): boolean =>
  connection.parsedStatements[name] !== undefined ||
  connection.submittedNamedStatements[name] !== undefined;

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
