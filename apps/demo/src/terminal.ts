import type { DemoUpdate, Results } from './demo.js';
import {
  depositLabel,
  RUN_KINDS,
  RUN_TITLES,
  type RunKind,
  type RunResult,
  type ScenarioInfo,
  type TimelineEvent,
} from './timeline.js';

interface Style {
  bold(s: string): string;
  dim(s: string): string;
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  cyan(s: string): string;
}

const plain: Style = { bold: id, dim: id, red: id, green: id, yellow: id, cyan: id };
function id(s: string): string {
  return s;
}
const ansi = (code: number) => (s: string) => `\x1b[${code}m${s}\x1b[0m`;
const colored: Style = {
  bold: ansi(1),
  dim: ansi(2),
  red: ansi(31),
  green: ansi(32),
  yellow: ansi(33),
  cyan: ansi(36),
};

const SHORT: Readonly<Record<RunKind, string>> = { unfenced: 'no fence', fenced: 'fenced  ' };

export const fmt = (n: number): string => n.toLocaleString('en-US');
const secs = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;

type WorkerState = 'starting' | 'waiting' | 'holding' | 'frozen' | 'lost' | 'done';

interface RunView {
  readonly workers: { state: WorkerState; token: string; done: number }[];
  accepted: number;
  rejected: number;
  balance: number;
  /** Workers frozen now, with the token they hold: to announce the first takeover during a freeze. */
  readonly frozen: Map<number, string>;
  readonly announcedTakeover: Set<number>;
}

/**
 * The terminal side of the demo: a log of the moments that matter (freeze, takeover, stale write, loss, redo),
 * and on a TTY a status block per run, redrawn in place below the log.
 */
export class TerminalView {
  readonly #out: NodeJS.WriteStream;
  readonly #live: boolean;
  readonly #s: Style;
  #info: ScenarioInfo | undefined;
  #runs: Record<RunKind, RunView> | undefined;
  #statusLines = 0;
  #redrawQueued = false;

  constructor(out: NodeJS.WriteStream = process.stdout) {
    this.#out = out;
    this.#live = out.isTTY === true;
    this.#s = this.#live && !process.env['NO_COLOR'] ? colored : plain;
  }

  get style(): Style {
    return this.#s;
  }

  /** Prints a line above the status block. */
  line(text = ''): void {
    this.#clearStatus();
    this.#out.write(`${text}\n`);
    this.#drawStatus();
  }

  update(update: DemoUpdate): void {
    switch (update.type) {
      case 'scenario-start':
        this.#start(update.info);
        return;
      case 'event':
        this.#event(update.event);
        return;
      case 'pause-requested':
        this.line(
          `${this.#time(update.t)}  ${this.#s.yellow('dashboard')}  pause requested: worker ${update.worker} freezes the next time it holds the lock`,
        );
        return;
      case 'scenario-end':
        this.#clearStatus();
        this.#runs = undefined;
        this.#out.write(`\n${formatResults(update.results, this.#info, this.#s)}\n`);
        return;
      case 'scenario-failed':
        this.#clearStatus();
        this.#runs = undefined;
        return;
    }
  }

