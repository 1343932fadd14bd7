import { existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from '@dlock/test-utils';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The built site (`pnpm docs:build`; scripts/test-all.sh builds it before the tests) served as static files, as a
// host would serve it, and opened in Debian's Chromium the way apps/demo's dashboard test does.
const DIST = fileURLToPath(new URL('../.vitepress/dist/', import.meta.url));
const CHROMIUM = process.env['DLOCK_CHROMIUM'] ?? '/usr/bin/chromium';
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
const PUBLIC_PACKAGES = [
  'core',
  'testing',
  'redis',
  'etcd',
  'zookeeper',
  'postgres',
  'opentelemetry',
  'fencing-pg',
  'fencing-kysely',
  'fencing-common',
];
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript',
  '.css': 'text/css',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.json': 'application/json',
  '.woff2': 'font/woff2',
};

/** Resolves a URL path the way a static host with clean URLs does: the file, `<path>.html` or `<path>/index.html`. */
function fileFor(pathname: string): string | undefined {
  const path = normalize(decodeURIComponent(pathname)).replace(/^(\.\.[/\\])+/, '');
  for (const candidate of [path, `${path}.html`, join(path, 'index.html')]) {
    const file = join(DIST, candidate);
    if (file.startsWith(DIST) && existsSync(file) && statSync(file).isFile()) return file;
  }
  return undefined;
}

function serve(): Promise<Server> {
  const server = createServer((req, res) => {
    const file = fileFor(new URL(req.url ?? '/', 'http://x').pathname);
    if (!file) {
      res.writeHead(404, { 'content-type': 'text/html' }).end(readFileSync(join(DIST, '404.html')));
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[extname(file)] ?? 'application/octet-stream' });
    res.end(readFileSync(file));
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/** Internal link targets (pages and assets) in a page's HTML, without fragments. */
function internalLinks(html: string, base: string): string[] {
  const out = new Set<string>();
  for (const m of html.matchAll(/\s(?:href|src)="([^"]+)"/g)) {
    const raw = (m[1] ?? '').replace(/&amp;/g, '&');
    if (/^(https?:)?\/\//.test(raw) || /^(mailto|data|javascript):/.test(raw) || raw.startsWith('#'))
      continue;
    const url = new URL(raw, base);
    url.hash = '';
    out.add(url.pathname);
  }
  return [...out];
}

describe.skipIf(!existsSync(CHROMIUM) && process.env['CI'] === undefined)(
  'the documentation site in Chromium',
  () => {
    let server: Server;
    let origin: string;
    let context: BrowserContext;
    let profile: string;
    let page: Page;

    beforeAll(async () => {
      if (!existsSync(join(DIST, 'index.html')))
        throw new Error('no built site: run `pnpm docs:build` first');
      server = await serve();
      origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      profile = tempDir('dlock-docs-chromium-');
      context = await chromium.launchPersistentContext(profile, {
        executablePath: CHROMIUM,
        args: FLAGS,
        viewport: { width: 1280, height: 900 },
        timeout: 30_000,
      });
      page = await context.newPage();
    });

    afterAll(async () => {
      await context?.close();
      await new Promise((resolve) => server?.close(resolve));
      if (profile) rmSync(profile, { recursive: true, force: true });
    });

    it('every internal link of every page leads somewhere (no 404)', async () => {
      // Every page's served HTML is read and every href/src in it followed, from the home page outwards.
      const seen = new Set<string>(['/']);
      const queue = ['/'];
      const broken: string[] = [];
      let pages = 0;
      while (queue.length > 0) {
        const path = queue.shift() ?? '/';
        const response = await fetch(`${origin}${path}`);
        const body = await response.text();
        if (response.status !== 200) {
          broken.push(`${path} → ${response.status}`);
          continue;
        }
        if (!(response.headers.get('content-type') ?? '').startsWith('text/html')) continue;
        pages += 1;
        for (const link of internalLinks(body, `${origin}${path}`)) {
          if (seen.has(link)) continue;
          seen.add(link);
          queue.push(link);
        }
      }
      expect(broken).toEqual([]);
      expect(pages).toBeGreaterThan(100); // the guides and the API reference
    });

    it('the guides render in the browser, with their links, charts and no errors', async () => {
      const errors: string[] = [];
      const failed: string[] = [];
      page.on('pageerror', (error) => errors.push(error.message));
      page.on('response', (response) => {
        if (response.status() >= 400) failed.push(`${response.url()} → ${response.status()}`);
      });
      await page.goto(`${origin}/`);
      await expect(page.locator('.VPHero').textContent()).resolves.toContain('dlock');
      // The sidebar as the browser builds it: every guide it links to opens and has a heading.
      await page.goto(`${origin}/backends/memory`);
      const guides = await page
        .locator('.VPSidebar a.link')
        .evaluateAll((links) => links.map((a) => (a as HTMLAnchorElement).pathname));
      expect(guides.length).toBeGreaterThanOrEqual(17);
      for (const path of new Set(guides)) {
        await page.goto(`${origin}${path}`, { waitUntil: 'domcontentloaded' });
        await expect(page.locator('.vp-doc h1, .VPHero').first().textContent()).resolves.not.toBe('');
      }
      await page.goto(`${origin}/benchmarks`);
      const charts = page.locator('.vp-doc img[src$=".svg"]');
      expect(await charts.count()).toBeGreaterThanOrEqual(4);
      const widths = await charts.evaluateAll((imgs) =>
        imgs.map((img) => (img as HTMLImageElement).naturalWidth),
      );
      expect(widths.every((w) => w > 0)).toBe(true);
      expect(failed).toEqual([]);
      expect(errors).toEqual([]);
    });

    it('has an API page for every public package, generated from the doc comments', async () => {
      await page.goto(`${origin}/api/`);
      for (const name of PUBLIC_PACKAGES) {
        await page.goto(`${origin}/api/@dlock/${name}/`, { waitUntil: 'domcontentloaded' });
        await expect(page.locator('.vp-doc h1').first().textContent()).resolves.toContain(`@dlock/${name}`);
      }
      await page.goto(`${origin}/api/@dlock/redis/classes/RedisLockService`);
      await expect(page.locator('.vp-doc').textContent()).resolves.toMatch(/RedisLockService/);
      await expect(page.locator('.vp-doc h1').first().textContent()).resolves.toContain('RedisLockService');
    });

    it('search finds guides and API symbols, and a result opens its page', async () => {
      await page.goto(`${origin}/`);
      await page.locator('.VPNavBarSearch button').first().click();
      const input = page.locator('.VPLocalSearchBox input');
      await input.fill('fencing cookbook');
      const results = page.locator('.VPLocalSearchBox .result');
      await results.first().waitFor({ timeout: 10_000 });
      expect(await results.count()).toBeGreaterThan(0);
      await input.fill('RedlockService');
      await expect
        .poll(async () => (await results.allTextContents()).join(' '), { timeout: 10_000 })
        .toContain('RedlockService');
      await input.fill('graceful shutdown');
      await expect
        .poll(async () => (await results.first().textContent()) ?? '', { timeout: 10_000 })
        .toMatch(/shutdown/i);
      await results.first().click();
      await page.waitForURL(/graceful-shutdown/, { timeout: 10_000 });
      await expect(page.locator('.vp-doc h1').first().textContent()).resolves.toContain('Graceful shutdown');
    });
  },
);
