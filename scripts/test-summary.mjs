// Adds up the vitest JSON reports of every workspace package and prints one closing line: "N passed, N failed".
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

let passed = 0;
let failed = 0;
let skipped = 0;
const rows = [];
// The workspace's packages: every directory under packages/ and apps/, and docs/ (the site and its checks).
const projects = ['packages', 'apps'].flatMap((dir) =>
  existsSync(dir) ? readdirSync(dir).map((n) => join(dir, n)) : [],
);
for (const project of [...projects, 'docs']) {
  const file = join(project, '.vitest-results.json');
  if (!existsSync(file)) continue;
  const report = JSON.parse(readFileSync(file, 'utf8'));
  const p = report.numPassedTests ?? 0;
  // A file that failed without a failing test (an import error, a crash) counts as one failure.
  const brokenFiles = (report.testResults ?? []).filter(
    (file) => file.status === 'failed' && !(file.assertionResults ?? []).some((t) => t.status === 'failed'),
  ).length;
  const f = (report.numFailedTests ?? 0) + brokenFiles;
  const s = (report.numPendingTests ?? 0) + (report.numTodoTests ?? 0);
  passed += p;
  failed += f;
  skipped += s;
  rows.push(`${project.padEnd(28)} ${String(p).padStart(5)} passed ${String(f).padStart(3)} failed`);
}
console.log(rows.join('\n'));
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
