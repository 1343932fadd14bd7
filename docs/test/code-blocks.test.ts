import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain ES module of the repository's scripts, without declarations
import { collectBlocks, ROOT } from '../../scripts/code-blocks.mjs';

interface Block {
  id: string;
  file: string;
  slug: string;
  lang: 'ts' | 'js';
  code: string;
  run: boolean;
  compile: boolean;
}

// Each block becomes a module under docs/.blocks/, inside this package so that '@dlock/…', 'pg', 'redis' and the
// other imports resolve to the built workspace packages and the pinned clients, as an application's would.
// TypeScript blocks are compiled there in one `tsc` run (type errors fail the block), then every runnable block runs
// in a `node` process of its own: it must exit with 0, by itself, within its time.
const DIR = fileURLToPath(new URL('../.blocks/', import.meta.url));
const OUT = join(DIR, 'out');
const TSC = join(ROOT, 'node_modules/.bin/tsc');
const blocks: Block[] = collectBlocks();
const typeErrors = new Map<string, string[]>();
let tscOutput = '';
const RUN_TIMEOUT_MS = 30_000;
// Blocks that write to PostgreSQL get a database of this run's own (DATABASE_URL), so that a run never sees the
// tables and high-water marks a previous run or another suite left in `test`.
const ADMIN_URL = process.env['DLOCK_BLOCKS_ADMIN_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
const DATABASE = `dlock_docs_blocks_${process.pid}`;
const DATABASE_URL = ADMIN_URL.replace(/\/[^/?]*(\?|$)/, `/${DATABASE}$1`);

async function admin(sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

function run(file: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], {
      cwd: DIR,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, DATABASE_URL },
    });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => {
      output += `\n[checker] still running after ${RUN_TIMEOUT_MS} ms: killed`;
      child.kill('SIGKILL');
    }, RUN_TIMEOUT_MS);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

afterAll(() => admin(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`));

beforeAll(async () => {
  await admin(`DROP DATABASE IF EXISTS ${DATABASE} WITH (FORCE)`);
  await admin(`CREATE DATABASE ${DATABASE}`);
  rmSync(DIR, { recursive: true, force: true });
  mkdirSync(DIR, { recursive: true });
  writeFileSync(join(DIR, 'package.json'), '{ "type": "module", "private": true }\n');
  const compiled = blocks.filter((b) => b.compile);
  for (const b of compiled) writeFileSync(join(DIR, `${b.slug}.ts`), `${b.code}\nexport {};\n`);
  for (const b of blocks.filter((b) => b.lang === 'js' && b.run)) {
    mkdirSync(OUT, { recursive: true });
    writeFileSync(join(OUT, `${b.slug}.js`), b.code);
  }
  writeFileSync(
    join(DIR, 'tsconfig.json'),
    JSON.stringify({
      extends: '../../tsconfig.base.json',
      compilerOptions: {
        rootDir: '.',
        outDir: 'out',
        declaration: false,
        declarationMap: false,
        sourceMap: false,
      },
      include: ['*.ts'],
    }),
  );
  if (compiled.length === 0) return;
  // tsc exits non-zero on a type error but still emits: the errors are reported per block below.
  const { stdout } = await promisify(execFile)(TSC, ['-p', DIR], { cwd: DIR }).catch(
    (e: { stdout?: string }) => ({ stdout: e.stdout ?? '' }),
  );
  tscOutput = stdout;
  for (const line of stdout.split('\n')) {
    const slug = /^([^(:]+)\.ts[(:]/.exec(line)?.[1];
    if (slug) typeErrors.set(slug, [...(typeErrors.get(slug) ?? []), line]);
  }
}, 120_000);

describe('every ts/js block of the READMEs and the docs site', () => {
  it('finds the blocks', () => {
    expect(blocks.length).toBeGreaterThan(20);
  });

  // Files run side by side (the test's concurrency, vitest.config.ts), the blocks of one file in order: a README's
  // later block may build on an earlier one's tables or files, and blocks of different files use different names.
  const previousOfFile = new Map<string, Promise<unknown>>();
  for (const block of blocks) {
    const what = block.run
      ? 'compiles and runs'
      : block.compile
        ? 'compiles (marked no-run)'
        : 'is a fragment';
    const after = previousOfFile.get(block.file) ?? Promise.resolve();
    let done: () => void = () => {};
    previousOfFile.set(block.file, new Promise<void>((resolve) => (done = resolve)));
    it.skipIf(!block.run && !block.compile).concurrent(
      `${block.id} ${what}`,
      { timeout: 2 * RUN_TIMEOUT_MS + 5_000 },
      async () => {
        await after;
        try {
          expect(typeErrors.get(block.slug) ?? []).toEqual([]);
          if (!block.run) return;
          const file = join(OUT, `${block.slug}.js`);
          if (!existsSync(file)) throw new Error(`${block.id}: tsc wrote no ${file}:\n${tscOutput}`);
          const result = await run(file);
          if (result.code !== 0) throw new Error(`${block.id} exited with ${result.code}:\n${result.output}`);
        } finally {
          done();
        }
      },
    );
    if (!block.run && !block.compile) done();
  }
});
