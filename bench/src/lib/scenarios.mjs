/**
 * The three scenarios every backend suite runs, each bounded by its own time cap and independent of the backend.
 *
 *   runUncontended(subjectOrSubjects, { iterations = 3000, rounds = 10, warmup = 200, ttlMs = 10000, capMs })
 *     (A) sequential acquire(waitMs 0) + release on one name. Given an array, runs the subjects alternately in
 *     `rounds` rounds (rotating the order) so machine drift hits all alike; returns one result per subject.
 *     → { subject, iterations, opsPerSec, latencyMs: summary, requestsPerOp, cpuUsPerOp, failures, errors, capped }
 *
 *   runContended(subject, { workers, holdMs = 2, durationMs = 5000, ttlMs = 10000, graceMs = 5000,
 *                           steadyFromMs = min(1000, durationMs / 5) })
 *     (B) `workers` loops on one name: acquire (waitMs = rest of the window) → hold → release, for the window.
 *     → { acquisitions, acquisitionsPerSec, handoffs, handoffShare, handoffGapMs: summary, perWorker: {min,max,
 *         spread}, requests, requestsPerAcquisition, steady: {fromMs, acquisitions, requests, commands},
 *         cpuSeconds, overlaps, timeouts, errors, unfinished }
 *     A handoff is an acquisition by a DIFFERENT worker than the previous holder; its gap runs from the moment
 *     the previous holder called release() to the moment the next holder's acquire resolved. `overlaps` counts
 *     grants seen before the previous holder released (must be 0); `timeouts`, waits that gave up
 *     before the window ended. Counted: acquisitions made inside the window.
 *     `requests`/`commands` count the whole run (start burst and the waits cut at the end included), but
 *     `requestsPerAcquisition`/`commandsPerAcquisition` are steady-state figures: requests sent from `steadyFromMs`
 *     after the start to the end of the window, over acquisitions made in that same span. At the start every
 *     worker queues at once, and at the end every worker still waiting gives up (a timeout, a leave): both are
 *     one-off costs per worker, not per acquisition, and would make the ratio grow with the worker count for a
 *     reason that is not the lock's. In the steady span, as many waits are pending at its start (their requests
 *     before it, their acquisitions in it) as at its end (their requests in it, their acquisitions after it).
 *
 *   runHeld(subject, { locks = 1000, ttlMs = 3000, durationMs = 10000, settleMs = 1000, concurrency = 50,
 *                      capMs = 60000 })
 *     (C) holds `locks` names with the subject's own auto-renewal, waits `settleMs`, then measures a window of
 *     `durationMs` in which the process does nothing but keep them.
 *     → { locks, held, lost, acquireErrors, requests, requestsPerSec, cpuSeconds, cpuShare }
 *
 * `summary` is stats.summarize(): { count, min, p50, p90, p99, max, mean } in ms. `requests*` come from the
 * subject's countRequests() and `commands*` (same shapes: commandsPerOp, commands, commandsPerAcquisition,
 * commandsPerSec) from countCommands(); NaN when the subject lacks the hook. Every result also carries
 * { subject: name, version, baseline }, and `firstError` (a message) when something threw. Latency samples and
 * ops/s of (A) count only completed acquire + release pairs.
 */
import { setMaxListeners } from 'node:events';
import { cpuSeconds, summarize } from './stats.mjs';
import { checkSubject } from './subject.mjs';
import { now, sleep, uniqueName, withTimeout } from './time.mjs';

const slug = (s) => s.replace(/[^a-z0-9]+/gi, '-').toLowerCase();

function identity(subject) {
  return { subject: subject.name, version: subject.version, baseline: subject.baseline === true };
}

async function read(subject, hook) {
  if (typeof subject[hook] !== 'function') return Number.NaN;
  try {
    return await withTimeout(subject[hook](), 5000, `${subject.name} ${hook}`);
  } catch {
    return Number.NaN;
  }
}

/** Snapshot of both counters; `.since()` gives the deltas. */
async function counters(subject) {
  const requests = await read(subject, 'countRequests');
  const commands = await read(subject, 'countCommands');
  // A counter that went backwards was reset under us (CONFIG RESETSTAT, a server restart): no figure, not a wrong one.
  const delta = (after, before) => (after >= before ? after - before : Number.NaN);
  return {
    since: async () => ({
      requests: delta(await read(subject, 'countRequests'), requests),
      commands: delta(await read(subject, 'countCommands'), commands),
    }),
  };
}

function message(error) {
  return error instanceof Error ? error.message : String(error);
}

