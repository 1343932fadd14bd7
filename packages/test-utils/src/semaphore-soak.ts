import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  checkSemaphoreHistory,
  type HistoryReport,
  type HoldRecord,
  openWindow,
} from './semaphore-history.js';
import {
  machineMs,
  type SoakClient,
  type SoakLine,
  type SoakPermit,
  type SoakWorkerSpec,
} from './semaphore-soak-types.js';

export * from './semaphore-soak-types.js';

const WORKER = fileURLToPath(new URL('./semaphore-soak-worker.js', import.meta.url));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const live = new Set<ChildProcess>();
let exitHookInstalled = false;
/** A runner that dies mid-test must not leave soak processes behind (a stopped one would never end by itself). */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of live) {
      try {
        child.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  });
}

/** A running soak process (semaphore-soak-worker.js) and what it reported so far. */
export interface SoakProcess {
  readonly label: string;
  readonly pid: number;
  readonly lines: readonly SoakLine[];
  readonly stderr: string;
  /** Its exit code, once it exited (null when killed by a signal). */
  readonly exited: Promise<number | null>;
  /**
   * The first line at index `from` or later (already seen or to come) that `match` accepts; rejects on a fatal line,
   * an exit, or after `ms`.
   */
  next<T extends SoakLine>(match: (line: SoakLine) => line is T, ms: number, from?: number): Promise<T>;
  /** SIGSTOP: a GC or VM pause of the whole process. */
  freeze(): void;
  /** SIGCONT. */
  thaw(): void;
  /** SIGKILL: a crash. */
  kill(): void;
  /** SIGTERM: it lets go of its permits and exits as at the end of its duration (SIGKILL after `ms`). */
  stop(ms?: number): Promise<number | null>;
}

