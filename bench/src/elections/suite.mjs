/**
 * One backend's elections run (issue 14): failover after a leader's crash and after a resign, and how soon an
 * observer in another client sees it, for @dlock's election beside a hand-rolled campaign loop over a plain lock
 * on the same service (and etcd3's Election on etcd). Prints the tables and writes them into bench/README.md
 * between `<!-- bench:elections-<backend>:start -->` and its end marker.
 *
 *   await runElectionSuite('redis');   // from src/elections/<backend>.mjs, run by ../run.mjs in its own process
 *
 * Flags as for the lock suites (../lib/suite.mjs): --quick, --no-readme, --readme, --provisional, --json=FILE.
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
  subjectsTable,
  summarize,
  updateReadme,
  withTimeout,
} from '../lib/index.mjs';
import { BACKENDS } from './backends.mjs';
import { crashRounds, resignRounds } from './rounds.mjs';

/** Every subject on every backend: etcd grants no lease shorter than 2 s with its default settings. */
export const TTL_MS = 2000;

const SIZES = {
  full: { crash: { redis: 12, etcd: 10, zookeeper: 7 }, resign: 15 },
  quick: { crash: { redis: 2, etcd: 2, zookeeper: 2 }, resign: 3 },
};

const CAP_MS = 6 * 60_000;

/** A latency in ms beside its ratio to the baseline's, with as many decimals as its size deserves. */
function cell(value, base) {
  if (typeof value !== 'number' || Number.isNaN(value)) return '—';
  const digits = value < 10 ? 2 : value < 100 ? 1 : 0;
  const r = ratio(value, base);
  // Two significant figures below 0.1, where two decimals would print most ratios here as 0.00.
  const shown = r < 0.1 ? String(Number(r.toPrecision(2))) : fmt(r, r < 10 ? 2 : 0);
  const times = Number.isNaN(r) ? '' : ` (${shown}×)`;
  return `${fmt(value, digits)} ms${times}`;
}

function problems(t) {
  if (!t.failures) return 'ok';
  return `${t.failures} rounds failed; first: ${t.firstError.replace(/\s+/g, ' ').slice(0, 80)}`;
}

/** Rows of p50 and p99 for the given sample kinds, each beside the baseline's. */
function latencyTable(subjects, results, kinds) {
  const stats = new Map(
    subjects.map((s) => [
      s.key,
      Object.fromEntries(kinds.map(([kind]) => [kind, summarize(results.get(s.key).samples[kind] ?? [])])),
    ]),
  );
  const base = stats.get(subjects.find((s) => s.baseline)?.key) ?? {};
  return markdownTable(
    ['Subject', 'rounds', ...kinds.flatMap(([, label]) => [`${label} p50`, `${label} p99`]), 'notes'],
    subjects.map((s) => {
      const own = stats.get(s.key);
      const first = own[kinds[0][0]];
      return [
        s.baseline ? `${s.name} (baseline)` : s.name,
        fmt(first.count),
        ...kinds.flatMap(([kind]) =>
          own[kind].count
            ? [cell(own[kind].p50, base[kind]?.p50), cell(own[kind].p99, base[kind]?.p99)]
            : ['—', '—'],
        ),
        problems(results.get(s.key)),
      ];
    }),
  );
}