/** (A) Uncontended acquire + release. */
export async function runUncontended(subjects, options = {}) {
  const list = Array.isArray(subjects) ? subjects : [subjects];
  list.forEach(checkSubject);
  const { iterations = 3000, rounds = 10, warmup = 200, ttlMs = 10_000 } = options;
  const capMs = options.capMs ?? 120_000;
  const perRound = Math.max(1, Math.round(iterations / rounds));
  const started = now();
  const states = list.map((subject) => ({
    subject,
    lockName: uniqueName(`a-${slug(subject.name)}`),
    samples: [],
    failures: 0,
    errors: 0,
    firstError: undefined,
    requests: 0,
    commands: 0,
    cpu: 0,
    broken: false,
  }));

  const segment = async (state, count, record) => {
    const { subject, lockName } = state;
    // `broken` also stops a segment that outlived its cap, so it cannot overlap the next subject's.
    for (let i = 0; i < count && !state.broken; i++) {
      const t0 = now();
      try {
        const held = await subject.acquire(lockName, { ttlMs, waitMs: 0 });
        if (!held) {
          state.failures += 1;
          continue;
        }
        await held.release();
      } catch (error) {
        state.errors += 1;
        state.firstError ??= message(error);
        if (state.errors > 20) throw error;
        continue;
      }
      if (record) state.samples.push(now() - t0);
    }
  };

  // A hung call must not hang the bench: every segment has its own cap; a subject that hits it sits out.
  const guarded = async (state, count, record) => {
    try {
      await withTimeout(
        segment(state, count, record),
        Math.max(5000, count * 20),
        `${state.subject.name} (A)`,
      );
    } catch (error) {
      state.broken = true;
      state.firstError ??= message(error);
    }
  };

  for (const state of states) await guarded(state, warmup, false);
  let capped = false;
  for (let r = 0; r < rounds; r++) {
    if (now() - started > capMs) {
      capped = true;
      break;
    }
    for (let k = 0; k < states.length; k++) {
      const state = states[(r + k) % states.length];
      if (state.broken) continue;
      const c0 = await counters(state.subject);
      const cpu0 = process.cpuUsage();
      await guarded(state, perRound, true);
      state.cpu += cpuSeconds(cpu0);
      const d = await c0.since();
      state.requests += d.requests;
      state.commands += d.commands;
    }
  }

  const results = states.map((state) => {
    const n = state.samples.length;
    const busyMs = state.samples.reduce((a, b) => a + b, 0);
    return {
      ...identity(state.subject),
      iterations: n,
      opsPerSec: n ? n / (busyMs / 1000) : Number.NaN,
      latencyMs: summarize(state.samples),
      requestsPerOp: n ? state.requests / n : Number.NaN,
      commandsPerOp: n ? state.commands / n : Number.NaN,
      cpuUsPerOp: n ? (state.cpu * 1e6) / n : Number.NaN,
      failures: state.failures,
      errors: state.errors,
      firstError: state.firstError,
      capped: capped || state.broken,
    };
  });
  return Array.isArray(subjects) ? results : results[0];
}

