// Runs the built CLI (dist/cli.js) as a user would.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

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

  it('demo --database sqlite:<file> migrates, records the run, says what it did', async () => {
    const file = join(tmp, 'explicit', 'mc.db');
    const first = await minicloud(['demo', '--database', `sqlite:${file}`]);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout.split('\n')).toEqual([
      'minicloud demo',
      `  database  sqlite:${file} (from --database)`,
      '  migrated  minicloud schema v1 (applied: create minicloud_runs)',
      '  recorded  run #1 in minicloud_runs (1 so far)',
      expect.stringMatching(/^done in \d+ ms$/),
      '',
    ]);
    expect(existsSync(file)).toBe(true);

    const second = await minicloud(['demo', '--database', `sqlite:${file}`]);
    expect(second.code).toBe(0);
    expect(second.stdout).toContain('minicloud schema v1 (already up to date)');
    expect(second.stdout).toContain('run #2 in minicloud_runs (2 so far)');

    const fresh = await minicloud(['demo', '--database', `sqlite:${file}`, '--fresh']);
    expect(fresh.code).toBe(0);
    expect(fresh.stdout).toContain(', fresh');
    expect(fresh.stdout).toContain('run #1 in minicloud_runs (1 so far)');
  });

  it('defaults to ./.minicloud/minicloud.db, from INIT_CWD under npm/pnpm scripts', async () => {
    const cwd = mkdtempSync(join(tmp, 'cwd-'));
    const r = await minicloud(['demo'], { cwd });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`sqlite:${join(cwd, '.minicloud', 'minicloud.db')} (default)`);
    expect(existsSync(join(cwd, '.minicloud', 'minicloud.db'))).toBe(true);

    const init = mkdtempSync(join(tmp, 'init-'));
    const viaPnpm = await minicloud(['demo'], { cwd, env: { INIT_CWD: init } });
    expect(viaPnpm.code).toBe(0);
    expect(existsSync(join(init, '.minicloud', 'minicloud.db'))).toBe(true);
  });

  it('reads MINICLOUD_DATABASE_URL; --database wins over it', async () => {
    const file = join(tmp, 'env.db');
    const r = await minicloud(['demo'], { env: { MINICLOUD_DATABASE_URL: `sqlite:${file}` } });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`sqlite:${file} (from MINICLOUD_DATABASE_URL)`);
    const mem = await minicloud(['demo', '--database', 'sqlite::memory:'], {
      env: { MINICLOUD_DATABASE_URL: `sqlite:${file}` },
    });
    expect(mem.stdout).toContain('sqlite::memory: (from --database)');
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
    ])('usage error %j exits 2', async (args, message) => {
      const r = await minicloud(args);
      expect(r.code).toBe(2);
      oneLine(r);
      expect(r.stderr).toMatch(message);
      expect(r.stderr).toMatch(/see minicloud --help/);
    });
  });
});
