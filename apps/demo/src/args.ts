import { type DbSpec, type LockSpec, parseDbUrl, parseLockUrl } from './backends.js';
import { UsageError } from './errors.js';
import { type ScenarioSettings, seededPauseWorker } from './plan.js';

export interface CliOptions {
  readonly lock: LockSpec;
  readonly db: DbSpec;
  readonly settings: ScenarioSettings;
  /** Dashboard port; 0 picks a free one. `portGiven` is false when the default was used (then a busy port falls back). */
  readonly port: number;
  readonly portGiven: boolean;
  readonly once: boolean;
  /** Seconds the dashboard stays up after a run while no browser shows it. */
  readonly lingerS: number;
  readonly browserHint: boolean;
  readonly help: boolean;
}

export const DEFAULT_PORT = 8765;
export const INITIAL_BALANCE = 1000;

/** Lease floors of the servers: etcd grants whole seconds of at least 2; a ZooKeeper session lasts 2–20 ticks. */
const MIN_TTL_MS: Readonly<Record<LockSpec['kind'], number>> = {
  memory: 100,
  redis: 100,
  etcd: 2_000,
  zookeeper: 4_000,
  postgres: 100,
};

export const HELP = `Usage: dlock-demo [options]

Shows why a lock alone cannot protect a write, and how a fencing token does. Workers deposit into one account,
each under the account's lock; one worker is frozen (stop-the-world) while it holds the lock, longer than the
lock's TTL. The same scenario runs twice at once: without a fencing gate (its stale write lands and deposits are
lost) and through @dlock/fencing-kysely (its stale write is rejected and the worker redoes its deposit).

Backends (default: everything embedded, no server needed):
  --lock <url>          memory (default) | redis://host:6379 | etcd://host:2379 | zk://host:2181
                        | postgres://user@host:5432/db
                        (or DLOCK_DEMO_LOCK)
  --db <url>            pglite (default, in-process) | postgres://user@host:5432/db   (or DLOCK_DEMO_DB)

Scenario:
  --workers <n>         workers sharing the account, 2-12 (default 4)
  --iterations <n>      deposits per worker, 1-50 (default 4)
  --ttl <ms>            lock TTL (default 1000; at least 2000 on etcd, 4000 on ZooKeeper)
  --pause <ms>          how long the worker is frozen (default TTL + 2500; TTL + 5000 on ZooKeeper)
  --pause-worker <n>    which worker is frozen, or "none" to pause only from the dashboard (default: from seed)
  --seed <n>            seed for amounts, work times and the frozen worker (default 1)

Output:
  --port <n>            dashboard port on 127.0.0.1 (default ${DEFAULT_PORT}, or a free one if taken; 0: any)
  --once                run the scenario once and exit: 0 if the fenced balance is exact, 1 if not
  --linger <s>          after the run, keep the dashboard up this long with no browser open (default 20)
  --no-browser-hint     do not suggest opening the dashboard
  -h, --help            this text

Exit status: 0 fenced balance exact, 1 it was not or the scenario failed, 2 bad usage, 3 a backend unreachable.
`;

type Flag =
  | 'lock'
  | 'db'
  | 'workers'
  | 'iterations'
  | 'ttl'
  | 'pause'
  | 'pause-worker'
  | 'seed'
  | 'port'
  | 'linger';
const VALUE_FLAGS = new Set<string>([
  'lock',
  'db',
  'workers',
  'iterations',
  'ttl',
  'pause',
  'pause-worker',
  'seed',
  'port',
  'linger',
]);
const SWITCHES = new Set(['once', 'no-browser-hint', 'help']);

/** Parses the command line. Throws `UsageError` with a one-line message for anything it cannot accept. */
export function parseArgs(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): CliOptions {
  const values = new Map<Flag, string>();
  const switches = new Set<string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? '';
    if (arg === '-h') {
      switches.add('help');
      continue;
    }
    if (!arg.startsWith('--')) throw new UsageError(`unexpected argument "${arg}" (see --help)`);
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    if (SWITCHES.has(name)) {
      if (eq !== -1) throw new UsageError(`--${name} takes no value`);
      switches.add(name);
      continue;
    }
    if (!VALUE_FLAGS.has(name)) throw new UsageError(`unknown option --${name} (see --help)`);
    let value: string | undefined;
    if (eq !== -1) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined || value.startsWith('--')) throw new UsageError(`--${name} needs a value`);
      i++;
    }
    if (values.has(name as Flag)) throw new UsageError(`--${name} given twice`);
    values.set(name as Flag, value);
  }

  const lock = parseLockUrl(values.get('lock') ?? env['DLOCK_DEMO_LOCK'] ?? 'memory');
  const db = parseDbUrl(values.get('db') ?? env['DLOCK_DEMO_DB'] ?? 'pglite');
  const workers = integer(values.get('workers'), 'workers', 4, 2, 12);
  const iterations = integer(values.get('iterations'), 'iterations', 4, 1, 50);
  const minTtl = MIN_TTL_MS[lock.kind];
  const ttlMs = integer(values.get('ttl'), 'ttl', Math.max(1_000, minTtl), 10, 60_000);
  if (ttlMs < minTtl) {
    throw new UsageError(`--ttl must be at least ${minTtl} ms with the ${lock.kind} backend, got ${ttlMs}`);
  }
  // Long enough past the TTL for the others to take over and finish their deposits. ZooKeeper expires a session
  // only on one of its ticks (2 s by default) after the timeout, so it gets more.
  const pauseMs = integer(
    values.get('pause'),
    'pause',
    ttlMs + (lock.kind === 'zookeeper' ? 5_000 : 2_500),
    0,
    120_000,
  );
  const seed = integer(values.get('seed'), 'seed', 1, 0, 2 ** 32 - 1);
  const pauseText = values.get('pause-worker');
  let pauseWorker: number | null;
  if (pauseText === undefined) pauseWorker = seededPauseWorker(seed, workers);
  else if (pauseText === 'none') pauseWorker = null;
  else pauseWorker = integer(pauseText, 'pause-worker', 1, 1, workers);
  const port = integer(values.get('port'), 'port', DEFAULT_PORT, 0, 65_535);
  const lingerS = integer(values.get('linger'), 'linger', 20, 0, 3_600);

  return {
    lock,
    db,
    settings: { workers, iterations, ttlMs, pauseMs, seed, pauseWorker, initialBalance: INITIAL_BALANCE },
    port,
    portGiven: values.has('port'),
    once: switches.has('once'),
    lingerS,
    browserHint: !switches.has('no-browser-hint'),
    help: switches.has('help'),
  };
}

function integer(text: string | undefined, flag: string, fallback: number, min: number, max: number): number {
  if (text === undefined) return fallback;
  const value = /^\d+$/.test(text.trim()) ? Number(text.trim()) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new UsageError(`--${flag} must be an integer from ${min} to ${max}, got "${text}"`);
  }
  return value;
}
