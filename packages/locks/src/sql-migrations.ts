// The tables of @rigging/locks/sql, one migration list for every dialect.
import type { Migration } from '@rigging/sql';
import { sql } from './sql-peer.js';

/** The migrations of `rigging_locks_*` tables (namespace `locks`), run by `SqlLockProvider.migrate()`. */
export const lockMigrations: readonly Migration[] = [
  {
    name: 'tokens-and-leases',
    async up(db) {
      await sql`create table if not exists rigging_locks_tokens (
        lock_id varchar(64) primary key,
        lock_key text not null,
        token bigint not null,
        holder text,
        since bigint
      )`.execute(db);
      await sql`create table if not exists rigging_locks_leases (
        lock_id varchar(64) not null,
        lease_id varchar(64) not null,
        lock_key text not null,
        mode varchar(16) not null,
        token bigint not null,
        expires_at bigint not null,
        pid integer,
        host text,
        since bigint not null,
        primary key (lock_id, lease_id)
      )`.execute(db);
    },
  },
  {
    // PostgreSQL grants take tokens from a sequence and write nothing; who holds what is kept in
    // unlogged tables (lost on a server crash, like the locks themselves)
    name: 'pg-token-sequence',
    async up(db, { dialect }) {
      if (dialect !== 'postgres') return;
      await sql`create sequence if not exists rigging_locks_token_seq as bigint`.execute(db);
      // above every token handed out before, and never below the server clock in microseconds
      await sql`select setval('rigging_locks_token_seq', greatest(
        (select coalesce(max(token), 0) from rigging_locks_tokens),
        floor(extract(epoch from clock_timestamp()) * 1000000)::bigint))`.execute(db);
      await sql`create unlogged table if not exists rigging_locks_pg_sessions (
        backend integer primary key,
        holder text not null,
        opened bigint not null
      )`.execute(db);
      await sql`create unlogged table if not exists rigging_locks_pg_holders (
        lock_id bigint not null,
        backend integer not null,
        token bigint not null,
        since bigint not null,
        primary key (lock_id, backend, token)
      )`.execute(db);
      await sql`create table if not exists rigging_locks_pg_epoch (
        id integer primary key,
        started timestamptz not null
      )`.execute(db);
    },
  },
  {
    // SqlFencingGuard: the highest fencing token accepted per resource (resource_id is the
    // SHA-256 of the resource, as lock ids are of keys); `accepted` counts accepted checks
    name: 'fences',
    async up(db) {
      await sql`create table if not exists rigging_locks_fences (
        resource_id varchar(64) primary key,
        resource text not null,
        token bigint not null,
        accepted bigint not null
      )`.execute(db);
    },
  },
];
