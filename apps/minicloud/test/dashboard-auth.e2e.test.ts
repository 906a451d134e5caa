// The dashboard of a `minicloud serve` that requires tokens, in headless Chromium (Debian's
// /usr/bin/chromium): the page asks for a token, refuses a wrong one, signs in with a reader
// token (an HttpOnly cookie the page cannot read), then streams the live state; a reader's
// queue actions are refused by the server.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  checkChromium,
  haveChromium,
  launchChromium,
  type Browser,
} from '../dashboard/test/browser.js';
import { cleanEnv, cli, killServes, startServe, type Served } from './dashboard-serve.js';

const tmp = mkdtempSync(join(tmpdir(), 'minicloud-dash-auth-'));
checkChromium();

describe.skipIf(!haveChromium)('dashboard sign-in with a token, in headless Chromium', () => {
  let served: Served;
  let browser: Browser;
  let reader: string;

  beforeAll(async () => {
    mkdirSync(join(tmp, 'serve'));
    const db = `sqlite:${join(tmp, 'serve', 'mc.db')}`;
    reader = await new Promise<string>((resolve, reject) =>
      execFile(
        process.execPath,
        [cli, 'token', 'create', '--role', 'reader', '--database', db],
        { cwd: tmp, env: cleanEnv() },
        (e, stdout) => (e ? reject(e) : resolve(stdout.split('\n')[0]!)),
      ),
    );
    served = await startServe(join(tmp, 'serve'), tmp);
    browser = await launchChromium({ width: 1280, height: 900 });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    killServes();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('asks for a token, refuses a wrong one, and goes live with a reader token', async () => {
    const page = browser.page;
    await page.goto(served.url);
    const input = page.getByTestId('signin-token');
    await input.waitFor({ timeout: 30_000 });
    expect(await page.getByTestId('connection').count()).toBe(0);

    await input.fill('mct_wrong');
    await page.getByTestId('signin-submit').click();
    await expect
      .poll(() => page.getByTestId('signin-error').textContent(), { timeout: 10_000 })
      .toMatch(/not valid/);

    await input.fill(reader);
    await page.getByTestId('signin-submit').click();
    await page.locator('[data-testid=connection][data-state=live]').waitFor({ timeout: 30_000 });
    await expect
      .poll(() => page.getByTestId('provider-tree').getByTestId('provider').count(), {
        timeout: 30_000,
      })
      .toBe(5);

    // The session is an HttpOnly, SameSite=Strict cookie: the page's scripts cannot read it.
    const cookies = await browser.context.cookies();
    const session = cookies.find((c) => c.name === 'minicloud_session');
    expect(session).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    expect(await page.evaluate(() => document.cookie)).not.toContain('minicloud_session');

    // A reload keeps the session; a reader cannot act on queues.
    await page.reload();
    await page.locator('[data-testid=connection][data-state=live]').waitFor({ timeout: 30_000 });
    const status = await page.evaluate(
      async () => (await fetch('/api/queues/ctr-1/resume', { method: 'POST' })).status,
    );
    expect(status).toBe(403);
  }, 120_000);
});
