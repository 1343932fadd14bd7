// Adds up the vitest JSON reports of every workspace package and prints one closing line: "N passed, N failed".
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

let passed = 0;
let failed = 0;
let skipped = 0;
const rows = [];
for (const dir of ['packages', 'apps']) {
  if (!existsSync(dir)) continue;
  for (const name of readdirSync(dir)) {
    const file = join(dir, name, '.vitest-results.json');
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
    rows.push(
      `${join(dir, name).padEnd(28)} ${String(p).padStart(5)} passed ${String(f).padStart(3)} failed`,
    );
  }
}
console.log(rows.join('\n'));
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
