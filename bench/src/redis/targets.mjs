/**
 * The goals @dlock/redis is held to on each Redis client (issue 13), judged from a run's results so the README
 * states each goal beside the figure that meets or misses it. A goal whose figure was not measured (the subject
 * was not run, or the scenario was left out) says so instead of passing.
 *
 *   singleNodeTargets({ dlock, family, peers })(results)   (A), (B) and (C) against one Redis server
 *   clusterTargets({ masters, perMaster })(results)         (C') renewal script calls summed over the masters
 */
import { fmt, markdownTable } from '../lib/index.mjs';

const A_MIN_RATIO = 0.95;
const A_MAX_COMMANDS = 6;
const B_MAX_SPREAD = 1.05;
// "Flat" requests per acquisition: 64 waiters may cost at most this much more per grant than 8.
const B_MAX_GROWTH = 1.1;
const C_MAX_REQUESTS_PER_SEC = 10;

const verdict = (ok) => (ok === undefined ? 'not measured' : ok ? 'met' : '**missed**');
const finite = (...values) => values.every((v) => typeof v === 'number' && Number.isFinite(v));
/**
 * A goal is judged on the figure as printed (two decimals): `INFO commandstats` counts every client of the server,
 * so a stray command from elsewhere must not turn a printed 6.00 into a miss of "≤ 6".
 */
const shown = (value) => Math.round(value * 100) / 100;

function row(goal, measured, ok) {
  return [goal, measured ?? '—', verdict(measured === undefined ? undefined : ok)];
}

function table(rows) {
  return markdownTable(['Target', 'Measured', ''], rows);
}

/** @param {{ dlock: string, family: string, peers?: string[] }} o */
export function singleNodeTargets({ dlock, family, peers = [] }) {
  return (results) => {
    const rows = [];
    const a = results.uncontended.find((r) => r.subject === dlock);
    const aBase = results.uncontended.find((r) => r.baseline);
    const aRatio = a && aBase ? a.opsPerSec / aBase.opsPerSec : Number.NaN;
    rows.push(
      row(
        `(A) ops/s ≥ ${A_MIN_RATIO}× raw ${family}`,
        finite(aRatio) ? `${fmt(a.opsPerSec)} vs ${fmt(aBase.opsPerSec)} (${fmt(aRatio, 2)}×)` : undefined,
        shown(aRatio) >= A_MIN_RATIO,
      ),
    );
    const peerRows = results.uncontended.filter((r) => peers.includes(r.subject) && finite(r.opsPerSec));
    if (peers.length) {
      const best = peerRows.reduce((x, r) => (x && x.opsPerSec >= r.opsPerSec ? x : r), undefined);
      rows.push(
        row(
          `(A) ops/s ahead of every peer on ${family}`,
          a && best && finite(a.opsPerSec)
            ? `${fmt(a.opsPerSec)} vs best peer ${best.subject} ${fmt(best.opsPerSec)} (${fmt(a.opsPerSec / best.opsPerSec, 2)}×)`
            : undefined,
          a && best && a.opsPerSec > best.opsPerSec,
        ),
      );
    }
    rows.push(
      row(
        `(A) server commands per cycle ≤ ${A_MAX_COMMANDS}`,
        a && finite(a.commandsPerOp) ? fmt(a.commandsPerOp, 2) : undefined,
        shown(a?.commandsPerOp) <= A_MAX_COMMANDS,
      ),
    );
    const b = results.contended.filter((r) => r.subject === dlock);
    for (const r of b) {
      rows.push(
        row(
          `(B) per-worker acquisitions max/min ≤ ${B_MAX_SPREAD} at ${r.workers} workers`,
          `${fmt(r.perWorker.min)}..${fmt(r.perWorker.max)} (${fmt(r.perWorker.spread, 2)}×)`,
          shown(r.perWorker.spread) <= B_MAX_SPREAD,
        ),
      );
    }
    const few = b.reduce((x, r) => (x && x.workers <= r.workers ? x : r), undefined);
    const many = b.reduce((x, r) => (x && x.workers >= r.workers ? x : r), undefined);
    if (few && many && few !== many) {
      const growth = many.requestsPerAcquisition / few.requestsPerAcquisition;
      rows.push(
        row(
          `(B) requests/acq flat: ${many.workers} workers ≤ ${B_MAX_GROWTH}× ${few.workers} workers`,
          finite(growth)
            ? `${fmt(many.requestsPerAcquisition, 2)} vs ${fmt(few.requestsPerAcquisition, 2)} (${fmt(growth, 2)}×)`
            : undefined,
          shown(growth) <= B_MAX_GROWTH,
        ),
      );
    } else {
      rows.push(row('(B) per-worker fairness and flat requests/acq', undefined, false));
    }
    const c = results.held.find((r) => r.subject === dlock);
    rows.push(
      row(
        `(C) ≤ ${C_MAX_REQUESTS_PER_SEC} requests/s to hold ${fmt(c?.locks ?? 1000)} locks`,
        c && finite(c.requestsPerSec)
          ? `${fmt(c.requestsPerSec, 1)} (${fmt(c.held)} held, ${fmt(c.lost)} lost)`
          : undefined,
        shown(c?.requestsPerSec) <= C_MAX_REQUESTS_PER_SEC && c.held === c.locks && c.lost === 0,
      ),
    );
    return `**Targets for ${dlock} on ${family}** (judged by this run):\n\n${table(rows)}`;
  };
}

/** @param {{ masters: number, perMaster: (result: object) => string | undefined }} o */
export function clusterTargets({ masters, perMaster }) {
  const limit = C_MAX_REQUESTS_PER_SEC * masters;
  return (results) => {
    const rows = results.held.map((r) =>
      row(
        `(C') ${r.subject}: renewal script calls/s summed over the ${masters} masters ≤ ${limit} (${C_MAX_REQUESTS_PER_SEC} × ${masters})`,
        finite(r.commandsPerSec)
          ? `${fmt(r.commandsPerSec, 1)}${perMaster(r) ? ` (${perMaster(r)})` : ''}; ${fmt(r.held)} held, ${fmt(r.lost)} lost`
          : undefined,
        shown(r.commandsPerSec) <= limit && r.held === r.locks && r.lost === 0,
      ),
    );
    if (rows.length === 0) rows.push(row(`(C') renewal script calls/s ≤ ${limit}`, undefined, false));
    return `**Targets on the cluster** (judged by this run):\n\n${table(rows)}`;
  };
}
