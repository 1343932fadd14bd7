import { request } from 'node:http';
import { createServer, type Server } from 'node:net';
import { freePort } from '@dlock/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseArgs } from '../dist/args.js';
import { UsageError } from '../dist/errors.js';
import { runCli, startCli, stopCli } from './run-cli.js';

/** A one-line error on stderr, no stack trace, nothing on stdout beyond the banner. */
function expectOneLineError(stderr: string, pattern: RegExp): void {
  const lines = stderr.trim().split('\n');
  expect(lines[0]).toMatch(/^error: /);
  expect(lines[0]).toMatch(pattern);
  expect(stderr).not.toMatch(/^\s+at /m);
  expect(lines.length).toBeLessThanOrEqual(2);
}

describe('command line', () => {
  it('--help prints the usage and exits 0', async () => {
    const run = await runCli(['--help']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: dlock-demo/);
    for (const flag of [
      '--lock',
      '--db',
      '--workers',
      '--ttl',
      '--pause',
      '--iterations',
      '--seed',
      '--port',
      '--once',
    ]) {
      expect(run.stdout).toContain(flag);
    }
  });

  // Spawned: the whole path from argv to exit status and stderr.
  const spawned: [string[], RegExp][] = [
    [['--workers', '1'], /--workers must be an integer from 2 to 12, got "1"/],
    [['--lock', 'foo://x'], /--lock: unsupported scheme "foo:"/],
    [['--db', 'mysql://root@127.0.0.1/test'], /--db: unsupported scheme "mysql:"/],
  ];
  it.each(spawned)('usage error %j exits 2 with one line', async (args, pattern) => {
    const run = await runCli([...args, '--once']);
    expect(run.code).toBe(2);
    expectOneLineError(run.stderr, pattern);
    expect(run.ms).toBeLessThan(10_000);
  });

  // In-process: the same parser, every rule.
  const usage: [string[], RegExp][] = [
    [['--workers=abc'], /--workers must be an integer/],
    [['--ttl', '-5'], /--ttl must be an integer from 10 to 60000, got "-5"/],
    [['--pause'], /--pause needs a value/],
    [['--pause', '--once'], /--pause needs a value/],
    [['--seed', '1.5'], /--seed must be an integer/],
    [['--pause-worker', '9'], /--pause-worker must be an integer from 1 to 4/],
    [['--bogus'], /unknown option --bogus/],
    [['stray'], /unexpected argument "stray"/],
    [['--once=yes'], /--once takes no value/],
    [['--workers', '3', '--workers', '4'], /--workers given twice/],
    [['--lock', 'localhost:6379'], /--lock: "localhost:6379" is not a URL/],
    [['--lock', 'redis://'], /--lock: "redis:\/\/" has no host/],
    [['--lock', 'redis://127.0.0.1:6379/x'], /--lock: a redis URL's path must be a database number/],
    [['--lock', 'etcd://127.0.0.1:99999'], /--lock: bad port "99999"/],
    [['--lock', 'etcd://'], /--lock: "etcd:\/\/" has no host/],
    [['--lock', 'zk://127.0.0.1:2181/bad path'], /--lock: bad ZooKeeper chroot/],
    [['--lock', 'postgres://'], /--lock: "postgres:\/\/" has no host/],
    [
      ['--lock', 'etcd://127.0.0.1:2379', '--ttl', '500'],
      /--ttl must be at least 2000 ms with the etcd backend/,
    ],
    [
      ['--lock', 'zk://127.0.0.1:2181', '--ttl', '2000'],
      /--ttl must be at least 4000 ms with the zookeeper backend/,
    ],
    [['--db', 'postgres://'], /--db: "postgres:\/\/" has no host/],
    [['--db', 'postgres://h:0/x'], /--db: bad port/],
    [['--port', '70000'], /--port must be an integer from 0 to 65535/],
    [['--linger', 'x'], /--linger must be an integer/],
  ];
  it.each(usage)('parseArgs(%j) is a usage error', (args, pattern) => {
    let error: unknown;
    try {
      parseArgs(args, {});
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(UsageError);
    expect((error as UsageError).exitCode).toBe(2);
    expect((error as Error).message).toMatch(pattern);
  });

  it('parses the backends, the defaults and the environment', () => {
    const defaults = parseArgs([], {});
    expect(defaults.lock).toEqual({ kind: 'memory' });
    expect(defaults.db).toEqual({ kind: 'pglite' });
    expect(defaults.settings).toMatchObject({
      workers: 4,
      iterations: 4,
      ttlMs: 1_000,
      pauseMs: 3_500,
      seed: 1,
    });
    expect(defaults.port).toBe(8765);
    expect(defaults.portGiven).toBe(false);
    const env = parseArgs([], { DLOCK_DEMO_LOCK: 'zk://a:1,b/dlock', DLOCK_DEMO_DB: 'postgresql://u@h/db' });
    expect(env.lock).toEqual({ kind: 'zookeeper', connectionString: 'a:1,b:2181/dlock' });
    expect(env.db).toEqual({ kind: 'postgres', url: 'postgresql://u@h/db' });
    expect(env.settings.ttlMs).toBe(4_000);
    expect(env.settings.pauseMs).toBe(9_000);
    const flags = parseArgs(
      ['--lock=etcd://h1,h2:2390', '--workers', '6', '--pause-worker', 'none', '--port', '0', '--once'],
      { DLOCK_DEMO_LOCK: 'redis://ignored' },
    );
    expect(flags.lock).toEqual({ kind: 'etcd', hosts: ['http://h1:2379', 'http://h2:2390'] });
    expect(flags.settings).toMatchObject({ workers: 6, ttlMs: 2_000, pauseWorker: null });
    expect(flags.once).toBe(true);
    expect(flags.portGiven).toBe(true);
    expect(parseArgs(['--lock', 'rediss://:pw@h:6380/2'], {}).lock).toEqual({
      kind: 'redis',
      url: 'rediss://:pw@h:6380/2',
    });
    expect(parseArgs(['--lock', 'postgresql://u:pw@h/db'], {}).lock).toEqual({
      kind: 'postgres',
      url: 'postgresql://u:pw@h/db',
    });
  });

  describe('unreachable backends', () => {
    let closed: number;
    beforeAll(async () => {
      closed = await freePort();
    });

    it('a PostgreSQL port nobody listens on: one line, exit 3, at once', async () => {
      const run = await runCli(['--once', '--db', `postgres://postgres@127.0.0.1:${closed}/test`]);
      expect(run.code).toBe(3);
      expectOneLineError(
        run.stderr,
        new RegExp(`cannot reach PostgreSQL at 127\\.0\\.0\\.1:${closed}.*ECONNREFUSED`),
      );
      expect(run.ms).toBeLessThan(10_000);
    });

    it.each([
      [
        'Redis',
        (p: number) => `redis://127.0.0.1:${p}`,
        (p: number) => `Redis at 127.0.0.1:${p}: connect ECONNREFUSED`,
      ],
      [
        'etcd',
        (p: number) => `etcd://127.0.0.1:${p}`,
        (p: number) => `etcd at http://127.0.0.1:${p}: connect ECONNREFUSED`,
      ],
      // node-zookeeper-client retries a refused connection forever: the demo's own bound ends it.
      [
        'ZooKeeper',
        (p: number) => `zk://127.0.0.1:${p}`,
        (p: number) => `ZooKeeper at 127.0.0.1:${p}: no answer within 4 s`,
      ],
      [
        'PostgreSQL',
        (p: number) => `postgres://postgres@127.0.0.1:${p}/test`,
        (p: number) => `PostgreSQL at 127.0.0.1:${p}/test: connect ECONNREFUSED`,
      ],
    ])('a %s port nobody listens on: one line, exit 3, within seconds', async (_kind, url, message) => {
      const run = await runCli(['--once', '--lock', url(closed)]);
      expect(run.code).toBe(3);
      expectOneLineError(
        run.stderr,
        new RegExp(`--lock: cannot reach ${message(closed).replaceAll('.', '\\.')}`),
      );
      expect(run.ms).toBeLessThan(15_000);
    });

    it('a host name that does not resolve: one line, exit 3', async () => {
      const run = await runCli(['--once', '--lock', 'redis://nosuchhost.invalid:6379']);
      expect(run.code).toBe(3);
      expectOneLineError(run.stderr, /cannot reach Redis at nosuchhost\.invalid:6379: getaddrinfo ENOTFOUND/);
    });
  });

  describe('a dashboard port already taken', () => {
    let server: Server;
    let port: number;
    beforeAll(async () => {
      port = await freePort();
      server = createServer();
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    });
    afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

    it('given with --port: a usage error', async () => {
      const run = await runCli(['--once', '--port', String(port)]);
      expect(run.code).toBe(2);
      expectOneLineError(run.stderr, new RegExp(`--port ${port} is in use`));
    });
  });

  it('--once runs both runs, prints the comparison and exits 0 because the fenced balance is exact', async () => {
    const run = await runCli(['--once', '--port', '0', '--no-browser-hint']);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe('');
    const out = run.stdout;
    expect(out).toMatch(/dashboard: http:\/\/127\.0\.0\.1:\d+\//);
    expect(out).not.toContain('open it in a browser');
    expect(out).toMatch(/worker 2 FROZEN for 3,500 ms while holding token \d+/);
    expect(out).toMatch(/takes over with token \d+: worker 2's lease \(token \d+\) ran out/);
    expect(out).toMatch(
      /no fence {2}worker 2 write [\d,]+ → [\d,]+ with token \d+: STALE WRITE LANDED — it erased \d+ deposits?/,
    );
    expect(out).toMatch(
      /fenced {4}worker 2 write [\d,]+ → [\d,]+ with token \d+: REJECTED with StaleFencingTokenError/,
    );
    expect(out).toMatch(/onLost fired: token \d+ lost \(expired\)/);
    expect(out).toMatch(/re-acquired with token \d+ and redid deposit 1/);
    expect(out).toMatch(/✗ without fencing: balance [\d,]+, should be [\d,]+: [\d,]+ short\./);
    expect(out).toMatch(/✓ with @dlock\/fencing-kysely: balance exact/);
    // The table's numbers agree with each other: expected − final = the lost amount.
    const expected = /expected balance\s+([\d,]+)\s+([\d,]+)/.exec(out);
    const final = /final balance\s+([\d,]+)\s+([\d,]+)/.exec(out);
    const lost = /deposits lost\s+\d+ \(−([\d,]+)\)\s+0/.exec(out);
    const n = (s: string | undefined) => Number((s ?? '').replaceAll(',', ''));
    expect(n(expected?.[1]) - n(final?.[1])).toBe(n(lost?.[1]));
    expect(n(final?.[2])).toBe(n(expected?.[2]));
    expect(run.ms).toBeLessThan(30_000);
  });

  it('serves the dashboard on loopback: page, event stream, buttons; refuses other Host headers', async () => {
    const { child, url } = await startCli([
      '--port',
      '0',
      '--linger',
      '1',
      '--pause-worker',
      'none',
      '--iterations',
      '1',
      '--workers',
      '2',
    ]);
    try {
      const page = await fetch(url);
      expect(page.status).toBe(200);
      expect(await page.text()).toContain('dlock demo');
      expect((await fetch(new URL('dashboard.js', url))).status).toBe(200);
      expect((await fetch(new URL('nope', url))).status).toBe(404);
      // fetch() may not set Host; a DNS-rebinding page would arrive with its own host name.
      const foreign = await new Promise<number | undefined>((resolve, reject) => {
        request(url, { headers: { host: 'evil.example' } }, (res) => {
          res.resume();
          resolve(res.statusCode);
        })
          .on('error', reject)
          .end();
      });
      expect(foreign).toBe(403);
      expect((await fetch(new URL('api/pause?worker=9', url), { method: 'POST' })).status).toBe(400);

      // The stream replays the scenario from its start, then runs live.
      const controller = new AbortController();
      const stream = await fetch(new URL('events', url), { signal: controller.signal });
      expect(stream.headers.get('content-type')).toBe('text/event-stream');
      const reader = stream.body?.getReader();
      let text = '';
      const decoder = new TextDecoder();
      while (reader && !text.includes('"scenario-end"')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value);
      }
      expect(text).toContain('"type":"scenario-start"');
      expect(text).toContain('"type":"acquired"');
      expect(text).toContain('"type":"scenario-end"');
      // Idle now: rerun starts a new scenario; a second one while it runs is refused.
      expect((await fetch(new URL('api/rerun', url), { method: 'POST' })).status).toBe(202);
      expect((await fetch(new URL('api/rerun', url), { method: 'POST' })).status).toBe(409);
      controller.abort();
    } finally {
      await stopCli(child);
    }
  });
});
