import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

interface Report {
  readonly testResults: readonly {
    readonly assertionResults: readonly {
      readonly ancestorTitles: readonly string[];
      readonly title: string;
      readonly status: string;
    }[];
  }[];
}

/**
 * The contract must fail a service that breaks one of its promises; an assertion that cannot fail would let it
 * through. `liars/liars.contract.ts` runs the lock contract (on a FakeClock) against three services that each lie
 * once; this runs it in a vitest of its own and checks which cases failed.
 */
it('the lock contract fails each lying service in the case for the promise it breaks, and only there', () => {
  const here = dirname(fileURLToPath(import.meta.url));
  const vitest = join(dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');
  const out = mkdtempSync(join(tmpdir(), 'dlock-liars-'));
  try {
    const report = join(out, 'report.json');
    const run = spawnSync(
      process.execPath,
      [vitest, 'run', '--root', join(here, 'liars'), '--reporter=json', `--outputFile=${report}`],
      { encoding: 'utf8', timeout: 120_000 },
    );
    expect(run.status, run.stderr).toBe(1); // failures are what it is for
    const results = (JSON.parse(readFileSync(report, 'utf8')) as Report).testResults.flatMap(
      (file) => file.assertionResults,
    );
    const failed = results
      .filter((r) => r.status === 'failed')
      .map((r) => `${r.ancestorTitles.at(-1)?.replace('LockService contract: ', '')} / ${r.title}`)
      .sort();
    expect(failed).toEqual([
      'early-expiry / keeps an unrenewed lease from every other owner for the TTL it granted',
      'renew-ignores-ttl / renews for the TTL asked, or answers with the TTL it kept',
      'watch-on-subscribe-only / delivers a release notice to watchers, and none after unsubscribing',
      'watch-on-subscribe-only / hands a released lock to a waiting LockClient without waiting out the backoff',
      'watch-on-subscribe-only / isolates a watch or watchChanges callback that throws or rejects; the others still hear',
    ]);
    expect(results.filter((r) => r.status === 'passed').length).toBeGreaterThan(40);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}, 150_000);
