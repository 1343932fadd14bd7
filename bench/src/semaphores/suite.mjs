/**
 * One backend's semaphores run (issue 15): 16 workers share a semaphore of 4 permits, each looping acquire (no
 * budget to speak of) → hold 1 ms → release, for @dlock's semaphore beside a peer library or a raw recipe on the
 * same server. Per subject: permits granted per second, grants per worker (min..max), requests per grant, the
 * handoff gap (release → next grant) and the most holders ever seen at once, which must not exceed the limit.
 * Prints the table and writes it into bench/README.md between `<!-- bench:semaphores-<backend>:start -->` and its
 * end marker; exits 1 if any subject broke the limit.
 *
 *   await runSemaphoreSuite({ backend, title, server, subjects, counters?, notes?, onClose? });
 *
 * A subject is `{ key, name, version, baseline?, config, open() → worker, countRequests?() }`; a worker is one
 * application instance on connections of its own: `{ acquire(name, o), prepare?(name), requests?(), close() }`
 * (see window.mjs for acquire). `countRequests` (whole-process counters, as on Redis) wins over the sum of the
 * workers' `requests()`; `counters.commands` is a server-wide count (Redis `INFO commandstats`).
 *
 * Every worker of every subject is opened before the first window; the subjects then take turns in rounds (the
 * order rotating each round) so that drift of a shared machine hits all alike, after one short warm-up window
 * each. Flags as for the lock suites (../lib/suite.mjs): --quick, --no-readme, --readme, --provisional, --json=FILE.
 */
import { writeFileSync } from 'node:fs';
import {
  describeMachine,
  fmt,
  machineInfo,
  markdownTable,
  now,
  parseFlags,
  ratio,
  sleep,
  subjectsTable,
  summarize,
  uniqueName,
  updateReadme,
  withTimeout,
} from '../lib/index.mjs';
import { runWindow } from './window.mjs';

export const PERMITS = 4;
export const WORKERS = 16;
export const HOLD_MS = 1;
export const TTL_MS = 10_000;

const SIZES = {
  full: { rounds: 3, windowMs: 5000, warmupMs: 500 },
  quick: { rounds: 1, windowMs: 1500, warmupMs: 200 },
};

const CAP_MS = 5 * 60_000;

const describe = (error) => (error instanceof Error ? error.message : String(error));

function times(r) {
  if (Number.isNaN(r)) return '';
  if (!Number.isFinite(r)) return ' (∞×)';
  // Two significant figures below 0.1, where two decimals would print most ratios as 0.00.
  return ` (${r < 0.1 ? String(Number(r.toPrecision(2))) : fmt(r, r < 10 ? 2 : 0)}×)`;
}

function cell(value, base, digits = 0, unit = '') {
  if (typeof value !== 'number' || Number.isNaN(value)) return '—';
  return `${fmt(value, digits)}${unit}${times(ratio(value, base))}`;
}

const msDigits = (ms) => (ms < 10 ? 2 : ms < 100 ? 1 : 0);

/** The rounds of one subject summed up. */
function total(subject, windows) {
  const sum = (key) => windows.reduce((a, w) => a + w[key], 0);
  const perWorker = windows.reduce(
    (acc, w) => acc.map((n, i) => n + w.perWorker[i]),
    new Array(WORKERS).fill(0),
  );
  const min = Math.min(...perWorker);
  const max = Math.max(...perWorker);
  const grants = sum('grants');
  const requests = sum('requests');
  const commands = sum('commands');
  return {
    subject: subject.name,
    key: subject.key,
    version: subject.version,
    baseline: subject.baseline === true,
    windows: windows.length,
    seconds: sum('durationMs') / 1000,
    grants,
    grantsPerSec: sum('inWindow') / (sum('durationMs') / 1000),
    perWorker: { min, max, spread: min > 0 ? max / min : Number.POSITIVE_INFINITY, all: perWorker },
    requestsPerGrant: grants ? requests / grants : Number.NaN,
    commandsPerGrant: grants ? commands / grants : Number.NaN,
    gapMs: summarize(windows.flatMap((w) => w.gaps)),
    cpuUsPerGrant: grants ? (sum('cpuSeconds') * 1e6) / grants : Number.NaN,
    maxHolders: Math.max(0, ...windows.map((w) => w.maxHolders)),
    overLimit: sum('overLimit'),
    slotOverlaps: sum('slotOverlaps'),
    tokenRegressions: sum('tokenRegressions'),
    timeouts: sum('timeouts'),
    errors: sum('errors'),
    unfinished: windows.some((w) => w.unfinished),
    firstError: windows.find((w) => w.firstError)?.firstError,
  };
}

