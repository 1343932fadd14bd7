import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// The API reference's URLs as the built site has them (`pnpm docs:build`): one directory per package and one per
// entry point under it, so that a link to `/api/@dlock/core/classes/LockClient` keeps working and never turns into
// `/api/@dlock/core/@dlock/core/…` because a package gained a second entry point.
const DOCS = fileURLToPath(new URL('../', import.meta.url));
const DIST = join(DOCS, '.vitepress/dist');
const API = join(DIST, 'api');
const SIDEBAR = join(DOCS, 'api/typedoc-sidebar.json');
// The directories TypeDoc's markdown plugin files a module's members in, one per kind.
const KIND_DIRECTORIES = new Set([
  'classes',
  'interfaces',
  'enumerations',
  'namespaces',
  'type-aliases',
  'functions',
  'variables',
]);

interface SidebarItem {
  text: string;
  link?: string;
  items?: SidebarItem[];
}

/** The packages the reference documents, as docs/typedoc.json lists them: `core` for `../packages/core`. */
function documentedPackages(): string[] {
  const config = JSON.parse(readFileSync(join(DOCS, 'typedoc.json'), 'utf8')) as { entryPoints: string[] };
  return config.entryPoints.map((entry) => entry.replace(/^\.\.\/packages\//, ''));
}

/** A package's entry points other than its root, as its package.json exports them: `adapter` for `./adapter`. */
function subpathEntryPoints(name: string): string[] {
  const manifest = JSON.parse(readFileSync(join(DOCS, `../packages/${name}/package.json`), 'utf8')) as {
    exports: Record<string, unknown>;
  };
  return Object.keys(manifest.exports)
    .filter((key) => key !== '.' && !key.endsWith('.json'))
    .map((key) => key.replace(/^\.\//, ''))
    .sort();
}

function htmlPages(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.html'))
    .map((file) => relative(DIST, join(dir, file)).replace(/\\/g, '/'));
}

/** The page a sidebar link opens, as a file of the built site: `/api/@dlock/core/` → `api/@dlock/core/index.html`. */
function pageOf(link: string): string {
  const path = decodeURI(link).replace(/^\//, '').replace(/\.md$/, '');
  return path === '' || path.endsWith('/') ? `${path}index.html` : `${path}.html`;
}

function sidebarItems(items: SidebarItem[]): SidebarItem[] {
  return items.flatMap((item) => [item, ...sidebarItems(item.items ?? [])]);
}

describe('the API reference URLs', () => {
  if (!existsSync(join(API, 'index.html'))) throw new Error('no built site: run `pnpm docs:build` first');
  const pages = htmlPages(API);
  const packages = documentedPackages();

  it('name each package once, one directory deep', () => {
    expect(pages.length).toBeGreaterThan(100);
    const nested = pages.filter((page) => (page.match(/@dlock\//g) ?? []).length > 1);
    expect(nested).toEqual([]);
    const outside = pages.filter((page) => page !== 'api/index.html' && !/^api\/@dlock\/[^/]+\//.test(page));
    expect(outside).toEqual([]);
  });

  it('give each package one page at its root and one directory per further entry point it exports', () => {
    for (const name of packages) {
      const root = `api/@dlock/${name}/`;
      expect(pages, name).toContain(`${root}index.html`);
      const directories = readdirSync(join(DIST, root), { withFileTypes: true })
        .filter((entry) => entry.isDirectory() && !KIND_DIRECTORIES.has(entry.name))
        .map((entry) => entry.name)
        .sort();
      expect(directories, name).toEqual(subpathEntryPoints(name));
      for (const entry of directories) expect(pages, name).toContain(`${root}${entry}/index.html`);
      // A module page under any other name (README.html for a module TypeDoc found no name for) is not one a
      // reader or a link can guess.
      const strays = pages.filter(
        (page) =>
          page.startsWith(root) &&
          !/\/index\.html$/.test(page) &&
          !new RegExp(`^${root}(?:[^/]+/)?(?:${[...KIND_DIRECTORIES].join('|')})/[^/]+\\.html$`).test(page),
      );
      expect(strays, name).toEqual([]);
    }
  });

  it('keep the pages guides and readers link to where they were', () => {
    for (const page of [
      'api/@dlock/core/classes/LockClient.html',
      'api/@dlock/core/interfaces/LockService.html',
      'api/@dlock/core/adapter/index.html',
      'api/@dlock/core/adapter/functions/acquireInQueue.html',
      'api/@dlock/testing/classes/FakeClock.html',
      'api/@dlock/testing/contract/functions/lockServiceContract.html',
      'api/@dlock/redis/classes/RedisLockService.html',
    ])
      expect(pages).toContain(page);
  });

  it('link every sidebar item to a built page, without an entry point repeating its package', () => {
    const items = sidebarItems(JSON.parse(readFileSync(SIDEBAR, 'utf8')) as SidebarItem[]);
    const links = items.flatMap((item) => (item.link === undefined ? [] : [item.link]));
    expect(links.length).toBeGreaterThan(100);
    expect(links.filter((link) => !existsSync(join(DIST, pageOf(link))))).toEqual([]);
    const repeated = items.filter((item) => (item.items ?? []).some((child) => child.text === item.text));
    expect(repeated.map((item) => item.text)).toEqual([]);
  });
});
