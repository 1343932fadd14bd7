import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it, vi } from 'vitest';

// Every TypeScript block of the README runs as written: each is written out as a module and imported, so vitest
// compiles it like any test file, with '@dlock/opentelemetry' resolved to this package's source.
const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const blocks = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? '');
const dir = new URL('./.readme-blocks/', import.meta.url);

describe('the README examples', () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('has an example to run', () => {
    expect(blocks.length).toBeGreaterThanOrEqual(1);
  });

  blocks.forEach((code, index) => {
    it(`block ${index + 1} runs`, async () => {
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
      // The example prints what it recorded: every metric it promises, and both spans with the mapped name.
      expect(lines[0]).toMatch(/^charging invoice 42 under fencing token 1$/);
      for (const metric of ['dlock.acquire.wait (s)', 'dlock.hold.duration (s)', 'dlock.held ({hold})']) {
        expect(lines.some((line) => line.startsWith(metric))).toBe(true);
      }
      expect(lines.find((l) => l.startsWith('dlock.held'))).toContain(
        '{"dlock.kind":"lock","dlock.name":"invoice"} 0',
      );
      expect(lines.filter((l) => l.startsWith('span dlock.acquire'))).toHaveLength(2);
      expect(lines.filter((l) => l.startsWith('span dlock.release'))).toHaveLength(2);
    });
  });
});