/** A breach of what a semaphore promises, in words; empty when there is none. */
function breaches(r) {
  const out = [];
  if (r.overLimit) out.push(`**${r.overLimit} grants over the limit**`);
  if (r.slotOverlaps) out.push(`**${r.slotOverlaps} grants of a slot still held**`);
  if (r.tokenRegressions) out.push(`**${r.tokenRegressions} slot tokens not rising**`);
  return out;
}

function problems(r) {
  const out = breaches(r);
  if (r.perWorker.min === 0) out.push('a worker starved');
  if (r.timeouts) out.push(`${r.timeouts} waits gave up`);
  if (r.errors) out.push(`${r.errors} errors`);
  if (r.unfinished) out.push('a window overran its grace');
  if (r.firstError) out.push(`first error: ${r.firstError.replace(/\s+/g, ' ').slice(0, 80)}`);
  return out.join('; ') || 'ok';
}

function resultsTable(results) {
  const b = results.find((r) => r.baseline) ?? {};
  const commands = results.some((r) => Number.isFinite(r.commandsPerGrant));
  return markdownTable(
    [
      'Subject',
      'permits granted/s',
      'per worker min..max',
      'requests/grant',
      ...(commands ? ['server commands/grant'] : []),
      'handoff gap p50',
      'handoff gap p99',
      'max holders',
      'client CPU/grant',
      'notes',
    ],
    results.map((r) => [
      r.baseline ? `${r.subject} (baseline)` : r.subject,
      cell(r.grantsPerSec, b.grantsPerSec),
      `${fmt(r.perWorker.min)}..${fmt(r.perWorker.max)}${times(r.perWorker.spread)}`,
      cell(r.requestsPerGrant, b.requestsPerGrant, 2),
      ...(commands ? [cell(r.commandsPerGrant, b.commandsPerGrant, 2)] : []),
      cell(r.gapMs.p50, b.gapMs?.p50, msDigits(r.gapMs.p50), ' ms'),
      cell(r.gapMs.p99, b.gapMs?.p99, msDigits(r.gapMs.p99), ' ms'),
      r.maxHolders > PERMITS ? `**${r.maxHolders} / ${PERMITS}**` : `${r.maxHolders} / ${PERMITS}`,
      cell(r.cpuUsPerGrant, b.cpuUsPerGrant, 0, ' µs'),
      problems(r),
    ]),
  );
}

/** What a *max holders* below the limit means, when some subject never filled the pool. */
function unfilled(results) {
  const names = results.filter((r) => r.grants && r.maxHolders < PERMITS).map((r) => r.subject);
  if (!names.length) return '';
  return (
    `${names.join(', ')} never had all ${PERMITS} permits out at once: a grant there takes longer than the ` +
    `${HOLD_MS} ms hold, so holders release before the next grants arrive, and *permits granted/s* is the rate ` +
    'of the grant path (waiters served one after another), not of a full pool.'
  );
}

/** Opens one subject's workers; closes the ones opened if any fails. */
async function openWorkers(subject) {
  const workers = [];
  try {
    for (let i = 0; i < WORKERS; i++) {
      workers.push(await withTimeout(subject.open(), 20_000, `${subject.name} worker ${i} setup`));
    }
    return workers;
  } catch (error) {
    await closeWorkers(workers);
    throw error;
  }
}

async function closeWorkers(workers, log) {
  for (const worker of workers) {
    await withTimeout(worker.close(), 10_000, 'close').catch((e) => log?.(String(e)));
  }
}

/**
 * @param {object} o
 * @param {string} o.backend     README section `semaphores-<backend>` and log prefix
 * @param {string} o.title
 * @param {{ name: string, version: string, address: string }} o.server
 * @param {object[]} o.subjects
 * @param {{ commands?: () => Promise<number> }} [o.counters]
 * @param {(string | ((results: object[]) => string))[]} [o.notes]
 * @param {() => Promise<void>} [o.onClose]   after every worker closed, before the report
 */
