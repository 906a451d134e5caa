// Lints the OpenAPI document of `minicloud serve` with Redocly's strict rules (redocly.yaml).
// The document is built in-process from the current sources, with no port opened: the server is
// created around a cloud on a throwaway SQLite file, `ready()` makes the generator read every
// route, and the document is written to a temporary file that `redocly lint` checks.
//   node scripts/lint-openapi.mjs            exit 1 on any lint error or warning
//   node scripts/lint-openapi.mjs --dump F   write the document to F only (no lint)
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const SOURCE_CONDITION = '@rigging/source';

/** Builds the document in a child Node that runs the TypeScript sources (tsx, source condition). */
function dump(file) {
  const code = `
    const { mkdtempSync, rmSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const { openCloud } = await import('./apps/minicloud/src/cloud/index.ts');
    const { loadConfig } = await import('./apps/minicloud/src/config.ts');
    const { createServer } = await import('./apps/minicloud/src/http/server.ts');
    const dir = mkdtempSync(join(tmpdir(), 'minicloud-openapi-'));
    const database = 'sqlite:' + join(dir, 'mc.db');
    const cloud = await openCloud({ databaseUrl: database, dataDir: dir, worker: false });
    try {
      const server = await createServer({ cloud, config: loadConfig({ database, dataDir: dir }, {}, dir) });
      await server.app.ready();
      writeFileSync(${JSON.stringify(file)}, JSON.stringify(server.app.swagger(), null, 2));
      await server.close();
    } finally {
      await cloud.close();
      rmSync(dir, { recursive: true, force: true });
    }`;
  execFileSync(
    process.execPath,
    [`--conditions=${SOURCE_CONDITION}`, '--import', 'tsx', '--input-type=module', '-e', code],
    { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] },
  );
}

const dumpAt = process.argv.indexOf('--dump');
if (dumpAt !== -1) {
  dump(process.argv[dumpAt + 1]);
} else {
  const dir = mkdtempSync(join(tmpdir(), 'rigging-openapi-'));
  try {
    const file = join(dir, 'minicloud.openapi.json');
    dump(file);
    const cli = join(
      dirname(createRequire(import.meta.url).resolve('@redocly/cli/package.json')),
      'bin/cli.js',
    );
    const lint = spawnSync(
      process.execPath,
      [cli, 'lint', '--config', join(root, 'redocly.yaml'), '--max-problems', '100', file],
      {
        cwd: root,
        stdio: 'inherit',
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
      },
    );
    if (lint.status !== 0) {
      console.error('lint-openapi: the OpenAPI document of minicloud serve has problems (above)');
      process.exitCode = 1;
    } else {
      console.log('lint-openapi: the OpenAPI document of minicloud serve passes redocly.yaml');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
