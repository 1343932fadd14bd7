import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it, vi } from 'vitest';

// The README's Semaphores example runs as written: written out as a module next to this file and imported, so
// '@dlock/etcd' resolves to this package's build, as a user's would.
const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const section = readme.slice(readme.indexOf('\n## Semaphores\n'));
const example = /^```js\n([\s\S]*?)^```$/m.exec(section)?.[1] ?? '';
const dir = new URL('./.readme-blocks/', import.meta.url);

describe('the README', () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('Semaphores example runs: 4 workers, at most 2 at once, one slot resource each', {
    timeout: 20_000,
  }, async () => {
    expect(example).toContain("semaphore('partner-api'");
    mkdirSync(dir, { recursive: true });
    const file = new URL('semaphores.mjs', dir);
    writeFileSync(file, example);
    const lines: string[] = [];
    const log = vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => {
      lines.push(args.map(String).join(' '));
    });
    try {
      await import(/* @vite-ignore */ file.href);
    } finally {
      log.mockRestore();
    }
    const workers = lines.filter((line) => /^worker \d: partner-api#[01], fencing token \d+$/.test(line));
    expect(workers).toHaveLength(4);
    expect(lines.at(-1)).toBe('at most 2 calls at once; 2 of 2 permits free');
    process.stdout.write(`${lines.join('\n')}\n`);
  });
});
