/**
 * `@rigging/reshape/sql`: the store on SQLite, PostgreSQL or MySQL/MariaDB through
 * `@rigging/sql`. Every write runs in one transaction that locks the rows it reads (consumers
 * first, then providers, each in uuid order) with `SELECT … FOR UPDATE` under READ COMMITTED,
 * so concurrent writers on the same providers or consumers queue instead of interleaving;
 * SQLite serializes writers with `BEGIN IMMEDIATE`.
 *
 * @module
 */
export { migrations } from './schema.js';
export { sqlStore, type SqlStoreOptions } from './store.js';
