// Runs the built CLI (dist/cli.js) as a user would.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { loadConfig } from '../src/config.js';

const cli = fileURLToPath(new URL('../dist/cli.js', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'minicloud-cli-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

function minicloud(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const env = { ...process.env, ...options.env };
  // Under pnpm, INIT_CWD points at the directory pnpm was started in; the CLI honours it.
  delete env.INIT_CWD;
  delete env.MINICLOUD_DATABASE_URL;
  if (options.env?.MINICLOUD_DATABASE_URL)
    env.MINICLOUD_DATABASE_URL = options.env.MINICLOUD_DATABASE_URL;
  if (options.env?.INIT_CWD) env.INIT_CWD = options.env.INIT_CWD;
  return new Promise<Result>((resolve) => {
    execFile(
      process.execPath,
      [cli, ...args],
      { cwd: options.cwd ?? tmp, env },
      (error, stdout, stderr) => {
        resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr });
      },
    );
  });
}

describe('the CLI module', () => {
  it('is importable without running: main() runs with the given argv and output', async () => {
    // Importing it above ran nothing (no exit code set, nothing printed).
    expect(process.exitCode).toBeUndefined();
    const lines: string[] = [];
    const errors: string[] = [];
    const out = { line: (text: string) => lines.push(text), step: () => {} };
    expect(await main(['--help'], out, (line) => errors.push(line))).toBe(0);
    expect(lines.join('\n')).toMatch(/^Usage: minicloud <command> \[options\]$/m);
    expect(await main(['nope'], out, (line) => errors.push(line))).toBe(2);
    expect(errors).toEqual([expect.stringMatching(/unknown command 'nope'.*see minicloud --help/)]);
  });

  it("opens PostgreSQL with @rigging/sql's named statements unless MINICLOUD_PG_PREPARED_STATEMENTS says otherwise", async () => {
    const options = (env: NodeJS.ProcessEnv) => loadConfig({}, env, tmp).databaseOptions;
    expect(options({})).toEqual({});
    expect(options({ MINICLOUD_PG_PREPARED_STATEMENTS: '' })).toEqual({});
    expect(options({ MINICLOUD_PG_PREPARED_STATEMENTS: '0' })).toEqual({ preparedStatements: 0 });
    expect(options({ MINICLOUD_PG_PREPARED_STATEMENTS: '12' })).toEqual({ preparedStatements: 12 });
    for (const bad of ['-1', '1.5', 'many', '1e400', '100001']) {
      expect(() => options({ MINICLOUD_PG_PREPARED_STATEMENTS: bad })).toThrow(
        `MINICLOUD_PG_PREPARED_STATEMENTS must be an integer from 0 to 100000, got '${bad}'`,
      );
    }
    // Refused by the CLI before any command runs, as a usage error.
    const previous = process.env.MINICLOUD_PG_PREPARED_STATEMENTS;
    process.env.MINICLOUD_PG_PREPARED_STATEMENTS = 'many';
    try {
      const errors: string[] = [];
      const out = { line: () => {}, step: () => {} };
      expect(await main(['token', 'list'], out, (line) => errors.push(line))).toBe(2);
      expect(errors).toEqual([
        expect.stringMatching(/MINICLOUD_PG_PREPARED_STATEMENTS must be an integer/),
      ]);
    } finally {
      if (previous === undefined) delete process.env.MINICLOUD_PG_PREPARED_STATEMENTS;
      else process.env.MINICLOUD_PG_PREPARED_STATEMENTS = previous;
    }
  });

  it('runs when started through a symlink, as the installed `minicloud` bin is', async () => {
    const link = join(tmp, 'minicloud-bin.js');
    symlinkSync(cli, link);
    const r = await new Promise<Result>((resolve) => {
      execFile(process.execPath, [link, '--help'], { cwd: tmp }, (error, stdout, stderr) => {
        resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr });
      });
    });
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(r.stdout).toMatch(/^Usage: minicloud <command>/m);
  });
});

