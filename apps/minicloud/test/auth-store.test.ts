// The token store and the failure limiter in this process, against a real SQLite database: which
// role may do what, what a token, a session and the environment's admin token open, what
// revocation and expiry close, that tokens stay required once created, and when a client that
// keeps failing is refused. (test/auth.test.ts checks the same through a `minicloud serve`
// process; this file reaches the corners a process test cannot set up, like a session's expiry.)
import { ManualClock } from '@rigging/core';
import { openDatabase, sql, type Database } from '@rigging/sql';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FailureLimiter } from '../src/auth/limiter.js';
import {
  ADMIN_TOKEN_ENV,
  allows,
  ROLES,
  SESSION_TTL_MS,
  TokenStore,
  type Access,
  type Role,
} from '../src/auth/tokens.js';
import { CommandError } from '../src/errors.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../src/migrations.js';

const START = 1_800_000_000_000;

describe('roles', () => {
  it('lists every role, most powerful first', () => {
    expect(ROLES).toEqual(['admin', 'member', 'reader']);
  });

  it('grants each role its own access and everything below it, nothing above', () => {
    const table = Object.fromEntries(
      ROLES.map((role) => [
        role,
        (['admin', 'deploy', 'read'] as Access[]).filter((access) => allows(role, access)),
      ]),
    );
    expect(table).toEqual({
      admin: ['admin', 'deploy', 'read'],
      member: ['deploy', 'read'],
      reader: ['read'],
    });
  });
});

