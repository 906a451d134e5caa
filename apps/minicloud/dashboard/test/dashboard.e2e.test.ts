/**
 * Browser tests: the built dashboard in real headless Chromium (Debian's /usr/bin/chromium,
 * driven by playwright-core) against the fixture server's scripted story: accessibility, layout,
 * keyboard use, reconnection and the plan's cycle marking, which the real demo (no cycles) does
 * not exercise. The real `minicloud serve` is tested in test/dashboard-live.e2e.test.ts.
 * Screenshots go to apps/minicloud/test-artifacts/.
 */
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkChromium,
  destroyedOrder,
  haveChromium,
  launchChromium,
  recordStates,
  seen,
  type Browser,
} from './browser.js';
import { startFixtureServer, type FixtureServer } from './fixture-server.js';

const dashboardDir = fileURLToPath(new URL('..', import.meta.url));
const artifacts = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));
checkChromium();
/** expect.poll waits this long (its default, 1 s, is short for a loaded 2-core CI machine). */
const POLL = { timeout: 20_000 };

describe.skipIf(!haveChromium)('dashboard in headless Chromium', () => {
  let fixture: FixtureServer;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  const requests: string[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    // Built by `pnpm build` (`vite build dashboard`); rebuilding here would race the live test.
    if (!existsSync(join(dashboardDir, 'dist', 'index.html'))) {
      throw new Error('dashboard/dist is not built: run pnpm --filter minicloud build first');
    }
    await mkdir(artifacts, { recursive: true });
    fixture = await startFixtureServer({ stepMs: 150, autoStart: 'manual' });
    browser = await launchChromium();
    context = browser.context;
    page = browser.page;
    context.on('request', (r) => requests.push(r.url()));
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await page.addInitScript(recordStates);
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await fixture?.close();
  });

  it('serves the built files with correct content types', async () => {
    const index = await fetch(`${fixture.url}/`);
    expect(index.status).toBe(200);
    expect(index.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await index.text();
    const script = /src="\.\/(assets\/[^"]+\.js)"/.exec(html)?.[1];
    const style = /href="\.\/(assets\/[^"]+\.css)"/.exec(html)?.[1];
    expect(script && style).toBeTruthy();
    const js = await fetch(`${fixture.url}/${script}`);
    expect(js.headers.get('content-type')).toMatch(/^text\/javascript/);
    const css = await fetch(`${fixture.url}/${style}`);
    expect(css.headers.get('content-type')).toMatch(/^text\/css/);
    expect((await fetch(`${fixture.url}/../../package.json`)).status).toBe(404);
  });

  it('shows the tree, a flow reverting, a queue turning blocked and the teardown order, live', async () => {
    await page.goto(fixture.url);
    await page.locator('[data-testid=connection][data-state=live]').waitFor({ timeout: 20_000 });
    // Before the story: the old tree, all VGPU on the root.
    await expect
      .poll(() => page.locator('[data-testid=provider-tree] [data-testid=provider]').count(), POLL)
      .toBe(1);
    fixture.start();

    // Reshape: the tree now has node-1 and one child per GPU, and a before/after view.
    const tree = page.getByTestId('provider-tree');
    await tree.locator('[data-name="node-1_pci_0000_83_00_0"]').waitFor({ timeout: 20_000 });
    await expect.poll(() => tree.getByTestId('provider').count(), POLL).toBe(5);
    await expect
      .poll(() => page.getByTestId('reshape-before').getByTestId('provider').count(), POLL)
      .toBe(1);
    await expect
      .poll(() => page.getByTestId('reshape-after').getByTestId('provider').count(), POLL)
      .toBe(5);
    expect(await tree.locator('[data-rc=VGPU] [role=meter]').count()).toBe(4);

    // The failing flow reverts, and ends reverted with the failure that caused it.
    const flow2 = page.locator('[data-testid=flow][data-flow=flow-2]');
    await flow2.and(page.locator('[data-state=reverted]')).waitFor({ timeout: 30_000 });
    await expect
      .poll(() => flow2.getByTestId('flow-failure').textContent(), POLL)
      .toContain('app-config');
    const flowStates = await seen(page);
    expect(flowStates).toContain('flow:flow-2:running');
    expect(flowStates).toContain('flow:flow-2:reverting');
    expect(flowStates).toContain('task:vm-1:reverting');
    // The succeeding flow retried vm-2 and ended succeeded.
    await page.locator('[data-testid=flow][data-flow=flow-1][data-state=succeeded]').waitFor();

    // ctr-2 turns blocked with its later ops still pending and its failure shown.
    const ctr2 = page.locator('[data-testid=queue-row][data-key=ctr-2]');
    await ctr2.and(page.locator('[data-status=blocked]')).waitFor({ timeout: 30_000 });
    await expect
      .poll(() => ctr2.getByTestId('queue-pending').locator('li').allTextContents(), POLL)
      .toEqual(['start ctr-2-op2', 'stop ctr-2-op3']);
    await expect
      .poll(() => ctr2.getByTestId('queue-failure').textContent(), POLL)
      .toContain('not found');
    expect(await seen(page)).toContain('queue-row:ctr-2:create-in-progress');
    // Other keys carried on.
    await page.locator('[data-testid=queue-row][data-key=ctr-3][data-status=idle]').waitFor();

    // Teardown plan: VMs first, network last, then everything destroyed in that order.
    const groups = page.getByTestId('plan-group');
    await groups.first().waitFor({ timeout: 30_000 });
    const order = await groups.evaluateAll((els) =>
      els.map((g) =>
        Array.from(g.querySelectorAll<HTMLElement>('[data-testid=plan-object]')).map(
          (o) => o.dataset.id,
        ),
      ),
    );
    expect(order).toEqual([
      ['vm-1', 'vm-2', 'vm-3'],
      ['vol-1', 'vol-2', 'sg-web', 'sg-db'],
      ['net-1'],
    ]);
    await expect
      .poll(() => page.getByTestId('plan-cycles').textContent(), POLL)
      .toContain('sg-web');
    await page
      .locator('[data-testid=plan-object][data-id=net-1][data-state=destroyed]')
      .waitFor({ timeout: 30_000 });
    const destroyed = await destroyedOrder(page);
    expect(destroyed.indexOf('net-1')).toBe(destroyed.length - 1);
    for (const vm of ['vm-1', 'vm-2', 'vm-3']) {
      expect(destroyed.indexOf(vm)).toBeGreaterThanOrEqual(0);
      expect(destroyed.indexOf(vm)).toBeLessThan(destroyed.indexOf('vol-1'));
    }
    await fixture.finished;
    await page.screenshot({ path: join(artifacts, 'fixture-1280.png'), fullPage: true });
  }, 120_000);

  it('resumes the blocked key from the keyboard, with visible focus, and it drains', async () => {
    const ctr2 = page.locator('[data-testid=queue-row][data-key=ctr-2]');
    await ctr2.and(page.locator('[data-status=blocked]')).waitFor();
    // Reach the Resume button with Tab only.
    await page.locator('body').focus();
    let reached = false;
    for (let i = 0; i < 80 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = await page.evaluate(
        () => (document.activeElement as HTMLElement | null)?.dataset.testid === 'resume-ctr-2',
      );
    }
    expect(reached).toBe(true);
    const outline = await page.evaluate(() => {
      const s = getComputedStyle(document.activeElement!);
      return { style: s.outlineStyle, width: parseFloat(s.outlineWidth) };
    });
    expect(outline.style).not.toBe('none');
    expect(outline.width).toBeGreaterThanOrEqual(2);
    // The discard button is the next tab stop.
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => (document.activeElement as HTMLElement).dataset.testid)).toBe(
      'discard-ctr-2',
    );
    await page.keyboard.press('Shift+Tab');
    await ctr2.screenshot({ path: join(artifacts, 'fixture-focus.png') });

    await page.keyboard.press('Enter');
    await ctr2.and(page.locator('[data-status=idle]')).waitFor({ timeout: 20_000 });
    await expect.poll(() => ctr2.getByTestId('queue-pending').count(), POLL).toBe(0);
    expect(await ctr2.getByRole('button').count()).toBe(0);
    const states = await seen(page);
    expect(states).toContain('queue-row:ctr-2:start-in-progress');
    expect(states).toContain('queue-row:ctr-2:stop-in-progress');
    // The status change was announced in the live region.
    await expect.poll(() => page.getByRole('status').textContent(), POLL).toContain('ctr-2');
    expect(await page.getByRole('status').getAttribute('aria-live')).toBe('polite');
    // A second resume is refused (not blocked any more).
    const again = await fetch(`${fixture.url}/api/queues/ctr-2/resume`, { method: 'POST' });
    expect(again.status).toBe(409);
  }, 60_000);

  it('discards a blocked key with a click, and reports unknown keys', async () => {
    fixture.hub.publish({
      type: 'queue:key',
      key: {
        key: 'ctr-8',
        status: 'blocked',
        running: null,
        pending: [{ id: 'ctr-8-op2', type: 'delete' }],
        lastFailure: { opId: 'ctr-8-op1', type: 'stop', message: 'timeout', at: Date.now() },
      },
    });
    const row = page.locator('[data-testid=queue-row][data-key=ctr-8]');
    await row.and(page.locator('[data-status=blocked]')).waitFor({ timeout: 10_000 });
    await row.getByRole('button', { name: 'Discard pending operations of ctr-8' }).click();
    await row.and(page.locator('[data-status=idle]')).waitFor({ timeout: 10_000 });
    expect(await row.getByTestId('queue-pending').count()).toBe(0);
    // The failure stays visible after a discard.
    expect(await row.getByTestId('queue-failure').textContent()).toContain('timeout');
    const unknown = await fetch(`${fixture.url}/api/queues/nope/resume`, { method: 'POST' });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe(
      'queue.unknown-key',
    );
  }, 60_000);

  it('reconnects after the stream drops and resynchronises from a fresh snapshot', async () => {
    const conn = page.getByTestId('connection');
    fixture.hub.disconnect();
    // Published while no client is connected (the page waits 2 s before reconnecting).
    fixture.hub.publish({
      type: 'queue:key',
      key: { key: 'ctr-9', status: 'idle', running: null, pending: [], lastFailure: null },
    });
    await page
      .locator('[data-testid=connection][data-state=reconnecting]')
      .waitFor({ timeout: 10_000 });
    await page.locator('[data-testid=connection][data-state=live]').waitFor({ timeout: 20_000 });
    expect(await conn.textContent()).toBe('live');
    // It arrives through the new connection's snapshot.
    await page.locator('[data-testid=queue-row][data-key=ctr-9]').waitFor({ timeout: 10_000 });
    expect(await page.getByTestId('queue-row').count()).toBe(5);
  }, 60_000);

  it('has landmarks and a heading per view', async () => {
    expect(await page.getByRole('banner').count()).toBe(1);
    expect(await page.getByRole('main').count()).toBe(1);
    expect(await page.getByRole('navigation').count()).toBe(1);
    for (const name of ['Provider tree', 'Queues', 'Flows', 'Destruction plan', 'Package cache']) {
      expect(await page.getByRole('heading', { level: 2, name, exact: true }).count()).toBe(1);
      expect(await page.getByRole('region', { name, exact: true }).count()).toBe(1);
    }
  });

  it('keeps text contrast at 4.5:1 or more', async () => {
    const low = await page.evaluate(() => {
      const rgb = (c: string) => (c.match(/[\d.]+/g) ?? []).map(Number);
      const lum = ([r = 0, g = 0, b = 0]: number[]) => {
        const f = (v: number) => {
          const x = v / 255;
          return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
        };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
      };
      const background = (el: Element | null): number[] => {
        for (; el; el = el.parentElement) {
          const c = rgb(getComputedStyle(el).backgroundColor);
          if (c.length >= 3 && (c[3] ?? 1) > 0) return c;
        }
        return [255, 255, 255];
      };
      const bad: string[] = [];
      const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const el = n.parentElement;
        if (!el || !n.textContent?.trim() || el.closest('svg, .sr-only, .skip')) continue;
        const style = getComputedStyle(el);
        if (style.visibility === 'hidden' || style.display === 'none') continue;
        const a = lum(rgb(style.color));
        const b = lum(background(el));
        const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
        if (ratio < 4.5) bad.push(`${n.textContent.trim().slice(0, 30)}: ${ratio.toFixed(2)}`);
      }
      return bad;
    });
    expect(low).toEqual([]);
  });

  it('lays out at 390px without horizontal scrolling', async () => {
    const phone = await context.newPage();
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(fixture.url);
    await phone
      .locator('[data-testid=plan-object][data-id=net-1][data-state=destroyed]')
      .waitFor({ timeout: 20_000 });
    const overflow = await phone.evaluate(
      () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
    );
    expect(overflow).toBeLessThanOrEqual(0);
    // Views stack in one column.
    const queues = await phone.getByTestId('view-queues').boundingBox();
    const flows = await phone.getByTestId('view-flows').boundingBox();
    expect(queues && flows).toBeTruthy();
    expect(flows!.y).toBeGreaterThanOrEqual(queues!.y + queues!.height);
    expect(queues!.width).toBeLessThanOrEqual(390);
    await phone.screenshot({ path: join(artifacts, 'fixture-390.png'), fullPage: true });
    await phone.close();
  }, 60_000);

  it('loaded nothing from the network but the loopback server, and threw no errors', () => {
    expect(requests.length).toBeGreaterThan(0);
    expect(requests.filter((u) => !u.startsWith(fixture.url) && !u.startsWith('data:'))).toEqual(
      [],
    );
    expect(pageErrors).toEqual([]);
  });
});
