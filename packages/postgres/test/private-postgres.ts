import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, type ServerProcess, startProcess, tempDir } from '@dlock/test-utils';
import pg from 'pg';

/**
 * A PostgreSQL server of the test's own (initdb in a temporary directory, a free port, fsync off), so a test may
 * pause, crash and restart it: the shared server on 5432 is never signalled. Needs the server binaries (Debian's
 * /usr/lib/postgresql/<version>/bin); run as root, the server runs as the `postgres` user, which initdb requires.
 */
export interface PrivatePostgres {
  readonly port: number;
  readonly url: string;
  /** SIGSTOP of the postmaster and every backend: a paused server that keeps its sockets open. */
  pause(): void;
  resume(): void;
  /** Crash (SIGQUIT: immediate shutdown, recovery from WAL at the next start) and start again on the same data. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

function binaries(): string | undefined {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root).sort((a, b) => Number(b) - Number(a));
  for (const version of versions) {
    const bin = join(root, version, 'bin');
    if (existsSync(join(bin, 'initdb')) && existsSync(join(bin, 'postgres'))) return bin;
  }
  return undefined;
}

export const privatePostgresAvailable = binaries() !== undefined;

const asRoot = process.getuid?.() === 0;
/** initdb and postgres refuse to run as root: drop to the postgres user for them. */
function command(program: string, args: readonly string[]): { command: string; args: string[] } {
  return asRoot
    ? {
        command: 'setpriv',
        args: ['--reuid=postgres', '--regid=postgres', '--clear-groups', program, ...args],
      }
    : { command: program, args: [...args] };
}

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 500 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = binaries();
  if (!bin) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
  const dir = tempDir('dlock-pg-private');
  const data = join(dir, 'data');
  if (asRoot) {
    const id = (flag: string): number => Number(execFileSync('id', [flag, 'postgres']).toString().trim());
    const [uid, gid] = [id('-u'), id('-g')];
    chownSync(dir, uid, gid);
  }
  const init = command(join(bin, 'initdb'), [
    '-D',
    data,
    '-A',
    'trust',
    '-U',
    'postgres',
    '--no-sync',
    '-E',
    'UTF8',
  ]);
  execFileSync(init.command, init.args, { stdio: 'ignore' });
  const port = await freePort();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const launch = (): Promise<ServerProcess> => {
    const run = command(join(bin, 'postgres'), [
      '-D',
      data,
      '-p',
      String(port),
      '-k',
      dir,
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'fsync=off',
      '-c',
      'max_connections=60',
    ]);
    return startProcess({ name: `postgres-${port}`, ...run, ready: () => answers(url), timeoutMs: 20_000 });
  };
  let server = await launch();
  const family = (): number[] => {
    try {
      const children = execFileSync('pgrep', ['-P', String(server.pid)])
        .toString()
        .trim()
        .split(/\s+/);
      return children.filter((pid) => pid !== '').map(Number);
    } catch {
      return [];
    }
  };
  const signal = (pids: readonly number[], name: NodeJS.Signals): void => {
    for (const pid of pids) {
      try {
        process.kill(pid, name);
      } catch {
        // gone
      }
    }
  };
  const gone = async (): Promise<void> => {
    for (let i = 0; i < 200 && !server.exited; i++) await new Promise((resolve) => setTimeout(resolve, 25));
    if (!server.exited) await server.kill();
  };
  return {
    port,
    url,
    pause: () => {
      // The postmaster first, so it forks nothing new while its backends are being stopped.
      server.pause();
      signal(family(), 'SIGSTOP');
    },
    resume: () => {
      signal(family(), 'SIGCONT');
      server.resume();
    },
    restart: async () => {
      signal(family(), 'SIGCONT');
      server.resume();
      signal([server.pid], 'SIGQUIT');
      await gone();
      server = await launch();
    },
    stop: async () => {
      signal(family(), 'SIGCONT');
      server.resume();
      signal([server.pid], 'SIGQUIT');
      await gone();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
