/**
 * The PostgreSQL suite: a raw `INSERT … ON CONFLICT` lease (the floor), @dlock/postgres (default and with prepared
 * statements) and `pg_advisory_xact_lock`, side by side against one PostgreSQL (DLOCK_BENCH_PG_URL, default
 * postgres://postgres@127.0.0.1:5432/test). Run through `node src/run.mjs postgres` (or `pnpm bench`); flags in
 * ../lib/suite.mjs. Each subject has a schema of its own, dropped when it closes.
 */
import { runSuite } from '../lib/index.mjs';
import { advisorySubject } from './advisory.mjs';
import { PG_URL, serverVersion } from './client.mjs';
import { dlockSubject } from './dlock.mjs';
import { rawSubject } from './raw.mjs';

const server = await serverVersion();
const ratio = (a, b) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? a / b : Number.NaN);
const fmt = (x, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');
const pass = (ok) => (ok === undefined ? 'not measured' : ok ? '**met**' : '**missed**');

/** Issue 16's goals for @dlock/postgres, judged on this run's figures. */
function targets(results) {
  const raw = results.uncontended.find((r) => r.baseline);
  const lines = ['Goals (issue 16), judged on this run:', ''];
  for (const label of ['default', 'prepared statements']) {
    const name = `@dlock/postgres (${label})`;
    const a = results.uncontended.find((r) => r.subject === name);
    const b8 = results.contended.find((r) => r.subject === name && r.workers === 8);
    const b64 = results.contended.find((r) => r.subject === name && r.workers === 64);
    const c = results.held.find((r) => r.subject === name);
    const slower = a && raw ? ratio(a.latencyMs.p50, raw.latencyMs.p50) : Number.NaN;
    const flat = b8 && b64 ? ratio(b64.requestsPerAcquisition, b8.requestsPerAcquisition) : Number.NaN;
    lines.push(
      `- ${name}: (A) p50 of acquire + release ${fmt(slower)}× the raw lease (goal ≤ 1.20×): ${pass(Number.isFinite(slower) ? slower <= 1.2 : undefined)}; ` +
        `(B) statements per acquisition ${fmt(b8?.requestsPerAcquisition)} at 8 workers, ${fmt(b64?.requestsPerAcquisition)} at 64 (${fmt(flat)}×, goal flat, ≤ 1.10×): ${pass(Number.isFinite(flat) ? flat <= 1.1 : undefined)}; ` +
        `(C) ${fmt(c?.requestsPerSec)} statements/s for 1,000 held locks (goal ≤ 10): ${pass(c ? c.requestsPerSec <= 10 : undefined)}.`,
    );
  }
  return lines.join('\n');
}

await runSuite({
  backend: 'postgres',
  title: 'PostgreSQL',
  server: {
    name: 'PostgreSQL',
    version: `${server.version} (synchronous_commit = ${server.synchronousCommit})`,
    address: PG_URL.replace(/:[^:@/]*@/, ':***@'),
  },
  subjects: [
    rawSubject(),
    dlockSubject({ preparedStatements: false }),
    dlockSubject({ preparedStatements: true }),
    advisorySubject(),
  ],
  uncontended: { iterations: 2000, rounds: 20 },
  contended: { workers: [8, 64], holdMs: 2, durationMs: 5000 },
  held: { locks: 1000, ttlMs: 3000, durationMs: 10_000 },
  heldLabels: { requests: 'statements/s', commands: 'rows updated/s' },
  targets,
  notes: [
    '*requests* here are statements: every statement a subject sent through its pool, counted by a wrapper around ' +
      "the pool's `query` (the advisory subject's BEGIN, lock and COMMIT each count). *rows updated/s* in (C): rows " +
      'changed by the UPDATE statements (the renewals). Each commit that writes waits for its WAL flush ' +
      '(`synchronous_commit = on`): that flush, not the statement, is most of an uncontended acquire or release; ' +
      '`pg_advisory_xact_lock` writes nothing and pays no flush.',
  ],
});