describe('minicloud', () => {
  it('--help lists the commands and exits 0', async () => {
    const r = await minicloud(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/Usage: minicloud <command>/);
    expect(r.stdout).toMatch(/^ {2}demo {2}/m);
    expect((await minicloud([])).code).toBe(0);
    const demoHelp = await minicloud(['demo', '--help']);
    expect(demoHelp.code).toBe(0);
    expect(demoHelp.stdout).toMatch(/--fresh/);
  });

  it(
    'demo tells the whole story and ends with its summary; twice; --fresh starts over',
    { timeout: 120_000 },
    async () => {
      const file = join(tmp, 'explicit', 'mc.db');
      const first = await minicloud(['demo', '--database', `sqlite:${file}`]);
      expect(first.stderr).toBe('');
      expect(first.code).toBe(0);
      const lines = first.stdout.split('\n');
      expect(lines.slice(0, 3)).toEqual([
        'minicloud demo',
        `  database  sqlite:${file} (from --database)`,
        '  migrated  minicloud schema v7 (applied: create minicloud_runs, create environments, resources, containers, packages, create minicloud_journal, create minicloud_tokens, create minicloud_effects, add minicloud_effect_keys.last_op, create minicloud_refuse (PostgreSQL))',
      ]);
      const out = first.stdout;
      // 1. startup reshape: ReshapeNeeded, 4 GPU children, nothing lost
      expect(out).toContain('driver raised ReshapeNeeded');
      expect(out).toMatch(/└ node-1_pgpu3 {2}VGPU \d\/4/);
      expect(out).toMatch(/^ {2}reshape {3}node-1: 4 GPU providers, 6 consumers moved, none lost/m);
      // 2. packages and deployments
      expect(out).toMatch(/package repository served at http:\/\/127\.0\.0\.1:\d+\/packages\//);
      expect(out).toContain('vm-2: attempt 1 failed');
      expect(out).toMatch(/downloaded \(cache miss\)[\s\S]*cache hit/);
      expect(out).toContain('outdated copies kept while in use');
      // 3. queue: ctr-2 blocked, the others carried on
      expect(out).toMatch(/ctr-2 {2}blocked/);
      expect(out).toContain('ctr-2  stop cancelled');
      // 4. teardown: plan, notify, VMs before the network
      expect(out).toMatch(/destruction plan: 9 object\(s\) in 4 group\(s\)/);
      expect(out).toContain('notify env-1/net: env-1/vm-1 is about to be destroyed');
      expect(out.indexOf('destroyed env-1/vm-3')).toBeLessThan(out.indexOf('destroyed env-1/net'));
      // 5. the summary
      const summary = lines.slice(lines.indexOf('summary'));
      expect(summary).toEqual([
        'summary',
        expect.stringMatching(
          /^ {2}ran {7}reshape \d+ ms, packages \d+ ms, deploy \d+ ms, queue \d+ ms, teardown \d+ ms$/,
        ),
        '  retried   env-1: vm-2 (succeeded on a later attempt)',
        '  reverted  env-2 after health-check failed, in reverse order: configure-app, vm-3, vm-2, vm-1, volume-3, volume-2, volume-1, create-network',
        '  cache     1 hits, 2 misses, 2 downloads, 2 uploads, 1 outdated copies cleaned',
        '  queue     9 ops succeeded, 1 failed, 2 cancelled; blocked: ctr-2',
        '  tree      5 providers; 6 consumers moved this run; 0 allocations lost',
        '  destroyed env-1: env-1/app-config, env-1/vm-1, env-1/vm-2, env-1/vm-3, env-1/net, env-1/vol-1, env-1/vol-2, env-1/vol-3, env-1; 3 allocations released',
        `  data      database sqlite:${file}`,
        `            package cache ${join(tmp, 'explicit', 'packages')}`,
        `            package repository ${join(tmp, 'explicit', 'repository')}`,
        '  recorded  run #1 in minicloud_runs (1 so far)',
        expect.stringMatching(/^done in \d+ ms$/),
        '',
      ]);
      expect(existsSync(file)).toBe(true);

      const second = await minicloud(['demo', '--database', `sqlite:${file}`]);
      expect(second.stderr).toBe('');
      expect(second.code).toBe(0);
      expect(second.stdout).toContain('minicloud schema v7 (already up to date)');
      expect(second.stdout).toContain(
        'node-1: already reshaped (4 GPU providers), nothing to move',
      );
      expect(second.stdout).toContain(
        '  cache     2 hits, 1 misses, 1 downloads, 1 uploads, 1 outdated copies cleaned',
      );
      expect(second.stdout).toContain(
        '  tree      5 providers; reshaped earlier; 0 allocations lost',
      );
      expect(second.stdout).toContain('run #2 in minicloud_runs (2 so far)');

      const fresh = await minicloud(['demo', '--database', `sqlite:${file}`, '--fresh']);
      expect(fresh.code).toBe(0);
      expect(fresh.stdout).toContain(', fresh');
      expect(fresh.stdout).toContain('6 consumers moved');
      expect(fresh.stdout).toContain('1 hits, 2 misses');
      expect(fresh.stdout).toContain('run #1 in minicloud_runs (1 so far)');
    },
  );

  it(
    'defaults to ./.minicloud/minicloud.db, from INIT_CWD under npm/pnpm scripts',
    { timeout: 60_000 },
    async () => {
      const cwd = mkdtempSync(join(tmp, 'cwd-'));
      const r = await minicloud(['demo'], { cwd });
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`sqlite:${join(cwd, '.minicloud', 'minicloud.db')} (default)`);
      expect(existsSync(join(cwd, '.minicloud', 'minicloud.db'))).toBe(true);

      const init = mkdtempSync(join(tmp, 'init-'));
      const viaPnpm = await minicloud(['demo'], { cwd, env: { INIT_CWD: init } });
      expect(viaPnpm.code).toBe(0);
      expect(existsSync(join(init, '.minicloud', 'minicloud.db'))).toBe(true);
    },
  );

  it('reads MINICLOUD_DATABASE_URL; --database wins over it', { timeout: 60_000 }, async () => {
    const file = join(tmp, 'env.db');
    const r = await minicloud(['demo'], { env: { MINICLOUD_DATABASE_URL: `sqlite:${file}` } });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`sqlite:${file} (from MINICLOUD_DATABASE_URL)`);
    const mem = await minicloud(['demo', '--database', 'sqlite::memory:'], {
      env: { MINICLOUD_DATABASE_URL: `sqlite:${file}` },
    });
    expect(mem.stdout).toContain('sqlite::memory: (from --database)');
  });

  it('reshape: the offline upgrade path, idempotent', { timeout: 60_000 }, async () => {
    const url = `sqlite:${join(tmp, 'offline', 'mc.db')}`;
    const missing = await minicloud(['reshape', '--database', url]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe(
      'minicloud: compute node node-1 is not in the database; nothing to reshape [minicloud.no_compute_node]\n',
    );
    const seeded = await minicloud([
      'reshape',
      '--database',
      url,
      '--seed',
      '--gpus',
      '2',
      '--vgpus-per-gpu',
      '8',
    ]);
    expect(seeded.stderr).toBe('');
    expect(seeded.code).toBe(0);
    expect(seeded.stdout).toContain(
      '  needed    node-1: VGPU inventory moves from the root to 2 per-GPU providers',
    );
    expect(seeded.stdout).toContain('└ node-1_pgpu1  VGPU');
    expect(seeded.stdout).toContain(
      '  reshaped  6 consumers moved to 2 GPU providers, none lost (6/6 consumers)',
    );
    const again = await minicloud([
      'reshape',
      '--database',
      url,
      '--gpus',
      '2',
      '--vgpus-per-gpu',
      '8',
    ]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('nothing to do: node-1 already has 2 GPU providers');
    expect((await minicloud(['reshape', '--help'])).stdout).toMatch(/offline upgrade/);
  });

  describe('user errors: one line on stderr, no stack, non-zero exit', () => {
    const oneLine = (r: Result) => {
      expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      expect(r.stderr).toMatch(/^minicloud: /);
    };

    it('a bad database URL exits 1', async () => {
      const r = await minicloud(['demo', '--database', 'oracle://db.example/x']);
      expect(r.code).toBe(1);
      oneLine(r);
      expect(r.stderr).toMatch(/unknown database URL scheme 'oracle:'.*\[sql\.invalid_url\]/);
      expect(r.stdout).toBe('');
    });

    it('an unreachable server exits 1 and hides the password', async () => {
      const r = await minicloud(['demo', '--database', 'postgres://u:hunter2@127.0.0.1:1/x']);
      expect(r.code).toBe(1);
      oneLine(r);
      expect(r.stderr).toMatch(/cannot connect to PostgreSQL.*\[sql\.unreachable\]/);
      expect(r.stderr).not.toContain('hunter2');
    });

    it('a SQLite path that cannot be created exits 1', async () => {
      const r = await minicloud(['demo', '--database', 'sqlite:/dev/null/x.db']);
      expect(r.code).toBe(1);
      oneLine(r);
      expect(r.stderr).toMatch(/\[sql\.cannot_open\]/);
    });

    it('--fresh on a server database is refused before anything is touched', async () => {
      const r = await minicloud(['demo', '--fresh', '--database', 'postgres://u:pw@127.0.0.1:1/x']);
      expect(r.code).toBe(1);
      oneLine(r);
      expect(r.stderr).toMatch(/--fresh only deletes SQLite files/);
    });

    it.each([
      [['nope'], /unknown command 'nope'/],
      [['demo', '--bogus'], /Unknown option '--bogus'/],
      [['demo', '--database'], /argument missing/],
      [['--database', 'x'], /expected a command/],
      [['reshape', '--gpus', 'many'], /--gpus must be an integer/],
      [['reshape', '--node', '../x'], /--node must be a provider name/],
    ])('usage error %j exits 2', async (args, message) => {
      const r = await minicloud(args);
      expect(r.code).toBe(2);
      oneLine(r);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).toMatch(/see minicloud --help/);
    });
  });
});
