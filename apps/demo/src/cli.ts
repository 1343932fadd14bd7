#!/usr/bin/env node
/**
 * `dlock-demo`: runs the paused-holder scenario with and without the fencing gate, shows it live in the terminal
 * and on a dashboard at 127.0.0.1, then prints a table comparing the two runs. See --help.
 */
import { HELP, parseArgs } from './args.js';
import { describeDb, describeLock } from './backends.js';
import { Dashboard } from './dashboard.js';
import { Demo, type Results } from './demo.js';
import { BackendError, oneLine, UsageError } from './errors.js';
import { TerminalView } from './terminal.js';

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(HELP);
    return 0;
  }
  const options = parseArgs(argv);
  const view = new TerminalView();
  const s = view.style;
  view.line(s.bold('dlock demo — a frozen lock holder wakes up and writes. Does the write land?'));

  // The port first: a taken port is a usage error, found before the database takes seconds to start.
  const dashboard = await Dashboard.start(options.port, !options.portGiven).catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw new UsageError(`--port ${options.port} is in use on 127.0.0.1 (try --port 0)`);
    }
    throw error;
  });
  let demo: Demo | undefined;
  try {
    demo = await Demo.open(options.lock, options.db, options.settings);
    dashboard.attach(demo);
    view.line(s.dim(`lock: ${describeLock(options.lock)} · database: ${describeDb(options.db)}`));
    view.line(
      `dashboard: ${s.cyan(dashboard.url)}${options.browserHint ? s.dim('  ← open it in a browser to watch the timeline') : ''}`,
    );
    let last: Results | undefined;
    let failure: string | undefined;
    demo.subscribe((update) => {
      view.update(update);
      if (update.type === 'scenario-end') last = update.results;
      if (update.type === 'scenario-failed') failure = update.message;
    });
    // Scenarios started from the dashboard report their failure here; the listener above records it.
    dashboard.onRun = (run) => {
      run.catch((error: unknown) => view.line(s.red(`error: ${oneLine(error)}`)));
    };
    stopOnSignal(demo, dashboard);

    try {
      last = await demo.run();
    } catch (error) {
      process.stderr.write(`error: the scenario failed: ${oneLine(error)}\n`);
      return 1;
    }
    if (!options.once) {
      await linger(demo, dashboard, options.lingerS, view);
      if (failure !== undefined && !demo.running) view.line(s.dim(`(the last rerun failed: ${failure})`));
    }
    return last.fenced.finalBalance === last.fenced.expectedBalance ? 0 : 1;
  } finally {
    await dashboard.close();
    await demo?.close();
  }
}

/**
 * Keeps the dashboard up after the run while anyone is looking at it (or a rerun is going), and for `seconds`
 * after that, so a browser opened late still finds the whole timeline. Nobody looking: done after `seconds`.
 */
function linger(demo: Demo, dashboard: Dashboard, seconds: number, view: TerminalView): Promise<void> {
  if (seconds === 0) return Promise.resolve();
  view.line(
    view.style.dim(
      `The dashboard stays up while a browser shows it, and ${seconds} s after (Ctrl-C quits): ${dashboard.url}`,
    ),
  );
  return new Promise((resolve) => {
    let idleSince = Date.now();
    const timer = setInterval(() => {
      if (demo.running || dashboard.viewers > 0) idleSince = Date.now();
      else if (Date.now() - idleSince >= seconds * 1000) {
        clearInterval(timer);
        resolve();
      }
    }, 250);
  });
}

function stopOnSignal(demo: Demo, dashboard: Dashboard): void {
  let stopping = false;
  const stop = (): void => {
    if (stopping) process.exit(130);
    stopping = true;
    process.stderr.write('\nstopping…\n');
    const forced = setTimeout(() => process.exit(130), 3_000);
    forced.unref();
    Promise.allSettled([dashboard.close(), demo.close()]).then(() => process.exit(130));
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // Worker threads and drivers may hold handles for a moment; the answer is already known.
    setTimeout(() => process.exit(code), 200).unref();
  },
  (error: unknown) => {
    if (error instanceof UsageError || error instanceof BackendError) {
      process.stderr.write(`error: ${error.message}\n`);
      if (error instanceof UsageError) process.stderr.write('(see --help)\n');
      process.exitCode = error.exitCode;
    } else {
      process.stderr.write(`error: ${oneLine(error)}\n`);
      process.exitCode = 1;
    }
    setTimeout(() => process.exit(), 200).unref();
  },
);
