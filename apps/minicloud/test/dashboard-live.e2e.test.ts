// End to end (issue 10): the real `minicloud serve` (built dist/cli.js, a child process on a free
// loopback port), its dashboard in headless Chromium (Debian's /usr/bin/chromium through
// playwright-core, fresh profile), and `minicloud demo --server` run against it as another child
// process. The page must show the tree, a queue turning blocked, a flow reverting and the
// destruction order as they happen; resume on a blocked key drains it. Screenshots go to
// apps/minicloud/test-artifacts/ (and to dashboard/docs/ with MINICLOUD_UPDATE_SCREENSHOTS=1).
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkChromium,
  destroyedOrder,
  haveChromium,
  launchChromium,
  recordStates,
  seen,
  type Browser,
} from '../dashboard/test/browser.js';
import { cleanEnv, cli, killServes, startServe, type Served } from './dashboard-serve.js';

const artifacts = fileURLToPath(new URL('../test-artifacts/', import.meta.url));
const docs = fileURLToPath(new URL('../dashboard/docs/', import.meta.url));
const tmp = mkdtempSync(join(tmpdir(), 'minicloud-live-'));
/** expect.poll waits this long (its default, 1 s, is short for a loaded 2-core CI machine). */
const POLL = { timeout: 30_000 };
checkChromium();