  #start(info: ScenarioInfo): void {
    this.#info = info;
    const make = (): RunView => ({
      workers: Array.from({ length: info.workers }, () => ({
        state: 'starting' as WorkerState,
        token: '',
        done: 0,
      })),
      accepted: 0,
      rejected: 0,
      balance: info.initialBalance,
      frozen: new Map(),
      announcedTakeover: new Set(),
    });
    this.#runs = { unfenced: make(), fenced: make() };
    const who =
      info.pauseWorker === null
        ? 'no automatic pause (use the dashboard)'
        : `worker ${info.pauseWorker} is frozen for ${fmt(info.pauseMs)} ms during its first deposit`;
    this.line(
      this.#s.dim(
        `${info.workers} workers × ${info.iterations} deposits · TTL ${fmt(info.ttlMs)} ms · ${who} · seed ${info.seed}`,
      ),
    );
  }

  #event(e: TimelineEvent): void {
    const run = this.#runs?.[e.run];
    if (!run) return;
    const w = run.workers[e.worker - 1];
    if (!w) return;
    const s = this.#s;
    const tag = `${this.#time(e.t)}  ${e.run === 'fenced' ? s.green(SHORT.fenced) : s.red(SHORT.unfenced)}  worker ${e.worker}`;
    switch (e.type) {
      case 'waiting':
        w.state = 'waiting';
        break;
      case 'acquired':
        w.state = 'holding';
        w.token = e.token;
        for (const [frozenWorker, frozenToken] of run.frozen) {
          if (frozenWorker !== e.worker && !run.announcedTakeover.has(frozenWorker)) {
            run.announcedTakeover.add(frozenWorker);
            this.line(
              `${tag} takes over with token ${s.bold(e.token)}: worker ${frozenWorker}'s lease (token ${frozenToken}) ran out while it was frozen`,
            );
          }
        }
        break;
      case 'pause-start':
        w.state = 'frozen';
        run.frozen.set(e.worker, e.token);
        this.line(
          `${tag} ${s.yellow('FROZEN')} for ${fmt(e.ms)} ms while holding token ${s.bold(e.token)} (stop-the-world: its event loop and renewals stop)`,
        );
        break;
      case 'pause-end':
        w.state = 'holding';
        run.frozen.delete(e.worker);
        this.line(
          `${tag} wakes up after ${fmt(Math.round(e.ms))} ms, still believing it holds token ${e.token}, and writes at once`,
        );
        break;
      case 'lost':
        w.state = 'lost';
        this.line(`${tag} onLost fired: token ${e.token} lost (${e.reason})`);
        break;
      case 'released':
        if (w.state !== 'lost') w.state = 'waiting';
        break;
      case 'read':
        if (!e.accepted) {
          run.rejected += 1;
          this.line(
            `${tag} read with token ${e.token} ${s.red('REJECTED')}: high-water mark is ${e.highWaterMark}`,
          );
        }
        break;
      case 'write': {
        // Stamped when the worker sent it: that it left before the client noticed the loss is the point.
        const sent = `${this.#time(e.sentAt)}  ${e.run === 'fenced' ? s.green(SHORT.fenced) : s.red(SHORT.unfenced)}  worker ${e.worker}`;
        if (e.accepted) {
          run.accepted += 1;
          run.balance = e.to;
        } else run.rejected += 1;
        if (!e.accepted) {
          this.line(
            `${sent} write ${fmt(e.from)} → ${fmt(e.to)} with token ${e.token}: ${s.green('REJECTED')} with StaleFencingTokenError (high-water mark ${e.highWaterMark})`,
          );
        } else if (e.stale || e.erased.length > 0) {
          const lost = e.erased.reduce((sum, d) => sum + d.amount, 0);
          const what =
            e.erased.length > 0
              ? `it erased ${e.erased.length} deposit${e.erased.length === 1 ? '' : 's'} (−${fmt(lost)})`
              : 'nothing to erase yet';
          this.line(
            `${sent} write ${fmt(e.from)} → ${fmt(e.to)} with token ${e.token}: ${s.red(e.stale ? 'STALE WRITE LANDED' : 'OVERWROTE')} — ${what}`,
          );
        }
        break;
      }
      case 'deposited':
        w.done += 1;
        if (e.tries > 1) {
          this.line(
            `${tag} re-acquired with token ${w.token} and redid deposit ${e.iteration} (+${e.amount}): accepted`,
          );
        }
        break;
      case 'worker-done':
        w.state = 'done';
        break;
      default:
        break;
    }
    this.#queueRedraw();
  }

  #time(t: number): string {
    return this.#s.dim(secs(t).padStart(8));
  }

  #queueRedraw(): void {
    if (!this.#live || this.#redrawQueued) return;
    this.#redrawQueued = true;
    setTimeout(() => {
      this.#redrawQueued = false;
      this.#clearStatus();
      this.#drawStatus();
    }, 50).unref();
  }

  #clearStatus(): void {
    if (!this.#live || this.#statusLines === 0) return;
    this.#out.write(`\x1b[${this.#statusLines}A\x1b[0J`);
    this.#statusLines = 0;
  }

  #drawStatus(): void {
    if (!this.#live || !this.#runs) return;
    const s = this.#s;
    // A line wider than the terminal wraps, and the redraw (cursor up by the line count) would then miss rows.
    const width = Math.max(40, (this.#out.columns ?? 100) - 1);
    const lines: string[] = [];
    for (const kind of RUN_KINDS) {
      const run = this.#runs[kind];
      const cells = run.workers.map((w, i) => {
        const label = {
          starting: s.dim('start'),
          waiting: s.dim('wait'),
          holding: s.cyan(`hold #${w.token}`),
          frozen: s.yellow(`FROZEN #${w.token}`),
          lost: s.red(`lost #${w.token}`),
          done: s.green('done'),
        }[w.state];
        return `w${i + 1} ${label} ${s.dim(`${w.done}/${this.#info?.iterations ?? 0}`)}`;
      });
      const title = kind === 'fenced' ? s.green(RUN_TITLES[kind]) : s.red(RUN_TITLES[kind]);
      lines.push(...pack(`  ${title}:`, cells, width));
      lines.push(
        s.dim(
          `      writes ${run.accepted} accepted, ${run.rejected} rejected · balance ${fmt(run.balance)}`,
        ),
      );
    }
    this.#out.write(`${lines.join('\n')}\n`);
    this.#statusLines = lines.length;
  }
}

const ESC = String.fromCharCode(27);
/** Printed width of a string with color codes in it. */
const visible = (text: string): number =>
  text
    .split(ESC)
    .reduce((n, part, i) => n + (i === 0 ? part.length : part.replace(/^\[[0-9;]*m/, '').length), 0);

/** Puts `cells` after `head`, two spaces apart, on as many lines of at most `width` visible characters as needed. */
function pack(head: string, cells: readonly string[], width: number): string[] {
  const lines: string[] = [];
  let line = head;
  for (const cell of cells) {
    if (visible(line) + 2 + visible(cell) > width && visible(line) > 6) {
      lines.push(line);
      line = '     ';
    }
    line += `  ${cell}`;
  }
  lines.push(line);
  return lines;
}

/** The table comparing both runs, and one sentence per run saying what happened. */
export function formatResults(results: Results, info: ScenarioInfo | undefined, s: Style = plain): string {
  const u = results.unfenced;
  const f = results.fenced;
  const rows: [string, string, string][] = [
    ['', RUN_TITLES.unfenced, RUN_TITLES.fenced],
    ['expected balance', fmt(u.expectedBalance), fmt(f.expectedBalance)],
    ['final balance', fmt(u.finalBalance), fmt(f.finalBalance)],
    ['deposits lost', lostCell(u), lostCell(f)],
    ['stale writes that landed', String(u.staleWritesLanded), String(f.staleWritesLanded)],
    [
      'writes rejected (stale token)',
      String(u.writesRejected + u.readsRejected),
      String(f.writesRejected + f.readsRejected),
    ],
    ['writes accepted', String(u.writesAccepted), String(f.writesAccepted)],
    ['onLost fired', String(u.lostEvents), String(f.lostEvents)],
    ['deposits redone', String(u.redone), String(f.redone)],
    ['highest token / mark', `${u.highestToken} / no gate`, `${f.highestToken} / ${f.highWaterMark ?? '-'}`],
  ];
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  const out = rows.map(([a, b, c], i) => {
    const line = `  ${a.padEnd(w0)}   ${b.padEnd(w1)}   ${c}`;
    return i === 0 ? s.bold(line) : line;
  });
  const verdict = (r: RunResult): string =>
    r.finalBalance === r.expectedBalance
      ? s.green(`✓ ${RUN_TITLES[r.run]}: balance exact (${fmt(r.finalBalance)}).`)
      : s.red(
          `✗ ${RUN_TITLES[r.run]}: balance ${fmt(r.finalBalance)}, should be ${fmt(r.expectedBalance)}: ${fmt(r.lostAmount)} short.`,
        );
  const header = info
    ? s.bold(
        `Result — ${info.workers} workers × ${info.iterations} deposits, TTL ${fmt(info.ttlMs)} ms, pause ${fmt(info.pauseMs)} ms, seed ${info.seed}`,
      )
    : s.bold('Result');
  return [header, ...out, '', `${verdict(u)} ${story(u)}`, `${verdict(f)} ${story(f)}`, ''].join('\n');
}

function lostCell(r: RunResult): string {
  if (r.lostDeposits.length === 0) return '0';
  return `${r.lostDeposits.length} (−${fmt(r.lostAmount)})`;
}

/** One sentence on what the pause did in this run. */
function story(r: RunResult): string {
  const pause = r.pauses.find((p) => p.overlappedTakeover) ?? r.pauses[0];
  if (!pause) return 'No worker was frozen.';
  if (!pause.overlappedTakeover) {
    return `Worker ${pause.worker} was frozen, but nobody else touched the account meanwhile: nothing to lose.`;
  }
  const others = pause.takeoverTokens.length;
  const intro = `Worker ${pause.worker} froze holding token ${pause.token}; meanwhile the others were granted the lock ${others} time${others === 1 ? '' : 's'}.`;
  if (r.run === 'unfenced') {
    const lost = r.lostDeposits.map(depositLabel).slice(0, 6).join(', ');
    const more = r.lostDeposits.length > 6 ? ', …' : '';
    return `${intro} Its stale write landed; lost: ${lost}${more}.`;
  }
  return `${intro} The gate rejected its write; it saw onLost, took the lock again and redid its deposit.`;
}