/** (B) `workers` loops contending for one name. */
export async function runContended(subject, options) {
  checkSubject(subject);
  const { workers, holdMs = 2, durationMs = 5000, ttlMs = 10_000, graceMs = 5000 } = options;
  const steadyFromMs = options.steadyFromMs ?? Math.min(1000, durationMs / 5);
  if (!Number.isInteger(workers) || workers < 1) throw new TypeError('runContended: workers must be >= 1');
  const lockName = uniqueName(`b${workers}-${slug(subject.name)}`);
  const controller = new AbortController();
  const { signal } = controller;
  // Every worker's pending acquire listens on this one signal: 64 listeners are expected, not a leak.
  setMaxListeners(0, signal);
  /** @type {{ worker: number, acquiredAt: number, releasedAt: number }[]} */
  const records = [];
  const perWorker = new Array(workers).fill(0);
  let timeouts = 0;
  let errors = 0;
  let firstError;

  const c0 = await counters(subject);
  const cpu0 = process.cpuUsage();
  const start = now();
  const end = start + durationMs;
  // The steady span's counters: read at steadyFromMs and at the end of the window, by timers beside the workers.
  const steadyRequests = sleep(steadyFromMs)
    .then(() => counters(subject))
    .then(async (c1) => {
      await sleep(end - now());
      return c1.since();
    });

  const worker = async (w) => {
    while (!signal.aborted && now() < end) {
      let held;
      try {
        held = await subject.acquire(lockName, { ttlMs, waitMs: Math.max(1, end - now()), signal });
      } catch (error) {
        if (signal.aborted) return;
        errors += 1;
        firstError ??= message(error);
        await sleep(10, signal); // a failing backend must not turn this loop into a busy spin
        continue;
      }
      if (!held) {
        // A wait that ran to the end of the window is how every worker stops; only earlier give-ups count.
        if (now() < end - 20) {
          timeouts += 1;
          await sleep(1, signal); // a subject that gives up at once must not make this a tight loop
        }
        continue;
      }
      const acquiredAt = now();
      await sleep(holdMs);
      const releasedAt = now();
      try {
        await held.release();
      } catch (error) {
        errors += 1;
        firstError ??= message(error);
      }
      if (acquiredAt < end) {
        records.push({ worker: w, acquiredAt, releasedAt });
        perWorker[w] += 1;
      }
    }
  };

  const done = Promise.all(Array.from({ length: workers }, (_, w) => worker(w)));
  let unfinished = !(await Promise.race([
    done.then(() => true),
    sleep(durationMs + graceMs).then(() => false),
  ]));
  if (unfinished) {
    controller.abort();
    unfinished = !(await Promise.race([done.then(() => true), sleep(2000).then(() => false)]));
  }
  const cpu = cpuSeconds(cpu0);
  const { requests, commands } = await c0.since();
  const steady = await steadyRequests;
  const steadyFrom = start + steadyFromMs;
  const steadyAcquisitions = records.filter((r) => r.acquiredAt >= steadyFrom).length;

  records.sort((a, b) => a.acquiredAt - b.acquiredAt);
  const gaps = [];
  let overlaps = 0;
  for (let i = 1; i < records.length; i++) {
    const prev = records[i - 1];
    const next = records[i];
    if (next.acquiredAt < prev.releasedAt) overlaps += 1;
    if (next.worker !== prev.worker) gaps.push(next.acquiredAt - prev.releasedAt);
  }
  const min = Math.min(...perWorker);
  const max = Math.max(...perWorker);
  return {
    ...identity(subject),
    workers,
    holdMs,
    durationMs,
    acquisitions: records.length,
    acquisitionsPerSec: records.length / (durationMs / 1000),
    handoffs: gaps.length,
    handoffShare: records.length > 1 ? gaps.length / (records.length - 1) : Number.NaN,
    handoffGapMs: summarize(gaps),
    perWorker: { min, max, spread: min > 0 ? max / min : Number.POSITIVE_INFINITY },
    requests,
    requestsPerAcquisition: steadyAcquisitions ? steady.requests / steadyAcquisitions : Number.NaN,
    commands,
    commandsPerAcquisition: steadyAcquisitions ? steady.commands / steadyAcquisitions : Number.NaN,
    steady: {
      fromMs: steadyFromMs,
      acquisitions: steadyAcquisitions,
      requests: steady.requests,
      commands: steady.commands,
    },
    cpuSeconds: cpu,
    overlaps,
    timeouts,
    errors,
    firstError,
    unfinished,
  };
}

/** Runs `fn` over `items` with at most `concurrency` in flight. */
async function pool(items, concurrency, fn) {
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, lane));
}

/** (C) Many locks held with the subject's own auto-renewal. */
export async function runHeld(subject, options = {}) {
  checkSubject(subject);
  if (typeof subject.hold !== 'function') throw new TypeError(`subject ${subject.name}: missing hold()`);
  const { locks = 1000, ttlMs = 3000, durationMs = 10_000, settleMs = 1000, concurrency = 50 } = options;
  const capMs = options.capMs ?? 60_000;
  const prefix = uniqueName(`c-${slug(subject.name)}`);
  const names = Array.from({ length: locks }, (_, i) => `${prefix}:${i}`);
  /** @type {import('./subject.mjs').Held[]} */
  const helds = [];
  let lost = 0;
  let acquireErrors = 0;
  let firstError;
  const onLost = () => {
    lost += 1;
  };

  const acquireAll = pool(names, concurrency, async (name) => {
    try {
      helds.push(await subject.hold(name, { ttlMs, onLost }));
    } catch (error) {
      acquireErrors += 1;
      firstError ??= message(error);
    }
  });
  try {
    await withTimeout(acquireAll, capMs, `${subject.name}: acquiring ${locks} locks`);
  } catch (error) {
    firstError ??= message(error);
  }

  // The garbage and JIT work of acquiring a thousand locks is not renewal cost: let it pass before measuring.
  await sleep(settleMs);
  const c0 = await counters(subject);
  const cpu0 = process.cpuUsage();
  const t0 = now();
  await sleep(durationMs);
  const elapsedS = (now() - t0) / 1000;
  const cpu = cpuSeconds(cpu0);
  const { requests, commands } = await c0.since();
  const lostInWindow = lost;
  const heldCount = helds.length;

  const releaseAll = pool(helds.splice(0), concurrency, (held) => held.release().catch(() => {}));
  try {
    await withTimeout(releaseAll, capMs, `${subject.name}: releasing ${locks} locks`);
  } catch (error) {
    firstError ??= message(error);
  }
  return {
    ...identity(subject),
    locks,
    ttlMs,
    durationMs,
    held: heldCount,
    lost: lostInWindow,
    acquireErrors,
    requests,
    requestsPerSec: requests / elapsedS,
    commands,
    commandsPerSec: commands / elapsedS,
    cpuSeconds: cpu,
    cpuShare: cpu / elapsedS,
    firstError,
  };
}
