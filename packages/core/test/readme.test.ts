import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it, vi } from 'vitest';

// Every TypeScript block of the README runs as written: each is written out as a module and imported, so vitest
// compiles it like any test file and '@dlock/core' resolves to this package's source.
const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const blocks = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? '');
const dir = new URL('./.readme-blocks/', import.meta.url);

describe('the README examples', () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('has examples to run', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(4);
  });

  blocks.forEach((code, index) => {
    const title = code.split('\n').find((line) => line.startsWith('const') || line.startsWith('async')) ?? '';
    it(`block ${index + 1} runs (${title.slice(0, 60)})`, { timeout: 20_000 }, async () => {
      mkdirSync(dir, { recursive: true });
      const file = new URL(`block-${index + 1}.ts`, dir);
      writeFileSync(file, `${code}\nexport {};\n`);
      const lines: string[] = [];
      const log = vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => {
        lines.push(args.map(String).join(' '));
      });
      try {
        await import(/* @vite-ignore */ file.href);
      } finally {
        log.mockRestore();
      }
      // Each example prints what it did; an example that prints nothing did not get to its end.
      expect(lines.length).toBeGreaterThan(0);
      if (code.includes("semaphore('partner-api'")) {
        expect(lines.filter((l) => /^worker \d done$/.test(l))).toHaveLength(4);
        expect(lines.at(-1)).toMatch(/^at most 2 calls at once; slot tokens: \[object Object\]$/);
      }
    });
  });
});
