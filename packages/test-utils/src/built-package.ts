import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** How a child Node process ended: its exit code (null when killed, e.g. at the timeout), output and wall time. */
export interface ChildRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly ms: number;
}

export interface RunBuiltPackageOptions {
  /** Killed (code null) after this long; default 10 s. */
  readonly timeoutMs?: number;
  /** Added to this process's environment, e.g. a server address the script reads from `process.env`. */
  readonly env?: Readonly<Record<string, string>>;
}

/**
 * Runs an ES module script in a fresh Node process whose working directory is `packageDir`, so a bare import of
 * the package resolves through its own exports map to the BUILT dist, as users get it, and nothing of the test
 * runner (its module graph, its timers) keeps the child alive: a stray timer or socket shows as a late exit.
 * Never rejects; a script that throws or times out shows in `code` and `stderr`.
 */
export function runBuiltPackage(
  packageDir: string | URL,
  script: string,
  { timeoutMs = 10_000, env = {} }: RunBuiltPackageOptions = {},
): Promise<ChildRun> {
  const cwd = typeof packageDir === 'string' ? packageDir : fileURLToPath(packageDir);
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--input-type=module', '-e', script],
      { cwd, timeout: timeoutMs, env: { ...process.env, ...env } },
      (error, stdout, stderr) => {
        resolve({
          code: error ? (typeof error.code === 'number' ? error.code : null) : 0,
          stdout,
          stderr,
          ms: Date.now() - started,
        });
      },
    );
  });
}