/** Starts one soak process on `spec`; it runs the backend's fixture module and exits by itself. */
export function startSoakProcess(spec: SoakWorkerSpec): SoakProcess {
  installExitHook();
  const child = spawn(process.execPath, [WORKER, JSON.stringify(spec)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  const lines: SoakLine[] = [];
  const listeners = new Set<() => void>();
  let partial = '';
  let stderr = '';
  let fatal: SoakLine | undefined;
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    partial += chunk;
    const complete = partial.split('\n');
    partial = complete.pop() ?? '';
    for (const text of complete) {
      if (text.trim() === '') continue;
      const line = JSON.parse(text) as SoakLine;
      lines.push(line);
      if (line.type === 'fatal') fatal = line;
    }
    for (const listener of listeners) listener();
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    // Enough to explain a crash; a chatty process must not fill the test's memory.
    if (stderr.length < 20_000) stderr += chunk;
  });
  let gone = false;
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', (code) => {
      gone = true;
      live.delete(child);
      for (const listener of listeners) listener();
      resolve(code);
    });
  });
  const signal = (name: NodeJS.Signals): void => {
    if (!gone) child.kill(name);
  };
  return {
    label: spec.label,
    pid: child.pid ?? -1,
    lines,
    get stderr() {
      return stderr;
    },
    exited,
    next<T extends SoakLine>(match: (line: SoakLine) => line is T, ms: number, from = 0): Promise<T> {
      return new Promise<T>((resolve, reject) => {
        // Lines already looked at are not looked at again: a soak process writes thousands.
        let scanned = from;
        let found: T | undefined;
        const check = (): void => {
          for (; found === undefined && scanned < lines.length; scanned++) {
            const line = lines[scanned] as SoakLine;
            if (match(line)) found = line;
          }
          const hit = found;
          if (hit) finish(() => resolve(hit));
          else if (fatal) finish(() => reject(new Error(`${spec.label} failed: ${JSON.stringify(fatal)}`)));
          else if (gone) finish(() => reject(new Error(`${spec.label} exited first; stderr: ${stderr}`)));
        };
        const finish = (settle: () => void): void => {
          clearTimeout(timer);
          listeners.delete(check);
          settle();
        };
        const timer = setTimeout(
          () => finish(() => reject(new Error(`${spec.label}: nothing matching within ${ms} ms`))),
          ms,
        );
        listeners.add(check);
        check();
      });
    },
    freeze: () => signal('SIGSTOP'),
    thaw: () => signal('SIGCONT'),
    kill: () => signal('SIGKILL'),
    async stop(ms = 5_000) {
      signal('SIGCONT');
      signal('SIGTERM');
      const timer = setTimeout(() => signal('SIGKILL'), ms);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

/** The faults a backend's soak can inject besides freezing soak processes. */
export interface SoakFaults {
  /** SIGSTOP / SIGCONT of the backend's server: a private one the test started, never a shared one. */
  readonly backend?: { pause(): void; resume(): void };
  /** Resets every connection of the soak processes (e.g. a TcpProxy's `resetAll`). */
  readonly resetConnections?: () => void;
}

export interface SemaphoreSoakOptions {
  /** File URL or path of the backend's fixture module (default export: a SoakBackendFactory). */
  readonly factory: string;
  /** The factory's config, or one per process (e.g. to mix a backend's modes in one run). */
  readonly config:
    | Readonly<Record<string, unknown>>
    | ((process: number) => Readonly<Record<string, unknown>>);
  readonly name: string;
  readonly permits: number;
  readonly ttlMs: number;
  readonly processes: number;
  readonly workersPerProcess: number;
  readonly durationMs: number;
  /** Each acquire's budget; default 2 s. */
  readonly waitMs?: number;
  /** Default 5 and 50 ms. */
  readonly holdMinMs?: number;
  readonly holdMaxMs?: number;
  readonly faults: SoakFaults;
  /** How long a frozen process stays frozen; default TTL + 600 ms (past its TTL). */
  readonly freezeMs?: number;
  /** How long each backend pause lasts; default half the TTL, then 1.5 TTL (past it). */
  readonly backendPausesMs?: readonly number[];
  /** Default 1.5 s. */
  readonly resetEveryMs?: number;
  /**
   * Reads the permits the server holds for the semaphore right now (each slot held and its token), through a client
   * of the test's own; polled through the run, so that a permit no worker ever reported (an orphan) shows.
   */
  readonly audit?: () => Promise<readonly { readonly slot: number; readonly token: string }[]>;
}

/** A permit the audit saw on the server, and whether some worker reported holding it. */
export interface ServerPermit {
  readonly slot: number;
  readonly token: string;
  /** Machine-clock ms of the first and last poll that saw it. */
  readonly firstSeen: number;
  readonly lastSeen: number;
  readonly claimed: boolean;
}

export interface SoakFault {
  readonly kind: 'freeze-process' | 'pause-backend' | 'reset-connections';
  /** Machine-clock ms (see `machineMs`), as the records' times. */
  readonly from: number;
  readonly to: number;
  /** The frozen process. */
  readonly process?: string;
  /** Slots the frozen process held when it froze, and how long after the freeze another process got each. */
  readonly takeoverMs?: readonly { readonly slot: number; readonly ms: number | null }[];
  /** After a backend pause: how long until the next permit was granted to anyone. */
  readonly recoveryMs?: number | null;
}

export interface SemaphoreSoakResult {
  readonly report: HistoryReport;
  readonly records: readonly HoldRecord[];
  readonly faults: readonly SoakFault[];
  /** Per process: its summary line (undefined when it never wrote one) and its exit code. */
  readonly processes: readonly {
    readonly label: string;
    readonly code: number | null;
    readonly summary: Extract<SoakLine, { type: 'summary' }> | undefined;
    readonly stderr: string;
  }[];
  /** Machine-clock ms of the first and last hold start. */
  readonly firstStart: number;
  readonly lastStart: number;
  /** What the audit saw (empty without one), and how many of its polls answered. */
  readonly serverPermits: readonly ServerPermit[];
  readonly auditPolls: number;
}

/**
 * Runs `processes` soak processes of `workersPerProcess` workers each for `durationMs` while it freezes processes
 * that hold permits past their TTL, pauses the backend (shortly, then past the TTL) and resets connections; then
 * judges the history. Faults are spaced over the first 85 % of the run, so the end shows the system recovered.
 * With `DLOCK_SOAK_DUMP=<dir>` set, every line the processes wrote and the faults go to `<dir>/<name>.jsonl`.
 */
export async function runSemaphoreSoak(options: SemaphoreSoakOptions): Promise<SemaphoreSoakResult> {
  const {
    ttlMs,
    durationMs,
    waitMs = 2_000,
    holdMinMs = 5,
    holdMaxMs = 50,
    freezeMs = ttlMs + 600,
    backendPausesMs = [Math.round(ttlMs / 2), Math.round(ttlMs * 1.5)],
    resetEveryMs = 1_500,
  } = options;
  const children = Array.from({ length: options.processes }, (_, i) =>
    startSoakProcess({
      factory: options.factory,
      config: typeof options.config === 'function' ? options.config(i) : options.config,
      label: `p${i}`,
      name: options.name,
      permits: options.permits,
      ttlMs,
      workers: options.workersPerProcess,
      durationMs,
      waitMs,
      holdMinMs,
      holdMaxMs,
    }),
  );
  const faults: SoakFault[] = [];
  const seen = new Map<string, { slot: number; token: string; firstSeen: number; lastSeen: number }>();
  let auditPolls = 0;
  let auditing = true;
  let audited: Promise<void> = Promise.resolve();
  try {
    await Promise.all(children.map((c) => c.next((l) => l.type === 'ready', 20_000)));
    const began = machineMs();
    const audit = options.audit;
    if (audit) {
      audited = (async () => {
        while (auditing) {
          // A paused server answers nothing: a poll gives up after a second, and the next one tries again.
          const held = await Promise.race([
            audit().catch(() => undefined),
            sleep(1_000).then(() => undefined),
          ]);
          const now = machineMs();
          if (held) {
            auditPolls += 1;
            for (const { slot, token } of held) {
              const key = `${slot} ${token}`;
              const entry = seen.get(key) ?? { slot, token, firstSeen: now, lastSeen: now };
              entry.lastSeen = now;
              seen.set(key, entry);
            }
          }
          await sleep(50);
        }
      })();
    }
    const tasks: Promise<void>[] = [];
    const at = (fraction: number, task: () => Promise<void>): void => {
      tasks.push(sleep(fraction * durationMs).then(task));
    };

    // Freezes go to a process the moment it reports a new grant, so each one (nearly always) takes a permit away
    // from a live holder; after a second without any grant, to the next process in turn.
    const freezeAt = [0.1, 0.35, 0.6, 0.78];
    freezeAt.forEach((fraction, i) => {
      at(fraction, async () => {
        const target = (await nextGrant(children, 1_000)) ?? children[i % children.length];
        if (!target) return;
        const from = machineMs();
        target.freeze();
        await sleep(freezeMs);
        target.thaw();
        faults.push({ kind: 'freeze-process', process: target.label, from, to: machineMs() });
      });
    });
    const backend = options.faults.backend;
    if (backend) {
      backendPausesMs.forEach((ms, i) => {
        at(0.22 + 0.26 * i, async () => {
          const from = machineMs();
          backend.pause();
          await sleep(ms);
          backend.resume();
          faults.push({ kind: 'pause-backend', from, to: machineMs() });
        });
      });
    }
    const reset = options.faults.resetConnections;
    if (reset) {
      for (let t = 0.05 * durationMs; t < 0.85 * durationMs; t += resetEveryMs) {
        at(t / durationMs, async () => {
          const from = machineMs();
          reset();
          faults.push({ kind: 'reset-connections', from, to: from });
        });
      }
    }
    await Promise.all(tasks);
    // Each process ends by itself; the bound only catches one that does not.
    const left = began + durationMs + waitMs + 5_000 - machineMs();
    await Promise.race([Promise.all(children.map((c) => c.exited)), sleep(Math.max(0, left))]);
  } finally {
    auditing = false;
    for (const child of children) child.thaw();
    await Promise.all(children.map((c) => Promise.race([c.exited, sleep(100)]).then(() => c.kill())));
    await audited;
  }

  const records = children.flatMap((c) =>
    c.lines
      .filter((l): l is Extract<SoakLine, { type: 'hold' }> => l.type === 'hold')
      .map(({ type, ...r }) => r),
  );
  const claimed = new Set(records.map((r) => `${r.slot} ${r.token}`));
  const serverPermits = [...seen.values()].map((p) => ({
    ...p,
    claimed: claimed.has(`${p.slot} ${p.token}`),
  }));
  const dump = process.env['DLOCK_SOAK_DUMP'];
  if (dump) {
    // Every line of every process, the faults and what the audit saw, for reading a run (or a failure) afterwards.
    const lines = [
      ...children.flatMap((c) => c.lines),
      ...faults.map((f) => ({ type: 'fault', ...f })),
      ...serverPermits.map((p) => ({ type: 'server-permit', ...p })),
    ];
    writeFileSync(join(dump, `${options.name}.jsonl`), lines.map((l) => JSON.stringify(l)).join('\n'));
  }
  const report = checkSemaphoreHistory(records, options.permits);
  const starts = records.map((r) => r.start);
  return {
    report,
    records,
    faults: faults.sort((a, b) => a.from - b.from).map((f) => measureFault(f, records)),
    processes: await Promise.all(
      children.map(async (c) => ({
        label: c.label,
        code: await c.exited,
        summary: c.lines.find((l): l is Extract<SoakLine, { type: 'summary' }> => l.type === 'summary'),
        stderr: c.stderr,
      })),
    ),
    firstStart: Math.min(...starts),
    lastStart: Math.max(...starts),
    serverPermits,
    auditPolls,
  };
}

/** The first process to report a grant from now on, or undefined after `ms`. */
async function nextGrant(children: readonly SoakProcess[], ms: number): Promise<SoakProcess | undefined> {
  const seen = children.map((c) => c.lines.length);
  const granted = children.map((c, i) =>
    c.next((line): line is SoakLine => line.type === 'acquired', ms, seen[i]).then(() => c),
  );
  return Promise.any(granted).catch(() => undefined);
}

/** What the history says about one fault: who took a frozen process's slots, and when, or when grants resumed. */
function measureFault(fault: SoakFault, records: readonly HoldRecord[]): SoakFault {
  if (fault.kind === 'pause-backend') {
    const next = records.filter((r) => r.start > fault.to).sort((a, b) => a.start - b.start)[0];
    return { ...fault, recoveryMs: next ? next.start - fault.to : null };
  }
  if (fault.kind !== 'freeze-process') return fault;
  const held = records.filter(
    (r) => r.process === fault.process && r.start < fault.from && openWindow(r).to > fault.from,
  );
  const takeoverMs = [...new Set(held.map((r) => r.slot))].sort().map((slot) => {
    const next = records
      .filter((r) => r.slot === slot && r.process !== fault.process && r.start > fault.from)
      .sort((a, b) => a.start - b.start)[0];
    return { slot, ms: next ? next.start - fault.from : null };
  });
  return { ...fault, takeoverMs };
}

/**
 * A process holding every permit is killed (SIGKILL) while another process waits for them: resolves with how long
 * after the kill the waiting process got each slot (null if it did not within `maxMs`).
 */
export async function measureKilledPermitsReturn(options: {
  readonly factory: string;
  readonly config: Readonly<Record<string, unknown>>;
  readonly name: string;
  readonly permits: number;
  readonly ttlMs: number;
  readonly maxMs: number;
}): Promise<{ readonly slots: readonly { readonly slot: number; readonly ms: number | null }[] }> {
  const base = {
    factory: options.factory,
    config: options.config,
    name: options.name,
    permits: options.permits,
    ttlMs: options.ttlMs,
    workers: options.permits,
    durationMs: 30_000,
    waitMs: 20_000,
    holdMinMs: 30_000,
    holdMaxMs: 30_000,
  };
  const holder = startSoakProcess({ ...base, label: 'holder' });
  let taker: SoakProcess | undefined;
  try {
    const acquired = (line: SoakLine): line is Extract<SoakLine, { type: 'acquired' }> =>
      line.type === 'acquired';
    const held = async (p: SoakProcess, count: number, ms: number) => {
      await p.next((l): l is SoakLine => p.lines.filter(acquired).length >= count, ms);
      return p.lines.filter(acquired);
    };
    const slots = (await held(holder, options.permits, 20_000)).map((l) => l.slot);
    taker = startSoakProcess({ ...base, label: 'taker' });
    await taker.next((l) => l.type === 'ready', 20_000);
    // Its workers are queued by now: what follows measures the service giving the slots back, not a start-up.
    await sleep(500);
    const killedAt = machineMs();
    holder.kill();
    const got = await held(taker, options.permits, options.maxMs).catch(
      () => taker?.lines.filter(acquired) ?? [],
    );
    return {
      slots: slots.sort().map((slot) => {
        const line = got.find((l) => l.slot === slot);
        return { slot, ms: line ? line.at - killedAt : null };
      }),
    };
  } finally {
    holder.kill();
    await taker?.stop();
  }
}

/** How a crowd of given-up waiters ended. */
export interface AbandonedWaiters {
  /** The permits held while they waited; the caller releases them. */
  readonly holders: readonly SoakPermit[];
  readonly aborted: number;
  readonly timedOut: number;
  /** Anything else they rejected with, by error code or name. */
  readonly otherErrors: Readonly<Record<string, number>>;
  /** Waiters that got a permit (none should: every permit is held throughout); released at once. */
  readonly granted: number;
}

/**
 * Fills the semaphore, then starts `count` waiters on it that all give up: half by an abort signal after 0–100 ms,
 * half by a wait budget of 5–150 ms. The caller then reads the server for anything they left.
 */
export async function abandonWaiters(
  client: SoakClient,
  options: {
    readonly name: string;
    readonly permits: number;
    readonly ttlMs: number;
    readonly count: number;
  },
): Promise<AbandonedWaiters> {
  const semaphore = client.semaphore(options.name, { permits: options.permits, ttlMs: options.ttlMs });
  const holders: SoakPermit[] = [];
  for (let i = 0; i < options.permits; i++) holders.push(await semaphore.acquire({ waitMs: 5_000 }));
  let aborted = 0;
  let timedOut = 0;
  let granted = 0;
  const otherErrors: Record<string, number> = {};
  await Promise.all(
    Array.from({ length: options.count }, async (_, i) => {
      const controller = new AbortController();
      const byAbort = i % 2 === 0;
      const timer = byAbort ? setTimeout(() => controller.abort(), Math.random() * 100) : undefined;
      try {
        const permit = await semaphore.acquire(
          byAbort
            ? { waitMs: 10_000, signal: controller.signal }
            : { waitMs: 5 + Math.floor(Math.random() * 146) },
        );
        granted += 1;
        await permit.release().catch(() => {});
      } catch (error) {
        const code = (error as { code?: unknown } | null)?.code;
        if (byAbort && controller.signal.aborted && error === controller.signal.reason) aborted += 1;
        else if (code === 'ACQUIRE_TIMEOUT') timedOut += 1;
        else {
          const key = typeof code === 'string' ? code : error instanceof Error ? error.name : String(error);
          otherErrors[key] = (otherErrors[key] ?? 0) + 1;
        }
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  return { holders, aborted, timedOut, otherErrors, granted };
}

/** A few lines on a soak run for the test's log: holds, open windows, faults and how the system came back. */
export function formatSoakResult(result: SemaphoreSoakResult): string {
  const { report } = result;
  const round = (ms: number | null | undefined): string =>
    ms === null || ms === undefined ? '-' : ms.toFixed(0);
  const count = (kind: SoakFault['kind']) => result.faults.filter((f) => f.kind === kind).length;
  const unclaimed = result.serverPermits.filter((p) => !p.claimed);
  const errors = (pick: 'errors' | 'releaseErrors') => {
    const all: Record<string, number> = {};
    for (const p of result.processes)
      for (const [key, n] of Object.entries(p.summary?.[pick] ?? {})) all[key] = (all[key] ?? 0) + n;
    return JSON.stringify(all);
  };
  return [
    `holds ${report.holds} (per slot ${report.perSlot.join('/')}, lost ${report.lost}) over ${((result.lastStart - result.firstStart) / 1_000).toFixed(1)} s, max open windows ${report.maxOpen}, violations ${report.violations.length}`,
    `faults: ${count('freeze-process')} process freezes, ${count('pause-backend')} backend pauses, ${count('reset-connections')} connection resets`,
    ...result.faults
      .filter((f) => f.kind !== 'reset-connections')
      .map((f) =>
        f.kind === 'pause-backend'
          ? `  backend paused ${round(f.to - f.from)} ms: next grant ${round(f.recoveryMs)} ms after resume`
          : `  ${f.process} frozen ${round(f.to - f.from)} ms holding slots [${f.takeoverMs?.map((t) => t.slot).join(',')}]: taken over after [${f.takeoverMs?.map((t) => round(t.ms)).join(',')}] ms`,
      ),
    ...(result.auditPolls > 0
      ? [
          `audit: ${result.auditPolls} polls saw ${result.serverPermits.length} permits on the server, ${unclaimed.length} never reported by a worker${unclaimed.length > 0 ? ` (longest seen ${round(Math.max(...unclaimed.map((p) => p.lastSeen - p.firstSeen)))} ms)` : ''}`,
        ]
      : []),
    `acquire errors ${errors('errors')}, release errors ${errors('releaseErrors')}, exit codes ${result.processes.map((p) => p.code).join(',')}`,
  ].join('\n');
}

/**
 * Permits the audit saw on the server for longer than `ms` that no worker ever reported holding: orphans (a grant
 * whose caller gave up must be given back, a lost reply undone, within the client's operation timeout).
 */
export function orphanPermits(result: SemaphoreSoakResult, ms: number): readonly ServerPermit[] {
  return result.serverPermits.filter((p) => !p.claimed && p.lastSeen - p.firstSeen > ms);
}
