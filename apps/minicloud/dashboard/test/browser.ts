/**
 * Launching Debian's Chromium (never a downloaded browser) for the browser tests, with a fresh
 * profile, and a recorder of every state the page shows.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IN_CI } from '@rigging/testkit';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);

/** Under CI a missing browser fails the run; elsewhere the browser tests are skipped with a note. */
export function checkChromium(): void {
  if (haveChromium) return;
  if (IN_CI) throw new Error(`chromium not found at ${CHROMIUM}`);
  console.warn(`skipping dashboard browser tests: no chromium at ${CHROMIUM}`);
}

export interface Browser {
  context: BrowserContext;
  page: Page;
  close(): Promise<void>;
}

/** Headless Chromium with a fresh user-data dir, removed again by `close()`. */
export async function launchChromium(
  viewport: { width: number; height: number } = { width: 1280, height: 900 },
): Promise<Browser> {
  const profile = await mkdtemp(join(tmpdir(), 'minicloud-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    close: async () => {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/**
 * Runs in the page before any script (`page.addInitScript(recordStates)`): records every state a
 * flow, task, queue row or plan object shows, in order, as `testid:id:state`, so transient
 * states (reverting, blocked, destroying) can be asserted without racing the story.
 * `window.__destroyed` lists plan objects in the order they turned `destroyed`.
 */
export function recordStates(): void {
  const w = window as unknown as { __seen: string[]; __destroyed: string[] };
  w.__seen = [];
  w.__destroyed = [];
  const seen = new Set<string>();
  const scan = () => {
    for (const el of Array.from(
      document.querySelectorAll<HTMLElement>('[data-testid][data-state]'),
    )) {
      const id = el.dataset.flow ?? el.dataset.task ?? el.dataset.key ?? el.dataset.id ?? '';
      const entry = `${el.dataset.testid}:${id}:${el.dataset.state}`;
      if (!seen.has(entry)) {
        seen.add(entry);
        w.__seen.push(entry);
        if (el.dataset.testid === 'plan-object' && el.dataset.state === 'destroyed') {
          w.__destroyed.push(id);
        }
      }
    }
  };
  new MutationObserver(scan).observe(document, {
    subtree: true,
    childList: true,
    attributes: true,
    attributeFilter: ['data-state'],
  });
}

export const seen = (page: Page): Promise<string[]> =>
  page.evaluate(() => (window as unknown as { __seen: string[] }).__seen);

export const destroyedOrder = (page: Page): Promise<string[]> =>
  page.evaluate(() => (window as unknown as { __destroyed: string[] }).__destroyed);
