import type { PackageFile } from '../cloud/index.js';
import type { DemoStep, StepContext } from './types.js';

export const APP = { fqn: 'io.minicloud.apps.Web', version: '1.0.0' };

/** The demo application package's files (`upload` is a counter, so a re-upload differs). */
export function appFiles(upload: number): PackageFile[] {
  return [
    {
      path: 'manifest.json',
      content: JSON.stringify(
        { name: 'Web', fqn: APP.fqn, version: APP.version, port: 8080, upload },
        null,
        2,
      ),
    },
    {
      path: 'Classes/web.yaml',
      content:
        'Name: io.minicloud.apps.Web\nMethods:\n  deploy:\n    Body: [$.instance.deploy()]\n',
    },
    {
      path: 'Resources/deploy.sh',
      content: `#!/bin/sh\necho "deploying Web (upload ${upload})"\n`,
    },
    {
      path: 'Resources/static/index.html',
      content: `<h1>Web</h1>\n${'<!-- padding -->\n'.repeat(400)}`,
    },
  ];
}

/** Story step 2a: the package repository minicloud serves itself, on loopback. */
export const repositoryStep: DemoStep = {
  label: 'packages',
  async run({ cloud, summary, detail }) {
    const url = cloud.repository.url ?? '(not served)';
    detail(`package repository served at ${url}/packages/{fqn}/{version}/{id}`);
    let current = await cloud.repository.current(APP.fqn, APP.version);
    if (!current) {
      await cloud.uploadPackage(APP.fqn, APP.version, appFiles(1));
      summary.packages.uploads++;
      current = (await cloud.repository.current(APP.fqn, APP.version))!;
      return `uploaded ${APP.fqn} ${APP.version} as ${current.id} (${current.size} bytes)`;
    }
    return `${APP.fqn} ${APP.version} already in the repository as ${current.id}`;
  },
};

async function cleanLeftovers({ cloud, detail }: StepContext): Promise<void> {
  for (const env of await cloud.environments()) {
    detail(`${env.name} left by an interrupted run (${env.state}): tearing it down first`);
    await cloud.deleteEnvironment(env.name);
  }
}

/**
 * Story step 2b: deployments as task flows under a lock on the environment, the package fetched
 * through the cache. env-1 succeeds with vm-2 retried; env-2 fails its health check and rolls back
 * in reverse order; then a re-upload whose download leaves env-1's outdated copy in place.
 */
export const deployStep: DemoStep = {
  label: 'deploy',
  async run(ctx) {
    const { cloud, summary, detail } = ctx;
    await cleanLeftovers(ctx);
    const lines: string[] = [];
    for (const [env, faults, what] of [
      ['env-1', { vmFailOnce: ['vm-2'] }, 'vm-2 fails its first boot'],
      ['env-2', { failStep: 'health-check' }, 'its health check fails on purpose'],
    ] as const) {
      detail(`${env}: flow network → volumes → 3 VMs → app config → health check (${what})`);
      const r = await cloud.deployEnvironment(env, {
        package: APP,
        faults,
        onTask: (e) => {
          if (e.state === 'RETRYING')
            detail(`  ${e.task}: attempt ${e.attempt} failed (${e.failure?.message}); retrying`);
          if (e.state === 'FAILURE') detail(`  ${e.task}: failed: ${e.failure?.message}`);
          if (e.state === 'REVERTED') detail(`  ${e.task}: reverted`);
        },
        onPackage: (p) =>
          detail(
            `  package ${p.fqn}/${p.version}/${p.id}: ${p.hit ? 'cache hit' : 'downloaded (cache miss)'}`,
          ),
      });
      if (r.ok) {
        detail(
          `  ${env} deployed in ${r.durationMs} ms; VMs on ${Object.entries(r.vms)
            .map(([vm, gpu]) => `${vm}→${gpu}`)
            .join(', ')}`,
        );
      } else {
        detail(`  ${env} rolled back, in reverse order of completion: ${r.reverted.join(', ')}`);
      }
      summary.deployments.push({
        env,
        ok: r.ok,
        ms: r.durationMs,
        retried: Object.keys(r.retried),
        reverted: r.reverted,
        failure: r.failure ? `${r.failure.task} failed` : null,
      });
      lines.push(`${env} ${r.ok ? 'deployed' : `reverted (${r.reverted.length} tasks)`}`);
    }
    const up = await cloud.uploadPackage(APP.fqn, APP.version, appFiles(Date.now()));
    summary.packages.uploads++;
    detail(`re-uploaded ${APP.fqn} ${APP.version} as ${up.id}`);
    const pre = await cloud.prefetchPackage(APP.fqn, APP.version);
    detail(
      `  fetched ${pre.ref.id}: ${pre.hit ? 'cache hit' : 'downloaded'}; outdated copies ${pre.keptInUse.length ? `kept while in use: ${pre.keptInUse.map((r) => r.id).join(', ')} (env-1)` : 'none in use'}${pre.removed.length ? `; removed ${pre.removed.map((r) => r.id).join(', ')}` : ''}`,
    );
    lines.push(`package re-uploaded`);
    return lines.join(', ');
  },
};
