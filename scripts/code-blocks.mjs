// Finds every ```ts / ```js block of every README and docs page, so that CI can compile and run each one
// (docs/test/code-blocks.test.ts does; `node scripts/code-blocks.mjs` lists them with their marks).
//
// A block is a program: it runs as its own module with `node`, against the built packages and the local servers,
// and must exit by itself. Two marks in the info string, kept rare, say otherwise:
//   ```ts no-run     compiled (type-checked) but not run: it needs something CI does not have (said beside it)
//   ```ts fragment   neither: a piece of a program shown for its shape (an interface, a call in context)
// JavaScript blocks are run, not type-checked.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
const LANGS = new Map([
  ['ts', 'ts'],
  ['typescript', 'ts'],
  ['js', 'js'],
  ['javascript', 'js'],
  ['mjs', 'js'],
]);
const MARKS = new Set(['no-run', 'fragment']);

/** Every markdown file whose blocks are checked: the READMEs and the site's pages (not TypeDoc's output). */
export function markdownFiles(root = ROOT) {
  const files = ['README.md', 'ARCHITECTURE.md'].filter((f) => existsSync(join(root, f)));
  for (const dir of ['packages', 'apps']) {
    for (const name of readdirSync(join(root, dir)).sort()) {
      if (existsSync(join(root, dir, name, 'README.md'))) files.push(join(dir, name, 'README.md'));
    }
  }
  if (existsSync(join(root, 'bench/README.md'))) files.push('bench/README.md');
  const walk = (dir) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!['node_modules', 'api', '.vitepress', '.blocks', 'public', 'test'].includes(entry.name))
          walk(path);
      } else if (entry.name.endsWith('.md')) files.push(path);
    }
  };
  walk('docs');
  return files.sort();
}

/** The fenced blocks of one markdown text: `{ file, line, lang, info, marks, code }` for ts/js blocks only. */
export function extractBlocks(file, text) {
  const blocks = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i += 1) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)(.*)$/.exec(lines[i] ?? '');
    if (!open) continue;
    const [, indent = '', fence = '```', lang = '', rest = ''] = open;
    const body = [];
    let j = i + 1;
    while (j < lines.length && !new RegExp(`^\\s*${fence[0]}{${fence.length},}\\s*$`).test(lines[j] ?? '')) {
      const line = lines[j] ?? '';
      body.push(line.startsWith(indent) ? line.slice(indent.length) : line.trimStart());
      j += 1;
    }
    const kind = LANGS.get(lang.toLowerCase());
    if (kind) {
      const words = rest.trim().split(/\s+/).filter(Boolean);
      const marks = words.filter((w) => MARKS.has(w));
      blocks.push({
        file,
        line: i + 1,
        lang: kind,
        info: `${lang}${rest}`.trim(),
        marks,
        code: body.join('\n'),
      });
    }
    i = j;
  }
  return blocks;
}

/** Every block of every checked file, each with a stable id (`<file>:<line>`) and a file-name-safe slug. */
export function collectBlocks(root = ROOT) {
  return markdownFiles(root).flatMap((file) =>
    extractBlocks(file, readFileSync(join(root, file), 'utf8')).map((block) => ({
      ...block,
      id: `${file}:${block.line}`,
      slug: `${file.replace(/[^A-Za-z0-9]+/g, '_')}_L${block.line}`,
      run: block.marks.length === 0,
      compile: block.lang === 'ts' && !block.marks.includes('fragment'),
    })),
  );
}

if (process.argv[1] && relative(process.argv[1], fileURLToPath(import.meta.url)) === '') {
  const blocks = collectBlocks();
  const byFile = new Map();
  for (const b of blocks) byFile.set(b.file, [...(byFile.get(b.file) ?? []), b]);
  for (const [file, list] of byFile) {
    const marked = list.filter((b) => !b.run).map((b) => `${b.line} ${b.marks.join(',')}`);
    console.log(`${file.padEnd(40)} ${String(list.length).padStart(3)} blocks  ${marked.join('; ')}`);
  }
  const run = blocks.filter((b) => b.run).length;
  const compiled = blocks.filter((b) => b.compile).length;
  console.log(`${blocks.length} blocks: ${run} run, ${compiled} type-checked, ${blocks.length - run} marked`);
}
