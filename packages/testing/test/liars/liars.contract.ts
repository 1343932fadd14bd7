import { type LockService, MemoryLockService } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { lockServiceContract } from '@dlock/testing/contract';

/**
 * Services that lie in one way each, run through the contract by `contract-catches-liars.test.ts` (in a vitest of
 * their own: their failures are the point). Each is the in-memory service with one promise broken.
 */
export type Lie = 'early-expiry' | 'renew-ignores-ttl' | 'watch-on-subscribe-only';

function liar(lie: Lie, clock: FakeClock): LockService {
  const inner = new MemoryLockService({ clock });
  const grantedTtl = new Map<string, number>();
  return {
    acquire: async (request) => {
      if (lie !== 'early-expiry') {
        const result = await inner.acquire(request);
        if (result.acquired) grantedTtl.set(result.grant.ownershipToken, result.grant.ttlMs);
        return result;
      }
      // Keeps the lease for half the TTL it reports.
      const result = await inner.acquire({ ...request, ttlMs: Math.ceil(request.ttlMs / 2) });
      return result.acquired ? { acquired: true, grant: { ...result.grant, ttlMs: request.ttlMs } } : result;
    },
    renew: async (request) => {
      if (lie !== 'renew-ignores-ttl') return inner.renew(request);
      // Renews for the TTL first granted, whatever was asked, and does not say so.
      const ttlMs = grantedTtl.get(request.lease.ownershipToken) ?? request.ttlMs;
      const result = await inner.renew({ lease: request.lease, ttlMs });
      return result.renewed ? { renewed: true } : result;
    },
    release: (lease) => inner.release(lease),
    watch: (name, onReleased) => {
      if (lie !== 'watch-on-subscribe-only') return inner.watch(name, onReleased);
      // One notice when the subscription starts (which the interface allows), none on a release. The callback runs
      // guarded, as the inner service's do: this lie is about when notices come, nothing else.
      queueMicrotask(() => {
        try {
          Promise.resolve(onReleased() as unknown).catch(() => {});
        } catch {}
      });
      return () => {};
    },
  };
}

for (const lie of ['early-expiry', 'renew-ignores-ttl', 'watch-on-subscribe-only'] as const) {
  const clock = new FakeClock();
  lockServiceContract(lie, () => ({ service: liar(lie, clock) }), {
    ttlMs: 200,
    sleep: (ms) => clock.advance(ms),
    clock,
    // Each lie is the in-memory service's, which leaves input checks to LockClient.
    checksInput: false,
  });
}
