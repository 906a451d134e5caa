// A three-step deploy whose third step fails: the first two roll back, newest first.
// Run: pnpm tsx examples/deploy.ts   (add a sqlite: URL to keep the log in a file)
import { openDatabase } from '@rigging/sql';
import { Engine, FlowFailed, linearFlow, memoryLog, task, times } from '@rigging/tasks';
import { sqlLog } from '@rigging/tasks/sql';

const createVolume = task({
  name: 'create-volume',
  requires: ['app'],
  provides: 'volumeId',
  execute: (_ctx, { app }: { app: string }) => `vol-${app}`,
  revert: (_ctx, { result }) => console.log(`  revert create-volume: deleting ${result}`),
});

const startServer = task({
  name: 'start-server',
  requires: ['app', 'volumeId'],
  provides: 'serverId',
  execute: (_ctx, { app, volumeId }: { app: string; volumeId: string }) =>
    `srv-${app}-on-${volumeId}`,
  revert: (_ctx, { result, failure }) =>
    console.log(`  revert start-server: stopping ${result} because ${failure?.task} failed`),
});

const registerDns = task({
  name: 'register-dns',
  requires: ['serverId'],
  provides: 'hostname',
  retry: times(2, 10), // three attempts in all
  execute: (ctx) => {
    throw new Error(`DNS API unavailable (attempt ${ctx.attempt})`);
  },
});

const deploy = linearFlow('deploy', createVolume, startServer, registerDns);

const url = process.argv[2];
const database = url ? await openDatabase(url) : undefined;
const engine = new Engine({ log: database ? await sqlLog(database) : memoryLog() });
engine.on('task:state', (e) => console.log(`${e.task}: ${e.state}`));
engine.on('flow:state', (e) => console.log(`flow ${e.flow}: ${e.state}`));

try {
  const out = await engine.run(deploy, { inputs: { app: 'shop' }, flowId: 'deploy-shop' });
  console.log('deployed at', out.hostname);
} catch (error) {
  if (!(error instanceof FlowFailed)) throw error;
  console.log(`${error.code}: ${error.message}`);
  console.log('reverted:', error.reverts.map((r) => r.task).join(', '));
  console.log('audit trail:', (await engine.history('deploy-shop')).length, 'transitions');
} finally {
  await database?.close();
}
