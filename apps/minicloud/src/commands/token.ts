import { openDatabase } from '@rigging/sql';
import { ROLES, TokenStore, type Role } from '../auth/tokens.js';
import { CommandError, UsageError } from '../errors.js';
import { migrations, NAMESPACE, type MinicloudTables } from '../migrations.js';
import type { Command } from './types.js';

/** `minicloud token create|list|revoke`: API tokens in the minicloud database. */
export const token: Command = {
  name: 'token',
  summary: 'create, list and revoke API tokens (admin, member, reader)',
  usage: [
    'Usage: minicloud token create --role <admin|member|reader> [--name <n>]',
    '       minicloud token list',
    '       minicloud token revoke <id>',
    '       minicloud token disable-auth',
    '',
    '  create   prints a new token once (only its SHA-256 is stored); roles: admin (everything),',
    '           member (deploy, queue operations, read), reader (read and the dashboard)',
    '  list     prints id, role, name and creation time of every token (never the secret)',
    '  revoke   deletes a token and its dashboard sessions; requests with it are refused at once',
    '  disable-auth  goes back to serving loopback without tokens (only once every token is',
    '           revoked; a non-loopback serve still refuses to start without one)',
    '',
    'Once a token was created, `serve` requires one on every API call (also on loopback), and',
    'keeps requiring one after the last is revoked, until `token disable-auth`.',
  ],
  options: { role: { type: 'string' }, name: { type: 'string' } },
  positionals: true,
  async run({ config, out, values, positionals }) {
    const [action, ...rest] = positionals;
    const extra = (n: number) => {
      if (rest.length > n) throw new UsageError(`unexpected argument '${rest[n]}'`);
    };
    if (
      action !== 'create' &&
      action !== 'list' &&
      action !== 'revoke' &&
      action !== 'disable-auth'
    ) {
      throw new UsageError(
        action === undefined
          ? 'token needs an action: create, list, revoke or disable-auth'
          : `unknown token action '${action}' (create, list, revoke, disable-auth)`,
      );
    }
    if (action !== 'create' && (values.role !== undefined || values.name !== undefined)) {
      throw new UsageError('--role and --name only go with token create');
    }
    await using database = await openDatabase<MinicloudTables>(
      config.databaseUrl,
      config.databaseOptions,
    );
    await database.migrate(NAMESPACE, migrations);
    const store = new TokenStore(database);
    if (action === 'create') {
      extra(0);
      const role = values.role;
      if (typeof role !== 'string' || !(ROLES as readonly string[]).includes(role)) {
        throw new UsageError(`--role must be one of ${ROLES.join(', ')}`);
      }
      const name = typeof values.name === 'string' ? values.name : undefined;
      const created = await store.create(role as Role, name);
      out.line(created.token);
      out.line(`created token ${created.id} (${created.role}); it is shown only this once`);
    } else if (action === 'list') {
      extra(0);
      const tokens = await store.list();
      if (tokens.length === 0) out.line('no tokens');
      for (const t of tokens) {
        out.line(
          `${t.id}  ${t.role.padEnd(6)}  ${new Date(t.createdAt).toISOString()}  ${t.name ?? ''}`.trimEnd(),
        );
      }
    } else if (action === 'disable-auth') {
      extra(0);
      await store.disableAuth();
      out.line('tokens are no longer required on loopback (until the next token create)');
    } else {
      const id = rest[0];
      if (id === undefined) throw new UsageError('token revoke needs a token id');
      extra(1);
      if (!(await store.revoke(id))) {
        throw new CommandError('minicloud.token_not_found', `no token with id ${id}`);
      }
      out.line(`revoked token ${id}`);
    }
  },
};
