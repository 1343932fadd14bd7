import { existsSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from '@dlock/test-utils';
import { type BrowserContext, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, stopCli } from './run-cli.js';

const CHROMIUM = process.env['DLOCK_CHROMIUM'] ?? '/usr/bin/chromium';
/**
 * The root README shows this screenshot next to the quick-start commands. Ordinary runs save it to a temporary file
 * so that running the tests does not rewrite a tracked image; `DLOCK_UPDATE_SCREENSHOT=1` refreshes the README's copy.
 */
const SCREENSHOT =
  process.env['DLOCK_UPDATE_SCREENSHOT'] === '1'
    ? fileURLToPath(new URL('../../../docs/demo-dashboard.png', import.meta.url))
    : `${tempDir('dlock-demo-screenshot-')}/demo-dashboard.png`;
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-quic',
  '--disable-sync',
];

// CI installs Chromium (scripts/chromium.sh), so there a missing browser fails the test instead of skipping it.
describe.skipIf(!existsSync(CHROMIUM) && process.env['CI'] === undefined)('dashboard in Chromium', () => {
  let context: BrowserContext;
  let profile: string;

  beforeAll(async () => {
    profile = tempDir('dlock-demo-chromium-');
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      args: FLAGS,
      viewport: { width: 1280, height: 900 },
      deviceScaleFactor: 1.5,
      timeout: 30_000,
    });
  });

  afterAll(async () => {
    await context?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
  });

  it('pausing a worker from the page shows its stale write rejected on the timeline', async () => {
    const cli = await startCli([
      '--port',
      '0',
      '--linger',
      '30',
      '--pause-worker',
      'none',
      '--no-browser-hint',
    ]);
    const errors: string[] = [];
    try {
      const page = await context.newPage();
      page.on('pageerror', (error) => errors.push(error.message));
      await page.goto(cli.url);

      // First run, nobody frozen: both runs end exact, and nothing was rejected.
      await page.locator('#status', { hasText: 'finished' }).waitFor({ timeout: 40_000 });
      await expect(page.locator('#verdict-unfenced').getAttribute('class')).resolves.toContain('good');
      await expect(page.locator('#verdict-fenced').getAttribute('class')).resolves.toContain('good');
      expect(await page.locator('#svg-fenced .write-rejected').count()).toBe(0);

      // Pause worker 2: nothing is running, so a new scenario starts with worker 2 frozen.
      await page.locator('#pause-buttons button[data-worker="2"]').click();
      await page.locator('#svg-fenced .write-rejected').first().waitFor({ timeout: 40_000 });
      await page.locator('#status', { hasText: 'finished' }).waitFor({ timeout: 40_000 });

      await expect(page.locator('#verdict-fenced').textContent()).resolves.toMatch(/balance exact/);
      await expect(page.locator('#verdict-unfenced').textContent()).resolves.toMatch(/deposits? lost/);
      await expect(page.locator('#svg-unfenced').textContent()).resolves.toMatch(/STALE WRITE LANDED/);
      await expect(page.locator('#svg-fenced').textContent()).resolves.toMatch(
        /REJECTED by the gate: token #\d+ < high-water mark \d+/,
      );
      await expect(page.locator('#story-fenced').textContent()).resolves.toMatch(/The gate rejects it/);
      expect(await page.locator('#svg-fenced .frozen').count()).toBe(1);
      expect(await page.locator('#svg-fenced .lost').count()).toBeGreaterThanOrEqual(1);

      mkdirSync(dirname(SCREENSHOT), { recursive: true });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
      expect(statSync(SCREENSHOT).size).toBeGreaterThan(50_000);
      expect(errors).toEqual([]);
    } finally {
      await stopCli(cli.child);
    }
  });
});
