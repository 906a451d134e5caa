/**
 * API tokens: random 32-byte secrets handed out once and stored only as their SHA-256 hash in
 * `minicloud_tokens`, each with a role. `MINICLOUD_ADMIN_TOKEN` adds one admin token from the
 * environment (for scripts and tests) that is never stored.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { systemClock, type Clock } from '@rigging/core';
import type { Database } from '@rigging/sql';
import { CommandError } from '../errors.js';
import type { MinicloudTables } from '../migrations.js';

/** What a token may do: `admin` everything; `member` deploy, queue and read; `reader` read. */
export type Role = 'admin' | 'member' | 'reader';

/** Every role, most powerful first. */
export const ROLES: readonly Role[] = ['admin', 'member', 'reader'];

/** What a route needs; each role grants its own access and everything below it. */
export type Access = 'admin' | 'deploy' | 'read';

const GRANTS: Record<Role, readonly Access[]> = {
  admin: ['admin', 'deploy', 'read'],
  member: ['deploy', 'read'],
  reader: ['read'],
};

/** Whether `role` may use a route that needs `access`. */
export function allows(role: Role, access: Access): boolean {
  return GRANTS[role].includes(access);
}

/** A stored token as `token list` shows it (never the secret nor its hash). */
export interface TokenInfo {
  id: string;
  name: string | null;
  role: Role;
  createdAt: number;
}

/** Who a valid token belongs to. */
export interface Principal {
  /** The stored token's id, or `env` for `MINICLOUD_ADMIN_TOKEN`. */
  id: string;
  role: Role;
}

/** The environment variable holding an admin token for scripts and tests. */
export const ADMIN_TOKEN_ENV = 'MINICLOUD_ADMIN_TOKEN';

const TOKEN_PREFIX = 'mct_';

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

function isRole(value: unknown): value is Role {
  return typeof value === 'string' && (ROLES as readonly string[]).includes(value);
}

/** Options of {@link TokenStore}. */
export interface TokenStoreOptions {
  /** `MINICLOUD_ADMIN_TOKEN`'s value, if set. @default undefined */
  adminToken?: string | undefined;
  /** @default systemClock */
  clock?: Clock;
}

/** The tokens of one minicloud database. */
export class TokenStore {
  readonly #database: Database<MinicloudTables>;
  readonly #adminHash: Buffer | undefined;
  readonly #clock: Clock;

  constructor(database: Database<MinicloudTables>, options: TokenStoreOptions = {}) {
    this.#database = database;
    if (options.adminToken !== undefined && options.adminToken.length < 16) {
      throw new CommandError(
        'minicloud.invalid_input',
        `${ADMIN_TOKEN_ENV} must be at least 16 characters long`,
      );
    }
    this.#adminHash = options.adminToken ? sha256(options.adminToken) : undefined;
    this.#clock = options.clock ?? systemClock;
  }

  /** Whether `MINICLOUD_ADMIN_TOKEN` is set. */
  get hasEnvToken(): boolean {
    return this.#adminHash !== undefined;
  }

  /** Whether any token can sign in (the env token or a stored one). */
  async configured(): Promise<boolean> {
    if (this.#adminHash) return true;
    const row = await this.#database.db
      .selectFrom('minicloud_tokens')
      .select('id')
      .limit(1)
      .executeTakeFirst();
    return row !== undefined;
  }

  /** Creates a token; the secret is returned once and never stored. */
  async create(role: Role, name?: string): Promise<TokenInfo & { token: string }> {
    if (!isRole(role)) {
      throw new CommandError(
        'minicloud.invalid_input',
        `role must be one of ${ROLES.join(', ')}, got ${JSON.stringify(role)}`,
      );
    }
    if (name !== undefined && (name.length === 0 || name.length > 128)) {
      throw new CommandError('minicloud.invalid_input', 'a token name must be 1-128 characters');
    }
    const id = randomBytes(6).toString('hex');
    const token = `${TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
    const createdAt = this.#clock.now();
    await this.#database.db
      .insertInto('minicloud_tokens')
      .values({
        id,
        name: name ?? null,
        role,
        hash: sha256(token).toString('hex'),
        created_at: createdAt,
      })
      .execute();
    return { id, name: name ?? null, role, createdAt, token };
  }

  /** Stored tokens, oldest first. */
  async list(): Promise<TokenInfo[]> {
    const rows = await this.#database.db
      .selectFrom('minicloud_tokens')
      .select(['id', 'name', 'role', 'created_at'])
      .orderBy('created_at')
      .orderBy('id')
      .execute();
    return rows.map((r) => ({
      id: r.id,
      name: r.name,
      role: isRole(r.role) ? r.role : 'reader',
      createdAt: Number(r.created_at),
    }));
  }

  /** Deletes a token; resolves false when there was none with that id. */
  async revoke(id: string): Promise<boolean> {
    const result = await this.#database.db
      .deleteFrom('minicloud_tokens')
      .where('id', '=', id)
      .executeTakeFirst();
    return Number(result.numDeletedRows) > 0;
  }

  /**
   * The principal of `token`, or undefined. The env token is compared in constant time; stored
   * tokens are looked up by their SHA-256, so the secret itself is never compared.
   */
  async verify(token: string): Promise<Principal | undefined> {
    if (token.length === 0 || token.length > 256) return undefined;
    const hash = sha256(token);
    if (this.#adminHash && timingSafeEqual(hash, this.#adminHash)) {
      return { id: 'env', role: 'admin' };
    }
    const row = await this.#database.db
      .selectFrom('minicloud_tokens')
      .select(['id', 'role'])
      .where('hash', '=', hash.toString('hex'))
      .executeTakeFirst();
    if (!row || !isRole(row.role)) return undefined;
    return { id: row.id, role: row.role };
  }
}
