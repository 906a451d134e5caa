/**
 * API tokens: random 32-byte secrets handed out once and stored only as their SHA-256 hash in
 * `minicloud_tokens`, each with a role. `MINICLOUD_ADMIN_TOKEN` adds one admin token from the
 * environment (for scripts and tests) that is never stored.
 *
 * The same table keeps two other kinds of rows, never listed as tokens:
 * - dashboard sessions (id `s-…`, name `session:<token id>`): a random secret the sign-in cookie
 *   holds instead of the token, valid for {@link SESSION_TTL_MS}, deleted on sign-out and with
 *   their token;
 * - the `auth-required` marker, written with the first token and kept when the last one is
 *   revoked, so that a server which once required tokens keeps requiring them
 *   ({@link TokenStore.disableAuth} removes it deliberately).
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
  /** The session's id when signed in through the dashboard's cookie. */
  session?: string;
}

/** The environment variable holding an admin token for scripts and tests. */
export const ADMIN_TOKEN_ENV = 'MINICLOUD_ADMIN_TOKEN';

const TOKEN_PREFIX = 'mct_';
const SESSION_PREFIX = 'mcs_';
const SESSION_ID_PREFIX = 's-';
/** The id of the row that keeps tokens required once one was created. */
const MARKER_ID = 'auth-required';
/** How stored token ids look (`token revoke <id>` accepts nothing else). */
const TOKEN_ID = /^[0-9a-f]{12}$/;

/** The longest credential {@link TokenStore.verify} reads (a bound on the work a client causes). */
const MAX_TOKEN_LENGTH = 256;

/** How long a dashboard sign-in lasts. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;

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
    // Longer tokens would be accepted here and refused by every verify (it reads 256 at most).
    const length = options.adminToken?.length;
    if (length !== undefined && (length < 16 || length > MAX_TOKEN_LENGTH)) {
      throw new CommandError(
        'minicloud.invalid_input',
        `${ADMIN_TOKEN_ENV} must be 16 to ${MAX_TOKEN_LENGTH} characters long, got ${length}`,
      );
    }
    this.#adminHash = options.adminToken ? sha256(options.adminToken) : undefined;
    this.#clock = options.clock ?? systemClock;
  }

  /** Whether `MINICLOUD_ADMIN_TOKEN` is set. */
  get hasEnvToken(): boolean {
    return this.#adminHash !== undefined;
  }

  /**
   * Whether tokens are required: the env token is set, a token is stored, or one was stored
   * once (revoking the last token does not turn authentication off; see {@link disableAuth}).
   */
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
    // The marker first: a create that fails leaves no token behind (a marker without a token is
    // the state every revoke leaves too).
    await this.#mark();
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

  /** Writes the `auth-required` marker unless it is there. */
  async #mark(): Promise<void> {
    const there = await this.#database.db
      .selectFrom('minicloud_tokens')
      .select('id')
      .where('id', '=', MARKER_ID)
      .executeTakeFirst();
    if (there) return;
    try {
      await this.#database.db
        .insertInto('minicloud_tokens')
        .values({
          id: MARKER_ID,
          name: 'tokens stay required (minicloud token disable-auth)',
          role: 'none',
          hash: sha256('minicloud: tokens required').toString('hex'),
          created_at: this.#clock.now(),
        })
        .execute();
    } catch (error) {
      // Written at the same moment by another process: fine, it is there.
      const again = await this.#database.db
        .selectFrom('minicloud_tokens')
        .select('id')
        .where('id', '=', MARKER_ID)
        .executeTakeFirst();
      if (!again) throw error;
    }
  }

  /**
   * Turns authentication off again (loopback "auto" mode only): removes the `auth-required`
   * marker and every session. Refused while a token is stored (revoke them first).
   */
  async disableAuth(): Promise<void> {
    if ((await this.list()).length > 0) {
      throw new CommandError(
        'minicloud.tokens_remain',
        'tokens are still stored: revoke every token first (minicloud token list)',
      );
    }
    await this.#database.db.deleteFrom('minicloud_tokens').execute();
  }

  /** Starts a dashboard session for `principal`; resolves with its secret (the cookie value). */
  async createSession(principal: Principal): Promise<string> {
    const now = this.#clock.now();
    await this.#database.db
      .deleteFrom('minicloud_tokens')
      .where('id', 'like', `${SESSION_ID_PREFIX}%`)
      .where('created_at', '<', now - SESSION_TTL_MS)
      .execute();
    const secret = `${SESSION_PREFIX}${randomBytes(32).toString('base64url')}`;
    await this.#database.db
      .insertInto('minicloud_tokens')
      .values({
        id: `${SESSION_ID_PREFIX}${randomBytes(6).toString('hex')}`,
        name: `session:${principal.id}`,
        role: principal.role,
        hash: sha256(secret).toString('hex'),
        created_at: now,
      })
      .execute();
    return secret;
  }

  /** Ends the session whose secret is `secret` (nothing when there is none). */
  async revokeSession(secret: string): Promise<void> {
    if (!secret.startsWith(SESSION_PREFIX) || secret.length > 256) return;
    await this.#database.db
      .deleteFrom('minicloud_tokens')
      .where('hash', '=', sha256(secret).toString('hex'))
      .where('id', 'like', `${SESSION_ID_PREFIX}%`)
      .execute();
  }

  /** Stored tokens, oldest first. */
  async list(): Promise<TokenInfo[]> {
    const rows = await this.#database.db
      .selectFrom('minicloud_tokens')
      .select(['id', 'name', 'role', 'created_at'])
      .where('id', '!=', MARKER_ID)
      .where('id', 'not like', `${SESSION_ID_PREFIX}%`)
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

  /**
   * Deletes a token and its dashboard sessions; resolves false when there was none with that id.
   * Tokens stay required afterwards, even when it was the last one.
   */
  async revoke(id: string): Promise<boolean> {
    if (!TOKEN_ID.test(id)) return false;
    await this.#mark();
    const result = await this.#database.db
      .deleteFrom('minicloud_tokens')
      .where('id', '=', id)
      .executeTakeFirst();
    await this.#database.db
      .deleteFrom('minicloud_tokens')
      .where('id', 'like', `${SESSION_ID_PREFIX}%`)
      .where('name', '=', `session:${id}`)
      .execute();
    return Number(result.numDeletedRows) > 0;
  }

  /**
   * The principal of `token`, or undefined. The env token is compared in constant time; stored
   * tokens are looked up by their SHA-256, so the secret itself is never compared.
   */
  async verify(token: string): Promise<Principal | undefined> {
    if (token.length === 0 || token.length > MAX_TOKEN_LENGTH) return undefined;
    const hash = sha256(token);
    if (this.#adminHash && timingSafeEqual(hash, this.#adminHash)) {
      return { id: 'env', role: 'admin' };
    }
    const row = await this.#database.db
      .selectFrom('minicloud_tokens')
      .select(['id', 'name', 'role', 'created_at'])
      .where('hash', '=', hash.toString('hex'))
      .executeTakeFirst();
    if (!row || !isRole(row.role)) return undefined;
    if (row.id.startsWith(SESSION_ID_PREFIX)) {
      if (Number(row.created_at) + SESSION_TTL_MS <= this.#clock.now()) return undefined;
      const owner = (row.name ?? '').replace(/^session:/, '');
      return { id: owner, role: row.role, session: row.id };
    }
    return { id: row.id, role: row.role };
  }
}