describe('TokenStore', () => {
  let database: Database<MinicloudTables>;
  let clock: ManualClock;

  beforeEach(async () => {
    database = await openDatabase<MinicloudTables>('sqlite::memory:');
    await database.migrate(NAMESPACE, migrations);
    clock = new ManualClock(START);
  });
  afterEach(async () => {
    await database.close();
  });

  const rows = async () =>
    (await database.db.selectFrom('minicloud_tokens').selectAll().orderBy('id').execute()).map(
      (r) => ({ id: r.id, name: r.name, role: r.role }),
    );

  it('refuses an environment admin token shorter than 16 or longer than 256 characters, naming the variable', () => {
    for (const adminToken of ['', 'x'.repeat(15), 'x'.repeat(257)]) {
      let error: unknown;
      try {
        new TokenStore(database, { adminToken });
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(CommandError);
      expect(error).toMatchObject({
        code: 'minicloud.invalid_input',
        message: `${ADMIN_TOKEN_ENV} must be 16 to 256 characters long, got ${adminToken.length}`,
      });
    }
    expect(new TokenStore(database, { adminToken: 'x'.repeat(16) }).hasEnvToken).toBe(true);
    expect(new TokenStore(database).hasEnvToken).toBe(false);
    expect(new TokenStore(database, { adminToken: undefined }).hasEnvToken).toBe(false);
  });

  it('lets the environment admin token in as admin, up to 256 characters, and nothing else', async () => {
    const adminToken = 'e'.repeat(256);
    const store = new TokenStore(database, { adminToken, clock });
    expect(await store.configured()).toBe(true);
    expect(await store.verify(adminToken)).toEqual({ id: 'env', role: 'admin' });
    expect(await store.verify(adminToken.slice(1))).toBeUndefined();
    expect(await store.verify(`${adminToken}e`)).toBeUndefined();
    expect(await store.verify('')).toBeUndefined();
    // Nothing is stored for it.
    expect(await rows()).toEqual([]);
    expect(await store.list()).toEqual([]);
  });

  it('creates tokens with a role and a name, returns the secret once and stores only its hash', async () => {
    const store = new TokenStore(database, { clock });
    expect(await store.configured()).toBe(false);
    const admin = await store.create('admin', 'ops');
    await clock.advance(5);
    const reader = await store.create('reader');
    expect(admin).toMatchObject({ name: 'ops', role: 'admin', createdAt: START });
    expect(reader).toMatchObject({ name: null, role: 'reader', createdAt: START + 5 });
    for (const created of [admin, reader]) {
      expect(created.id).toMatch(/^[0-9a-f]{12}$/);
      expect(created.token).toMatch(/^mct_[A-Za-z0-9_-]{43}$/);
    }
    expect(admin.id).not.toBe(reader.id);
    expect(admin.token).not.toBe(reader.token);
    expect(await store.configured()).toBe(true);
    const stored = await database.db.selectFrom('minicloud_tokens').selectAll().execute();
    for (const row of stored) {
      expect(row.hash).toMatch(/^[0-9a-f]{64}$/);
      expect(JSON.stringify(row)).not.toContain(admin.token.slice(4));
      expect(JSON.stringify(row)).not.toContain(reader.token.slice(4));
    }
    expect(await store.verify(admin.token)).toEqual({ id: admin.id, role: 'admin' });
    expect(await store.verify(reader.token)).toEqual({ id: reader.id, role: 'reader' });
    expect(await store.verify(`${admin.token}x`)).toBeUndefined();
    expect(await store.verify('mct_wrong')).toBeUndefined();
  });

  it('refuses an unknown role and a name that is empty or longer than 128 characters', async () => {
    const store = new TokenStore(database, { clock });
    await expect(store.create('owner' as Role)).rejects.toMatchObject({
      code: 'minicloud.invalid_input',
      message: 'role must be one of admin, member, reader, got "owner"',
    });
    for (const name of ['', 'n'.repeat(129)]) {
      await expect(store.create('member', name)).rejects.toMatchObject({
        code: 'minicloud.invalid_input',
        message: 'a token name must be 1-128 characters',
      });
    }
    expect(await rows()).toEqual([]);
    expect((await store.create('member', 'n'.repeat(128))).name).toBe('n'.repeat(128));
    expect((await store.create('member', 'n')).name).toBe('n');
  });

  it('lists stored tokens oldest first (then by id), without the marker or sessions', async () => {
    const store = new TokenStore(database, { clock });
    await clock.advance(10);
    const second = await store.create('member', 'second');
    await clock.advance(-0); // same instant for the next two: ordered by id
    const a = await store.create('reader', 'a');
    const b = await store.create('admin', 'b');
    await database.db
      .updateTable('minicloud_tokens')
      .set({ created_at: START })
      .where('id', 'in', [a.id, b.id])
      .execute();
    await store.createSession({ id: second.id, role: 'member' });
    const [early1, early2] = [a, b].sort((x, y) => (x.id < y.id ? -1 : 1));
    const list = await store.list();
    expect(list.map((t) => t.id)).toEqual([early1!.id, early2!.id, second.id]);
    expect(list[2]).toEqual({
      id: second.id,
      name: 'second',
      role: 'member',
      createdAt: START + 10,
    });
    expect(typeof list[0]!.createdAt).toBe('number');
    // A row whose role this version does not know is listed with the least power.
    await database.db
      .updateTable('minicloud_tokens')
      .set({ role: 'superuser' })
      .where('id', '=', second.id)
      .execute();
    expect((await store.list()).find((t) => t.id === second.id)!.role).toBe('reader');
    // …and it opens nothing.
    expect(await store.verify(second.id)).toBeUndefined();
  });

  it('never lets the stored marker row in, whatever is presented', async () => {
    const store = new TokenStore(database, { clock });
    await store.create('reader');
    // The marker has no role, and its name says what it is to whoever reads the table.
    expect(await rows()).toContainEqual({
      id: 'auth-required',
      name: 'tokens stay required (minicloud token disable-auth)',
      role: 'none',
    });
    expect(await store.verify('minicloud: tokens required')).toBeUndefined();
    expect(await store.revoke('auth-required')).toBe(false);
    expect((await rows()).map((r) => r.id)).toContain('auth-required');
  });

  it('revokes a token at once, with its sessions only, and keeps tokens required afterwards', async () => {
    const store = new TokenStore(database, { clock });
    const member = await store.create('member');
    const other = await store.create('reader');
    const mine = await store.createSession({ id: member.id, role: 'member' });
    const theirs = await store.createSession({ id: other.id, role: 'reader' });
    expect(await store.revoke(member.id)).toBe(true);
    expect(await store.verify(member.token)).toBeUndefined();
    expect(await store.verify(mine)).toBeUndefined();
    expect(await store.verify(other.token)).toEqual({ id: other.id, role: 'reader' });
    expect(await store.verify(theirs)).toMatchObject({ id: other.id, role: 'reader' });
    expect(await store.revoke(member.id)).toBe(false);
    expect(await store.revoke('0123456789ab')).toBe(false);
    for (const id of ['', 'ABCDEF012345', '0123456789abc', `x${member.id}`, `${other.id}%`]) {
      expect(await store.revoke(id)).toBe(false);
    }
    expect(await store.verify(other.token)).toEqual({ id: other.id, role: 'reader' });
    expect(await store.revoke(other.id)).toBe(true);
    expect(await store.list()).toEqual([]);
    expect(await store.configured()).toBe(true);
  });

  it('keeps tokens required when a token of a database older than the marker is revoked', async () => {
    const store = new TokenStore(database, { clock });
    const token = await store.create('admin');
    await database.db.deleteFrom('minicloud_tokens').where('id', '=', 'auth-required').execute();
    expect(await store.revoke(token.id)).toBe(true);
    expect(await store.configured()).toBe(true);
  });

  it('fails a create, with the cause and nothing stored, when the auth-required marker cannot be written', async () => {
    // The database refuses the marker row, as a full disk or a lost connection would.
    await sql`CREATE TRIGGER refuse_marker BEFORE INSERT ON minicloud_tokens
      WHEN NEW.id = 'auth-required' BEGIN SELECT RAISE(ABORT, 'marker refused'); END`.execute(
      database.db,
    );
    const store = new TokenStore(database, { clock });
    await expect(store.create('admin')).rejects.toThrow(/marker refused/);
    // Nothing is left of the failed create: no marker, and no token nobody holds the secret of.
    expect(await rows()).toEqual([]);
  });

  it('writes the marker once when tokens are created at the same moment', async () => {
    const store = new TokenStore(database, { clock });
    const created = await Promise.all(ROLES.map((role) => store.create(role)));
    expect(created.map((t) => t.role)).toEqual(ROLES);
    expect((await rows()).filter((r) => r.id === 'auth-required')).toHaveLength(1);
    expect(await store.list()).toHaveLength(3);
  });

  it('turns authentication off only once every token is revoked, and ends every session', async () => {
    const store = new TokenStore(database, { clock });
    const token = await store.create('admin');
    const session = await store.createSession({ id: token.id, role: 'admin' });
    await expect(store.disableAuth()).rejects.toMatchObject({
      code: 'minicloud.tokens_remain',
      message: 'tokens are still stored: revoke every token first (minicloud token list)',
    });
    expect(await store.verify(token.token)).toEqual({ id: token.id, role: 'admin' });
    await store.revoke(token.id);
    // A session of a token revoked in another way would still be there: disable-auth ends it.
    await database.db
      .insertInto('minicloud_tokens')
      .values({
        id: 's-000000000000',
        name: 'session:gone',
        role: 'admin',
        hash: 'f'.repeat(64),
        created_at: START,
      })
      .execute();
    await store.disableAuth();
    expect(await rows()).toEqual([]);
    expect(await store.configured()).toBe(false);
    expect(await store.verify(session)).toBeUndefined();
  });

  it('signs the dashboard in with a session that carries the token and role, for 12 hours', async () => {
    expect(SESSION_TTL_MS).toBe(12 * 60 * 60 * 1000);
    const store = new TokenStore(database, { clock });
    const token = await store.create('member', 'laptop');
    const secret = await store.createSession({ id: token.id, role: 'member' });
    expect(secret).toMatch(/^mcs_[A-Za-z0-9_-]{43}$/);
    const principal = await store.verify(secret);
    expect(principal).toEqual({
      id: token.id,
      role: 'member',
      session: expect.stringMatching(/^s-[0-9a-f]{12}$/),
    });
    expect(await store.list()).toHaveLength(1);
    await clock.advance(SESSION_TTL_MS - 1);
    expect(await store.verify(secret)).toEqual(principal);
    await clock.advance(1);
    expect(await store.verify(secret)).toBeUndefined();
    // The token itself does not expire.
    expect(await store.verify(token.token)).toEqual({ id: token.id, role: 'member' });
  });

  it('forgets expired sessions when the next one starts, and keeps the live ones', async () => {
    const store = new TokenStore(database, { clock });
    const token = await store.create('reader');
    const old = await store.createSession({ id: token.id, role: 'reader' });
    await clock.advance(SESSION_TTL_MS);
    const live = await store.createSession({ id: token.id, role: 'reader' });
    const sessions = async () =>
      (await rows()).filter((r) => r.id.startsWith('s-')).map((r) => r.name);
    // Exactly one TTL old: not yet forgotten (verify already refuses it).
    expect(await sessions()).toEqual(['session:' + token.id, 'session:' + token.id]);
    expect(await store.verify(old)).toBeUndefined();
    await clock.advance(1);
    const third = await store.createSession({ id: token.id, role: 'reader' });
    expect(await sessions()).toHaveLength(2);
    expect(await store.verify(live)).toMatchObject({ id: token.id });
    expect(await store.verify(third)).toMatchObject({ id: token.id });
    expect(await store.list()).toHaveLength(1);
  });

  it('ends a session on sign-out, and sign-out never touches a token or another session', async () => {
    const store = new TokenStore(database, { clock });
    const token = await store.create('admin');
    const one = await store.createSession({ id: token.id, role: 'admin' });
    const two = await store.createSession({ id: 'env', role: 'admin' });
    expect(await store.verify(two)).toMatchObject({ id: 'env', role: 'admin' });
    await store.revokeSession(token.token);
    await store.revokeSession(`${one}${'x'.repeat(300)}`);
    await store.revokeSession('mcs_unknown');
    expect(await store.verify(token.token)).toEqual({ id: token.id, role: 'admin' });
    expect(await store.verify(one)).toMatchObject({ id: token.id });
    await store.revokeSession(one);
    expect(await store.verify(one)).toBeUndefined();
    expect(await store.verify(two)).toMatchObject({ id: 'env' });
    expect(await store.verify(token.token)).toEqual({ id: token.id, role: 'admin' });
  });
});

describe('FailureLimiter', () => {
  it('refuses an address after 20 failures in a minute by default, for the rest of that minute', async () => {
    const clock = new ManualClock(START);
    const limiter = new FailureLimiter({ clock });
    for (let i = 0; i < 19; i++) limiter.fail('10.0.0.1');
    expect(limiter.blockedFor('10.0.0.1')).toBe(0);
    await clock.advance(1_000);
    limiter.fail('10.0.0.1');
    expect(limiter.blockedFor('10.0.0.1')).toBe(59_000);
    expect(limiter.blockedFor('10.0.0.2')).toBe(0);
    await clock.advance(58_999);
    expect(limiter.blockedFor('10.0.0.1')).toBe(1);
    await clock.advance(1);
    expect(limiter.blockedFor('10.0.0.1')).toBe(0);
    // A new window: one failure is not enough again.
    limiter.fail('10.0.0.1');
    expect(limiter.blockedFor('10.0.0.1')).toBe(0);
  });

  it('starts a new window for failures after the old one ended', async () => {
    const clock = new ManualClock(START);
    const limiter = new FailureLimiter({ clock, maxFailures: 2, windowMs: 100 });
    limiter.fail('a');
    await clock.advance(100);
    limiter.fail('a');
    expect(limiter.blockedFor('a')).toBe(0);
    limiter.fail('a');
    expect(limiter.blockedFor('a')).toBe(100);
  });

  it('remembers at most maxAddresses addresses, forgetting the oldest first', () => {
    const clock = new ManualClock(START);
    const limiter = new FailureLimiter({ clock, maxFailures: 1, windowMs: 1_000, maxAddresses: 2 });
    limiter.fail('a');
    limiter.fail('b');
    expect([limiter.blockedFor('a'), limiter.blockedFor('b')]).toEqual([1_000, 1_000]);
    limiter.fail('b'); // a known address: nothing forgotten
    expect(limiter.blockedFor('a')).toBe(1_000);
    limiter.fail('c');
    expect([limiter.blockedFor('a'), limiter.blockedFor('b'), limiter.blockedFor('c')]).toEqual([
      0, 1_000, 1_000,
    ]);
  });

  it('refuses options that are not positive integers, naming them', () => {
    for (const name of ['maxFailures', 'windowMs', 'maxAddresses'] as const) {
      expect(() => new FailureLimiter({ [name]: 0 })).toThrow(TypeError);
      expect(() => new FailureLimiter({ [name]: 0 })).toThrow(new RegExp(name));
    }
  });
});
