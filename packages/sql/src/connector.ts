/** What each engine's driver gives {@link openDatabase}: one connector per dialect. */
import type { Logger } from '@rigging/core';
import type { Dialect as KyselyDialect, IsolationLevel, Kysely } from 'kysely';
import type { SessionFactory } from './session.js';

/** The validated options a connector needs. @internal */
export interface ConnectSettings {
  poolSize: number;
  busyTimeoutMs: number;
  connectTimeoutMs: number;
  statementCacheSize: number;
  preparedStatements: number;
  synchronous: 'off' | 'normal' | 'full' | 'extra';
  /** The driver module the caller passed, if any. */
  driver: unknown;
  logger: Logger;
  /** The URL as messages show it (password hidden). */
  shownUrl: string;
}

/** An opened driver: the Kysely dialect over it, and what differs per engine. @internal */
export interface Connector {
  readonly dialect: KyselyDialect;
  readonly sessions: SessionFactory;
  /** Runs `fn` in one transaction, once (the caller retries). */
  transaction<DB, T>(
    db: Kysely<DB>,
    fn: (trx: Kysely<DB>) => Promise<T>,
    isolation: IsolationLevel | undefined,
  ): Promise<T>;
  /** Ends the pool or closes the file. */
  close(): Promise<void>;
}

/** A transaction through Kysely's builder, at `isolation` when given (PostgreSQL, MySQL). @internal */
export function builderTransaction<DB, T>(
  db: Kysely<DB>,
  fn: (trx: Kysely<DB>) => Promise<T>,
  isolation: IsolationLevel | undefined,
): Promise<T> {
  let builder = db.transaction();
  if (isolation) builder = builder.setIsolationLevel(isolation);
  return builder.execute(fn);
}