async function api(url: string, method: string, body?: unknown): Promise<any> {
  const res = await fetch(url, {
    method,
    ...(body === undefined
      ? {}
      : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });
  const json = (await res.json()) as unknown;
  if (res.status >= 400) throw new Error(`${method} ${url}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

describe.skipIf(!haveChromium)('dashboard of a real minicloud serve, in headless Chromium', () => {
  let served: Served;
  let browser: Browser;
  let page: Page;
  const requests: string[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    mkdirSync(artifacts, { recursive: true });
    served = await startServe(join(tmp, 'serve'), tmp);
    browser = await launchChromium({ width: 1280, height: 900 });
    page = browser.page;
    browser.context.on('request', (r) => requests.push(r.url()));
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await page.addInitScript(recordStates);
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    killServes();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('shows the demo live: the tree, a flow reverting, ctr-2 blocked, the destruction order, the cache', async () => {
    await page.goto(served.url);
    await page.locator('[data-testid=connection][data-state=live]').waitFor({ timeout: 30_000 });

    // Serve reshaped node-1 at startup: the tree has the root and one provider per GPU, and the
    // before/after view of that reshape.
    const tree = page.getByTestId('provider-tree');
    await expect.poll(() => tree.getByTestId('provider').count(), { timeout: 30_000 }).toBe(5);
    for (const gpu of [0, 1, 2, 3]) {
      await tree.locator(`[data-name="node-1_pgpu${gpu}"]`).waitFor();
    }
    expect(await page.getByTestId('reshape-before').getByTestId('provider').count()).toBe(1);
    expect(await page.getByTestId('reshape-after').getByTestId('provider').count()).toBe(5);
    expect(await tree.locator('[data-rc=VGPU] [role=meter]').count()).toBe(4);

    // The demo, run inside the server by a `minicloud demo --server` child process.
    const demo = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(
        process.execPath,
        [cli, 'demo', '--server', served.url],
        { cwd: tmp, env: cleanEnv() },
        (e, stdout, stderr) => resolve({ code: e ? Number(e.code ?? 1) : 0, stdout, stderr }),
      ),
    );
    expect(demo.stderr).toBe('');
    expect(demo.code).toBe(0);
    expect(demo.stdout).toMatch(/^summary$/m);

    // A deployment flow reverting, ending reverted with the failure that caused it.
    const env2 = page.locator('[data-testid=flow][data-flow^="deploy-env-2-"]').first();
    await env2.and(page.locator('[data-state=reverted]')).waitFor({ timeout: 30_000 });
    await expect
      .poll(() => env2.getByTestId('flow-failure').textContent(), POLL)
      .toContain('health-check');
    const states = await seen(page);
    expect(states.some((s) => /^flow:deploy-env-2-[^:]+:reverting$/.test(s))).toBe(true);
    expect(states).toContain('task:create-network:reverted');
    await page
      .locator('[data-testid=flow][data-flow^="deploy-env-1-"][data-state=succeeded]')
      .first()
      .waitFor();

    // ctr-2 turned blocked (the demo then discards its held ops and deletes it), the others not.
    expect(states).toContain('queue-row:ctr-2:blocked');
    expect(states).not.toContain('queue-row:ctr-1:blocked');
    expect(states).toContain('queue-row:ctr-1:delete-in-progress');
    await expect
      .poll(
        () => page.locator('[data-testid=queue-row][data-key=ctr-2]').getAttribute('data-status'),
        POLL,
      )
      .toBe('idle');
    expect(
      await page
        .locator('[data-testid=queue-row][data-key=ctr-2]')
        .getByTestId('queue-failure')
        .textContent(),
    ).toContain('entrypoint exited with code 1');

    // The destruction plan of env-1, in groups: app config, VMs, then network and volumes, then
    // the environment; objects destroyed in that order (every VM before the network).
    const groups = await page
      .getByTestId('plan-group')
      .evaluateAll((els) =>
        els.map((g) =>
          Array.from(g.querySelectorAll<HTMLElement>('[data-testid=plan-object]')).map(
            (o) => o.dataset.id,
          ),
        ),
      );
    expect(groups[0]).toEqual(['env-1/app-config']);
    expect(groups[1]).toEqual(['env-1/vm-1', 'env-1/vm-2', 'env-1/vm-3']);
    expect(groups[2]).toContain('env-1/net');
    expect(groups.at(-1)).toEqual(['env-1']);
    await page
      .locator('[data-testid=plan-object][data-id="env-1"][data-state=destroyed]')
      .waitFor({ timeout: 30_000 });
    const destroyed = await destroyedOrder(page);
    const net = destroyed.indexOf('env-1/net');
    expect(net).toBeGreaterThan(0);
    for (const vm of ['env-1/vm-1', 'env-1/vm-2', 'env-1/vm-3']) {
      expect(destroyed.indexOf(vm)).toBeGreaterThanOrEqual(0);
      expect(destroyed.indexOf(vm)).toBeLessThan(net);
    }
    expect(destroyed.at(-1)).toBe('env-1');

    // The package cache: hits and misses counted, the current upload cached.
    await expect.poll(() => page.getByTestId('cache-misses').textContent(), POLL).toBe('2');
    expect(await page.getByTestId('cache-hits').textContent()).toBe('1');
    expect(await page.getByTestId('cache-entries').locator('tbody tr').count()).toBeGreaterThan(0);
    await page.screenshot({ path: join(artifacts, 'dashboard-1280.png'), fullPage: true });
  }, 180_000);

  it('shows who holds the package cache locks while a deployment uses a package', async () => {
    // Holders are sampled once a second: wait until the demo's have gone.
    await page.getByTestId('cache-locks').waitFor({ state: 'detached', timeout: 30_000 });
    await api(`${served.url}/api/environments`, 'POST', {
      name: 'env-live',
      package: { fqn: 'io.minicloud.apps.Web', version: '1.0.0' },
    });
    const holder = page.getByTestId('cache-locks').locator('tbody tr').first();
    await holder.waitFor({ timeout: 30_000 });
    expect(await holder.textContent()).toMatch(/^usage:io\.minicloud\.apps\.Web\/1\.0\.0\/upload-/);
    expect(await holder.textContent()).toContain('shared');
    await api(`${served.url}/api/environments/env-live`, 'DELETE');
    await page.getByTestId('cache-locks').waitFor({ state: 'detached', timeout: 30_000 });
  }, 120_000);

  it('resume on a blocked key, clicked in the page, drains it', async () => {
    const key = 'web-live';
    const op = (type: string, payload: object = {}) =>
      api(`${served.url}/api/containers/${key}/ops`, 'POST', { type, payload });
    await op('create', { image: 'nginx:1.27', durationMs: 20 });
    await op('start', { fail: 'image pull back-off', durationMs: 20 });
    const row = page.locator(`[data-testid=queue-row][data-key="${key}"]`);
    await row.and(page.locator('[data-status=blocked]')).waitFor({ timeout: 30_000 });
    // Cast after the failure: held behind the blocked key, shown as pending.
    await op('stop', { durationMs: 300 });
    await op('delete', { durationMs: 20 });
    await expect
      .poll(() => row.getByTestId('queue-pending').locator('li code').allTextContents(), POLL)
      .toEqual(['stop', 'delete']);
    await expect
      .poll(() => row.getByTestId('queue-failure').textContent(), POLL)
      .toContain('image pull');
    await row.screenshot({ path: join(artifacts, 'dashboard-blocked.png') });

    await row.getByRole('button', { name: `Resume ${key}` }).click();
    await row.and(page.locator('[data-status=idle]')).waitFor({ timeout: 30_000 });
    await expect.poll(() => row.getByTestId('queue-pending').count(), POLL).toBe(0);
    expect(await row.getByRole('button').count()).toBe(0);
    expect(await seen(page)).toContain(`queue-row:${key}:stop-in-progress`);
    const containers = (await api(`${served.url}/api/containers`, 'GET')) as {
      containers: { name: string }[];
    };
    expect(containers.containers.map((c) => c.name)).not.toContain(key);
  }, 120_000);

  it('lays out at 390 px without sideways scrolling', async () => {
    const phone = await browser.context.newPage();
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(served.url);
    await phone.locator('[data-testid=connection][data-state=live]').waitFor({ timeout: 30_000 });
    await phone.getByTestId('plan-group').first().waitFor({ timeout: 30_000 });
    const overflow = await phone.evaluate(
      () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
    );
    expect(overflow).toBeLessThanOrEqual(0);
    await phone.screenshot({ path: join(artifacts, 'dashboard-390.png'), fullPage: true });
    await phone.close();
    if (process.env.MINICLOUD_UPDATE_SCREENSHOTS === '1') {
      copyFileSync(join(artifacts, 'dashboard-1280.png'), join(docs, 'screenshot-1280.png'));
      copyFileSync(join(artifacts, 'dashboard-390.png'), join(docs, 'screenshot-390.png'));
    }
  }, 60_000);

  it('loaded nothing but the server itself, threw no errors, and the server exits 0 on SIGTERM', async () => {
    expect(requests.length).toBeGreaterThan(0);
    expect(requests.filter((u) => !u.startsWith(served.url) && !u.startsWith('data:'))).toEqual([]);
    expect(pageErrors).toEqual([]);
    // With the page's event stream still open.
    served.child.kill('SIGTERM');
    expect(await served.exited).toEqual({ code: 0, signal: null });
    expect(served.stderr()).toBe('');
    await page
      .locator('[data-testid=connection][data-state=reconnecting]')
      .waitFor({ timeout: 30_000 });
  }, 60_000);
});