export async function runSemaphoreSuite({
  backend,
  title,
  server,
  subjects,
  counters = {},
  notes = [],
  onClose,
}) {
  const started = now();
  const flags = parseFlags(process.argv.slice(2));
  const section = `semaphores-${backend}`;
  const log = (msg) => process.stderr.write(`[${section}] ${msg}\n`);
  const hardCap = setTimeout(() => {
    log(`hard cap of ${CAP_MS / 1000} s reached: exiting`);
    process.exit(3);
  }, CAP_MS);
  hardCap.unref();
  const sizes = flags.quick ? SIZES.quick : SIZES.full;
  const machine = machineInfo();

  const running = [];
  const skipped = [];
  for (const subject of subjects) {
    try {
      const workers = await openWorkers(subject);
      const name = uniqueName(`sem-${subject.key}`);
      for (const worker of workers)
        await withTimeout(worker.prepare?.(name), 10_000, `${subject.name} prepare`);
      const requests =
        subject.countRequests ??
        (async () => {
          const counts = await Promise.all(workers.map((w) => (w.requests ? w.requests() : Number.NaN)));
          return counts.reduce((a, n) => a + n, 0);
        });
      running.push({
        subject,
        workers,
        name,
        counters: { requests, commands: counters.commands },
        windows: [],
      });
    } catch (error) {
      skipped.push(`${subject.name}: ${describe(error)}`);
      log(`NOT RUN: ${subject.name}: ${describe(error)}`);
    }
  }

  const window = (r, durationMs) =>
    runWindow({
      workers: r.workers,
      name: r.name,
      permits: PERMITS,
      ttlMs: TTL_MS,
      holdMs: HOLD_MS,
      durationMs,
      counters: r.counters,
    });

  for (const r of running) {
    log(`warm-up: ${r.subject.name}`);
    await window(r, sizes.warmupMs);
    await sleep(300);
  }
  for (let round = 0; round < sizes.rounds; round++) {
    for (let k = 0; k < running.length; k++) {
      const r = running[(round + k) % running.length];
      log(`round ${round + 1}/${sizes.rounds}: ${r.subject.name}`);
      r.windows.push(await window(r, sizes.windowMs));
      await sleep(300); // the previous subject's last releases and renewals settle
    }
  }

  for (const r of running) await closeWorkers(r.workers, log);
  if (onClose) await withTimeout(onClose(), 10_000, 'onClose').catch((e) => log(String(e)));
  const results = running.map((r) => total(r.subject, r.windows));
  const totalSeconds = (now() - started) / 1000;

  const caveats = [];
  if (flags.provisional) caveats.push('**Provisional**: taken while other work was running on the machine.');
  if (flags.quick) caveats.push('**Quick run** (reduced sizes): not comparable with full runs.');
  if (machine.loadavg[0] > machine.cpus / 2) {
    caveats.push(`Load average was ${machine.loadavg[0]} on ${machine.cpus} CPUs at start: expect noise.`);
  }
  const broken = results.filter((r) => breaches(r).length);
  const markdown = [
    `### Semaphores on ${title}: ${machine.date.slice(0, 10)}`,
    caveats.join(' '),
    `Figures from one run on this ${machine.cpus}-core machine (${machine.date}). Machine: ${describeMachine(machine, [`${server.name} ${server.version} at ${server.address}`])}.`,
    subjectsTable(running.map((r) => r.subject)),
    ...skipped.map((s) => `**Not run**: ${s}.`),
    `#### ${WORKERS} workers, ${PERMITS} permits: acquire → hold ${HOLD_MS} ms → release, ${sizes.rounds} × ${sizes.windowMs / 1000} s per subject`,
    results.length ? resultsTable(results) : '',
    broken.length
      ? `**Limit broken** by ${broken.map((r) => r.subject).join(', ')}: see the notes column.`
      : `No subject ever had more than ${PERMITS} holders at once, two holders on one slot, or a slot token that did not rise.`,
    unfilled(results),
    results.some((r) => r.baseline) ? 'Ratios in parentheses are to the baseline row of the same run.' : '',
    ...notes.map((note) => (typeof note === 'function' ? note(results) : note)),
    `This run took ${fmt(totalSeconds, 0)} s.`,
  ]
    .filter(Boolean)
    .join('\n\n');

  process.stdout.write(`\n${markdown}\n\n`);
  if (flags.readme) {
    updateReadme(section, markdown);
    log('results written to bench/README.md');
  }
  if (flags.json) {
    writeFileSync(flags.json, JSON.stringify({ backend, machine, server, skipped, results }, null, 2));
  }
  log(`done in ${fmt(totalSeconds, 1)} s`);
  process.exit(broken.length ? 1 : 0);
}