export async function runElectionSuite(backend) {
  const started = now();
  const flags = parseFlags(process.argv.slice(2));
  const section = `elections-${backend}`;
  const log = (msg) => process.stderr.write(`[${section}] ${msg}\n`);
  const hardCap = setTimeout(() => {
    log(`hard cap of ${CAP_MS / 1000} s reached: exiting`);
    process.exit(3);
  }, CAP_MS);
  hardCap.unref();

  const { title, server: describeServer, wiring, subjects: makeSubjects } = BACKENDS[backend];
  const machine = machineInfo();
  const server = await describeServer();
  const subjects = makeSubjects(TTL_MS);
  const sizes = flags.quick ? SIZES.quick : SIZES.full;

  // Three application instances per subject in this process: a leader (resign rounds), a standby, an observer.
  const roles = { leaders: new Map(), standbys: new Map(), observers: new Map() };
  const opened = [];
  for (const subject of subjects) {
    for (const role of Object.values(roles)) {
      const instance = await withTimeout(subject.open(), 20_000, `${subject.name} setup`);
      opened.push(instance);
      role.set(subject.key, instance);
    }
  }

  const crashStarted = now();
  log(`crash: ${sizes.crash[backend]} rounds`);
  const crash = await crashRounds({
    backend,
    subjects,
    standbys: roles.standbys,
    observers: roles.observers,
    rounds: sizes.crash[backend],
    ttlMs: TTL_MS,
    log,
  });
  const crashSeconds = (now() - crashStarted) / 1000;

  const resignStarted = now();
  log(`resign: ${sizes.resign} rounds`);
  const retryMs = subjects.find((s) => s.baseline)?.retryMs ?? TTL_MS / 4;
  const resign = await resignRounds({ subjects, ...roles, rounds: sizes.resign, log });
  const resignSeconds = (now() - resignStarted) / 1000;

  for (const instance of opened) {
    await withTimeout(instance.close(), 10_000, 'close').catch((e) => log(String(e)));
  }
  const totalSeconds = (now() - started) / 1000;

  const caveats = [];
  if (flags.provisional) caveats.push('**Provisional**: taken while other work was running on the machine.');
  if (flags.quick) caveats.push('**Quick run** (reduced sizes): not comparable with full runs.');
  if (machine.loadavg[0] > machine.cpus / 2) {
    caveats.push(`Load average was ${machine.loadavg[0]} on ${machine.cpus} CPUs at start: expect noise.`);
  }
  const granted = [...crash.grantedTtl.values()];
  const grantedNote =
    granted.length && Math.max(...granted) > TTL_MS
      ? ` The server granted the hand-rolled loop's lock ${fmt(Math.max(...granted))} ms, not ${fmt(TTL_MS)}: ` +
        (backend === 'zookeeper'
          ? 'ZooKeeper clamps the session timeout to at least 2 × its tickTime (so its tickTime is half that), ' +
            'a leader (or a lock) there lives as long as its session, and the server expires sessions in rounds ' +
            'of one tickTime, so a dead leader is dropped between one session timeout and a timeout plus a ' +
            'tickTime after the server last heard from it: the crash figures on this server are set by that ' +
            'session timeout, whatever the TTL.'
          : 'the crash figures follow that lease.')
      : '';

  const markdown = [
    `### Elections on ${title}: ${machine.date.slice(0, 10)}`,
    caveats.join(' '),
    `Machine: ${describeMachine(machine, [`${server.name} ${server.version} at ${server.address}`])}.`,
    subjectsTable(subjects),
    `TTL ${fmt(TTL_MS)} ms for every subject. The @dlock rows run on ${wiring()}. Each instance (leader, standby, ` +
      `observer) has connections of its own.${grantedNote}`,
    `#### Crash: the leader's process SIGKILLed, ${sizes.crash[backend]} rounds`,
    latencyTable(subjects, crash.results, [
      ['takeover', 'kill → next leader acts'],
      ['observed', 'kill → observer sees it'],
    ]),
    `#### Resign: the leader steps down, ${sizes.resign} rounds per subject`,
    latencyTable(subjects, resign.results, [
      ['takeover', 'resign → next leader acts'],
      ['observed', 'resign → observer sees it'],
      ['proclaimed', 'proclaim → observer sees it'],
    ]),
    'Ratios in parentheses are to the baseline row of the same run. With this few rounds, p99 is the slowest round.',
    `*Crash*: one leader process per round (forked, connected before the round) leads one election per subject, ` +
      `each on its own connections. Observers in the bench process see that leader first, then the standbys there ` +
      `start campaigning (the hand-rolled standby a random 0–${fmt(retryMs)} ms after its observer, so that their ` +
      `polls are not in step), and 250 ms plus a random 0–${fmt(TTL_MS / 3)} ms (a renewal interval) later the ` +
      `leader process is SIGKILLed: the kill lands anywhere in its renewal cycle, and the lease left runs from ` +
      `about two thirds of the TTL to all of it${backend === 'zookeeper' ? ' (here: of the session timeout)' : ''}. ` +
      `Timed from the kill to the standby's campaign resolving, and to ` +
      `an observer in another client yielding the standby.`,
    `*Resign*: leader, standby and observer are three clients in the bench process, each on its own connections; ` +
      `the leader steps down (\`resign()\`, or \`release()\` for the plain lock) 100 ms after the standby started ` +
      `campaigning. For the hand-rolled loop, which polls, the standby starts a random 0–${fmt(retryMs)} ms after ` +
      `its observer and the leader steps down 100 ms plus a random 0–${fmt(retryMs)} ms after that, so that the ` +
      `change falls anywhere between two polls. *proclaim*: the new leader changes its value, timed to the ` +
      'observer yielding it (a plain lock stores no value, so the hand-rolled row has none).',
    `This run took ${fmt(totalSeconds, 0)} s: ${fmt(crashSeconds, 0)} s of crash rounds, ` +
      `${fmt(resignSeconds, 0)} s of resign rounds.`,
  ]
    .filter(Boolean)
    .join('\n\n');

  process.stdout.write(`\n${markdown}\n\n`);
  if (flags.readme) {
    updateReadme(section, markdown);
    log('results written to bench/README.md');
  }
  if (flags.json) {
    const plain = (m) => Object.fromEntries([...m].map(([k, t]) => [k, t]));
    writeFileSync(
      flags.json,
      JSON.stringify(
        {
          backend,
          machine,
          server,
          ttlMs: TTL_MS,
          crash: plain(crash.results),
          resign: plain(resign.results),
        },
        null,
        2,
      ),
    );
  }
  log(`done in ${fmt(totalSeconds, 1)} s`);
  process.exit(0);
}
