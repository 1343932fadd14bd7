/**
 * One backend's whole run, the same for every backend: set up the subjects, run (A) alternating in rounds, (B) for
 * each worker count, (C), print the tables, write them into bench/README.md, close everything and exit.
 *
 *   await runSuite({
 *     backend: 'redis',                        // README section key and log prefix
 *     title: 'Redis',                          // section heading
 *     server: { name: 'Redis', version: '7.0.15', address: 'redis://127.0.0.1:6379' },
 *     subjects: [raw, dlock, peerA, ...],      // Subject objects (subject.mjs); exactly one with baseline: true
 *     uncontended: { iterations: 3000 },       // options of runUncontended, or false to skip (A)
 *     contended: { workers: [8, 64], holdMs: 2, durationMs: 5000 },   // runContended per worker count, or false
 *     held: { locks: 1000, ttlMs: 3000, durationMs: 10000 },          // runHeld, or false
 *     notes: ['…'],                            // extra lines printed under the tables (a function is called
 *                                              //   with the results once onClose has run)
 *     targets: (results) => '…',               // optional: markdown judging the results against goals, printed
 *                                              //   right under the subjects table
 *     heldLabels: { commands: '…' },           // optional: other headers for (C)'s requests/commands columns
 *                                              //   (and `scenario`, its heading's label instead of '(C)')
 *     mayBeEmpty: true,                        // optional: report (and exit 0) even when no subject could be set up
 *     onClose: async () => {},                 // optional: close shared probes after the subjects
 *   });
 *
 * A subject whose setup throws is left out of the run; the reason is printed at once and kept in the README
 * right under the subjects table.
 *
 * Command-line flags (run.mjs passes them through): --quick (small sizes, no README), --no-readme, --readme,
 * --provisional (marks the figures as taken on a busy machine), --scenarios=A,B,C, --json=FILE, --warmup=N (warm-up
 * cycles per subject before (A), default 200).
 * A hard cap (default 15 min, `capMs`) ends the process if anything hangs; it exits by itself when done.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { describeMachine, machineInfo } from './env.mjs';
import { contendedTable, heldTable, subjectsTable, uncontendedTable, updateReadme } from './report.mjs';
import { runContended, runHeld, runUncontended } from './scenarios.mjs';
import { checkSubject } from './subject.mjs';
import { sleep, withTimeout } from './time.mjs';

const RESULTS = new URL('../../results/', import.meta.url);

export function parseFlags(argv) {
  const flags = {
    quick: false,
    readme: undefined,
    provisional: false,
    scenarios: 'ABC',
    json: undefined,
    warmup: undefined,
  };
  for (const arg of argv) {
    if (arg === '--quick') flags.quick = true;
    else if (arg === '--no-readme') flags.readme = false;
    else if (arg === '--readme') flags.readme = true;
    else if (arg === '--provisional') flags.provisional = true;
    else if (arg.startsWith('--scenarios=')) flags.scenarios = arg.slice(12).toUpperCase();
    else if (arg.startsWith('--json=')) flags.json = arg.slice(7);
    else if (arg.startsWith('--warmup=')) flags.warmup = Number(arg.slice(9));
  }
  flags.readme ??= !flags.quick;
  return flags;
}

const QUICK = {
  uncontended: { iterations: 500, rounds: 5, warmup: 50 },
  contended: { durationMs: 1500 },
  held: { locks: 200, durationMs: 3000 },
};

export async function runSuite(config) {
  const flags = parseFlags(process.argv.slice(2));
  const { backend, title, server, notes = [] } = config;
  const log = (msg) => process.stderr.write(`[${backend}] ${msg}\n`);
  const hardCap = setTimeout(() => {
    log(`hard cap of ${(config.capMs ?? 900_000) / 1000} s reached: exiting`);
    process.exit(3);
  }, config.capMs ?? 900_000);
  hardCap.unref();

  const machine = machineInfo();
  const subjects = [];
  const skipped = [];
  for (const subject of config.subjects) {
    checkSubject(subject);
    try {
      await withTimeout(subject.setup(), 20_000, `${subject.name} setup`);
      subjects.push(subject);
    } catch (error) {
      skipped.push(`${subject.name}: ${error instanceof Error ? error.message : String(error)}`);
      await withTimeout(subject.close(), 5000, `${subject.name} close`).catch(() => {});
    }
  }
  for (const s of skipped) log(`NOT RUN: ${s}`);
  // With `mayBeEmpty` the report is still written, so that the README says why its rows are missing.
  if (subjects.length === 0 && !config.mayBeEmpty) {
    log('no subject could be set up');
    process.exit(1);
  }

  const sections = [];
  const results = { backend, title, machine, server, skipped, uncontended: [], contended: [], held: [] };
  const want = (letter, options) =>
    subjects.length > 0 && options !== false && flags.scenarios.includes(letter);

  if (want('A', config.uncontended)) {
    const o = {
      ...config.uncontended,
      ...(flags.quick ? QUICK.uncontended : {}),
      ...(flags.warmup === undefined ? {} : { warmup: flags.warmup }),
    };
    log(`(A) uncontended: ${o.iterations ?? 3000} iterations per subject`);
    results.uncontended = await runUncontended(subjects, o);
    sections.push(
      `#### (A) Uncontended acquire + release: ${(o.iterations ?? 3000).toLocaleString('en-US')} sequential iterations ` +
        `per subject, subjects alternating in ${o.rounds ?? 10} rounds` +
        `, after ${(o.warmup ?? 200).toLocaleString('en-US')} warm-up iterations each`,
      uncontendedTable(results.uncontended),
    );
  }

  if (want('B', config.contended)) {
    const { workers: counts = [8, 64], ...rest } = config.contended ?? {};
    const o = { holdMs: 2, durationMs: 5000, ...rest, ...(flags.quick ? QUICK.contended : {}) };
    for (const workers of counts) {
      const rows = [];
      for (const subject of subjects) {
        log(`(B) ${workers} workers: ${subject.name}`);
        rows.push(await runContended(subject, { ...o, workers }));
        await sleep(300); // let the previous subject's stragglers and expiries settle
      }
      results.contended.push(...rows);
      sections.push(
        `#### (B) ${workers} workers on one name: acquire → hold ${o.holdMs} ms → release, ${o.durationMs / 1000} s window`,
        contendedTable(rows),
      );
    }
  }

  if (want('C', config.held)) {
    const o = {
      locks: 1000,
      ttlMs: 3000,
      durationMs: 10_000,
      ...config.held,
      ...(flags.quick ? QUICK.held : {}),
    };
    for (const subject of subjects.filter((s) => typeof s.hold === 'function')) {
      log(`(C) ${o.locks} held locks: ${subject.name}`);
      results.held.push(await runHeld(subject, o));
    }
    sections.push(
      `#### ${config.heldLabels?.scenario ?? '(C)'} ${o.locks.toLocaleString('en-US')} locks held with ` +
        `auto-renewal, TTL ${o.ttlMs / 1000} s, ` +
        `measured over ${o.durationMs / 1000} s`,
      heldTable(results.held, config.heldLabels),
    );
  }

  for (const subject of subjects) {
    await withTimeout(subject.close(), 10_000, `${subject.name} close`).catch((e) => log(String(e)));
  }
  if (config.onClose) await withTimeout(config.onClose(), 10_000, 'onClose').catch((e) => log(String(e)));

  const serverLine = `${server.name} ${server.version} at ${server.address}`;
  const caveats = [];
  if (flags.provisional) caveats.push('**Provisional**: taken while other work was running on the machine.');
  if (flags.quick) caveats.push('**Quick run** (reduced sizes): not comparable with full runs.');
  if (machine.loadavg[0] > machine.cpus / 2) {
    caveats.push(`Load average was ${machine.loadavg[0]} on ${machine.cpus} CPUs at start: expect noise.`);
  }
  const markdown = [
    `### ${title}: ${machine.date.slice(0, 10)}`,
    caveats.join(' '),
    `Machine: ${describeMachine(machine, [serverLine])}.`,
    subjectsTable(subjects),
    ...skipped.map((s) => `**Not run**: ${s}.`),
    config.targets ? config.targets(results) : '',
    ...sections,
    subjects.some((s) => s.baseline) ? 'Ratios in parentheses are to the baseline row of the same run.' : '',
    ...notes.map((note) => (typeof note === 'function' ? note(results) : note)),
  ]
    .filter(Boolean)
    .join('\n\n');

  process.stdout.write(`\n${markdown}\n\n`);
  const json = `${JSON.stringify(results, null, 2)}\n`;
  if (flags.readme) {
    updateReadme(backend, markdown);
    // The raw figures beside the tables: the docs site draws its charts from these files (docs/scripts/bench-charts.mjs).
    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(new URL(`${backend}.json`, RESULTS), json);
    log(`results written to bench/README.md and bench/results/${backend}.json`);
  }
  if (flags.json) writeFileSync(flags.json, json);
  if (config.exit !== false) process.exit(0);
  return results;
}
