import { randomBytes } from 'node:crypto';
import {
  AcquireTimeoutError,
  type Clock,
  type Grant,
  LockClient,
  type LockService,
  MAX_METADATA_BYTES,
  MAX_NAME_BYTES,
  systemClock,
} from '@dlock/core';
import { validUntil } from '@dlock/core/adapter';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

/** What each test of a contract suite runs against; `makeSubject` builds a fresh one per test. */
export interface ContractSubject {
  /** The service under test. */
  readonly service: LockService;
  /** Runs after each test, e.g. to close connections. */
  readonly close?: () => Promise<void> | void;
}

/** A fault the adapter's own tests can cause and undo (a server restart, a dropped connection…). */
export interface ContractFault {
  /** Names the fault in the test's title. */
  readonly name: string;
  /** Causes the fault; runs after a lock was taken and released. */
  inject(subject: ContractSubject): Promise<void>;
  /** Undoes it; the suite then retries acquiring for a while, since the service may still be coming back. */
  recover(subject: ContractSubject): Promise<void>;
}

/** Tunes {@link lockServiceContract} to a service's timing and features. */
export interface LockServiceContractOptions {
  /** TTL used by the suite, in ms. Default 500. A service may grant more (then the suite waits for that). */
  readonly ttlMs?: number;
  /** Extra time after a TTL before a lease must be gone (services expire lazily or on a tick). Default 100. */
  readonly expirySlackMs?: number;
  /** How the suite lets time pass. Default: real time. With a `FakeClock`, pass `(ms) => clock.advance(ms)`. */
  readonly sleep?: (ms: number) => Promise<void>;
  /** The clock given to the `LockClient`s the suite creates. Default `systemClock`. */
  readonly clock?: Clock;
  /** Faults after which fencing tokens must still increase. */
  readonly faults?: readonly ContractFault[];
  /** Per-test timeout for vitest, ms. Default 30_000. */
  readonly testTimeoutMs?: number;
  /**
   * The service queues waiters itself (inside `acquire`, for `waitMs > 0`): the suite then checks that waiters are
   * served in arrival order. Default false: such a service only has to serve them all.
   */
  readonly fifo?: boolean;
  /**
   * Closes the service itself (its `close()`): the suite then checks that later calls reject with
   * `ClientClosedError`. The subject's `close` still runs afterwards.
   */
  readonly closeService?: (subject: ContractSubject) => Promise<void>;
  /**
   * Ends the service's session behind its back (expires a ZooKeeper session, revokes an etcd session lease): the
   * suite then checks that `watchLeases` reports the grants and a LockClient loses them.
   */
  readonly endSession?: (subject: ContractSubject) => Promise<void>;
  /**
   * The service refuses, with `InvalidArgumentError`, the names, owner ids and metadata core's `LockClient` would
   * refuse, when it is called directly. Default true: a service is public API, and an empty name or a lone surrogate
   * (which encoders send as U+FFFD, so two names share one key) reaches it from any caller.
   */
  readonly checksInput?: boolean;
}

/** `LockClient`'s default `driftFactor`: the share of a TTL its window leaves for clock-rate differences. */
const CLIENT_DRIFT_FACTOR = 0.01;

const realSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The behaviour every {@link LockService} must have, as a vitest suite. Adapters run it against their real server:
 *
 * ```ts
 * lockServiceContract('RedisLockService', async () => ({ service: new RedisLockService({ client }) }));
 * ```
 */
export function lockServiceContract(
  label: string,
  makeSubject: () => Promise<ContractSubject> | ContractSubject,
  options: LockServiceContractOptions = {},
): void {
  const ttlMs = options.ttlMs ?? 500;
  const slackMs = options.expirySlackMs ?? 100;
  const sleep = options.sleep ?? realSleep;
  const clock = options.clock ?? systemClock;
  const timeout = options.testTimeoutMs ?? 30_000;

  describe(`LockService contract: ${label}`, () => {
    let subject: ContractSubject;
    let service: LockService;
    let prefix: string;
    const clients: LockClient[] = [];

    const lockName = (suffix = 'lock'): string => `${prefix}:${suffix}`;
    const request = (name: string, ownerId = 'contract-owner', ttl = ttlMs) => ({
      name,
      ownerId,
      ttlMs: ttl,
      waitMs: 0,
      signal: new AbortController().signal,
    });
    const grab = async (name: string, ownerId?: string, ttl?: number): Promise<Grant> => {
      const result = await service.acquire(request(name, ownerId, ttl));
      if (!result.acquired) throw new Error(`expected to acquire ${name}`);
      return result.grant;
    };
    const lease = (name: string, grant: Grant, ownerId = 'contract-owner') => ({
      name,
      ownerId,
      ownershipToken: grant.ownershipToken,
      fencingToken: grant.fencingToken,
    });
    const newClient = (): LockClient => {
      const client = new LockClient(service, { clock, operationTimeoutMs: 5_000 });
      clients.push(client);
      return client;
    };
    const waitFor = async (predicate: () => boolean, maxMs: number): Promise<boolean> => {
      for (let waited = 0; waited <= maxMs; waited += 10) {
        if (predicate()) return true;
        await sleep(10);
      }
      return predicate();
    };

    /** Lets time pass (real or fake) until `promise` settles, at most `maxMs`, then returns its outcome. */
    const awaitWhileTimePasses = async <T>(promise: Promise<T>, maxMs: number): Promise<T> => {
      let settled = false;
      const tracked = promise.finally(() => {
        settled = true;
      });
      tracked.catch(() => {});
      await waitFor(() => settled, maxMs);
      return tracked;
    };

    beforeEach(async () => {
      subject = await makeSubject();
      service = subject.service;
      prefix = `contract-${randomBytes(6).toString('hex')}`;
    });

    afterEach(async () => {
      await Promise.all(clients.splice(0).map((client) => client.close()));
      await subject.close?.();
    });

    it('grants a lock to one owner at a time', { timeout }, async () => {
      const name = lockName();
      const first = await grab(name, 'owner-a');
      expect(typeof first.ownershipToken).toBe('string');
      expect(first.ownershipToken.length).toBeGreaterThanOrEqual(20);
      expect(typeof first.fencingToken).toBe('bigint');
      expect(first.fencingToken).toBeGreaterThan(0n);
      expect(first.ttlMs).toBeGreaterThanOrEqual(ttlMs);
      const second = await service.acquire(request(name, 'owner-b'));
      expect(second.acquired).toBe(false);
      if (!second.acquired && second.holderExpiresInMs !== undefined) {
        expect(second.holderExpiresInMs).toBeGreaterThan(0);
        expect(second.holderExpiresInMs).toBeLessThanOrEqual(first.ttlMs);
      }
      // The same owner id gets no special treatment: reentrancy is the client's business, not the service's.
      const again = await service.acquire(request(name, 'owner-a'));
      expect(again.acquired).toBe(false);
    });

    it('mints strictly increasing fencing tokens per name', { timeout }, async () => {
      const name = lockName();
      const tokens: bigint[] = [];
      for (let i = 0; i < 5; i++) {
        const grant = await grab(name, `owner-${i}`);
        tokens.push(grant.fencingToken);
        expect(await service.release(lease(name, grant, `owner-${i}`))).toBe(true);
      }
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as bigint);
      expect(new Set(tokens.map(String)).size).toBe(tokens.length);
    });

    it('keeps different names independent', { timeout }, async () => {
      const a = await grab(lockName('a'));
      const b = await grab(lockName('b'));
      expect(a.ownershipToken).not.toBe(b.ownershipToken);
    });

    it('maps unusual names to distinct locks', { timeout }, async () => {
      const names = [
        'with space',
        'ünïcödé-名前-🔒',
        '{braces}',
        'slash/and\\back',
        'Slash/And\\Back',
        'a%2Fb',
        'a/b',
        '..',
        '.',
        'x'.repeat(1024 - 64),
      ].map((n) => lockName(n));
      const grants = await Promise.all(names.map((name) => grab(name)));
      expect(grants).toHaveLength(names.length);
      const maxName = `${prefix}:${'é'.repeat((1024 - prefix.length - 1) >> 1)}`;
      expect(new TextEncoder().encode(maxName).length).toBeLessThanOrEqual(1024);
      await grab(maxName);
      expect((await service.acquire(request(maxName, 'other'))).acquired).toBe(false);
    });

    it('renews only for the owner of the grant', { timeout }, async () => {
      const name = lockName();
      const grant = await grab(name);
      expect(await service.renew({ lease: lease(name, grant), ttlMs })).toMatchObject({ renewed: true });
      const forged = { ...lease(name, grant), ownershipToken: `${grant.ownershipToken}x` };
      expect(await service.renew({ lease: forged, ttlMs })).toEqual({ renewed: false });
      if (service.renewMany) {
        const results = await service.renewMany([
          { lease: lease(name, grant), ttlMs },
          { lease: forged, ttlMs },
          { lease: { ...forged, name: lockName('absent') }, ttlMs },
        ]);
        expect(results.map((r) => r.renewed)).toEqual([true, false, false]);
      }
    });

    it('keeps a renewed lease past its first TTL', { timeout }, async () => {
      const name = lockName();
      const grant = await grab(name, 'owner-a');
      const step = Math.floor(grant.ttlMs / 3);
      for (let i = 0; i < 4; i++) {
        await sleep(step);
        expect(await service.renew({ lease: lease(name, grant, 'owner-a'), ttlMs })).toMatchObject({
          renewed: true,
        });
      }
      expect((await service.acquire(request(name, 'owner-b'))).acquired).toBe(false);
    });

    it('releases only for the owner, and only once', { timeout }, async () => {
      const name = lockName();
      const grant = await grab(name);
      const forged = { ...lease(name, grant), ownershipToken: `${grant.ownershipToken}x` };
      expect(await service.release(forged)).toBe(false);
      expect((await service.acquire(request(name, 'other'))).acquired).toBe(false);
      expect(await service.release(lease(name, grant))).toBe(true);
      expect(await service.release(lease(name, grant))).toBe(false);
      const next = await grab(name, 'other');
      expect(next.fencingToken).toBeGreaterThan(grant.fencingToken);
    });

    /**
     * Another owner asks for `name` every TTL/20 until an answer comes back at or after `windowEnd`; each answer
     * before that must be a refusal (`when` says when it came, for the failure message). Then both let go: clean-up
     * only, since past `windowEnd` the lease may have ended and neither answer says anything.
     */
    async function refusedUntil(
      name: string,
      grant: Grant,
      windowEnd: number,
      when: (answeredAt: number) => string,
    ): Promise<void> {
      const stepMs = Math.max(1, Math.floor(grant.ttlMs / 20));
      let intruder: Grant | undefined;
      for (;;) {
        await sleep(stepMs);
        const other = await service.acquire(request(name, 'owner-b'));
        const answeredAt = clock.monotonic();
        if (other.acquired) intruder = other.grant;
        if (answeredAt >= windowEnd) break;
        expect(other.acquired, `another owner got the lock ${when(answeredAt)}`).toBe(false);
      }
      await service.release(lease(name, grant, 'owner-a'));
      if (intruder) await service.release(lease(name, intruder, 'owner-b'));
    }

    it('keeps an unrenewed lease from every other owner for the TTL it granted', { timeout }, async () => {
      const name = lockName();
      const sentAt = clock.monotonic();
      const grant = await grab(name, 'owner-a');
      // Core counts the window from before the request with the TTL the grant reports (less its drift allowance): a
      // lease that ends sooner lets a second owner in while the first still holds a valid handle.
      const windowEnd = validUntil(sentAt, grant.ttlMs, CLIENT_DRIFT_FACTOR);
      // Another owner asks all through the window. Each answer is judged by when it came back, not when it was
      // sent: the service decided no later than that, while a lease it started after sentAt had to be live. A slow
      // machine can only move answers past windowEnd, where they are not judged; it cannot make a refusal wrong.
      await refusedUntil(
        name,
        grant,
        windowEnd,
        (ms) => `${ms - sentAt} ms after a ${grant.ttlMs} ms grant was asked for`,
      );
    });

    it('renews for the TTL asked, or answers with the TTL it kept', { timeout }, async () => {
      const name = lockName();
      const grantSentAt = clock.monotonic();
      const grant = await grab(name, 'owner-a');
      // Core renews with a longer TTL than the grant's when a reentrant caller asks for more, and counts the
      // window by the TTL the answer reports (`ttlMs`), else by the one it asked for.
      const asked = grant.ttlMs * 3;
      const sentAt = clock.monotonic();
      const result = await service.renew({ lease: lease(name, grant, 'owner-a'), ttlMs: asked });
      // A renewal that came back after the grant's window may rightly find the lease gone: only a load spike
      // gets there, and it leaves nothing to judge.
      if (!result.renewed && clock.monotonic() >= validUntil(grantSentAt, grant.ttlMs, CLIENT_DRIFT_FACTOR))
        return;
      expect(result.renewed).toBe(true);
      const kept = result.renewed && result.ttlMs !== undefined ? result.ttlMs : asked;
      expect(kept).toBeGreaterThan(0);
      const windowEnd = validUntil(sentAt, kept, CLIENT_DRIFT_FACTOR);
      // Another owner asks all through the renewed window, past the first TTL where a renewal that kept less than
      // it promised lets it in. As for the unrenewed lease, each answer is judged by when it came back: load can
      // only move answers past windowEnd, where they are not judged, never make a refusal wrong.
      await refusedUntil(
        name,
        grant,
        windowEnd,
        (ms) => `${ms - sentAt} ms after a renewal promising ${kept} ms was asked for`,
      );
    });

    it('expires an unrenewed lease; the old owner can neither renew nor release the new one', {
      timeout,
    }, async () => {
      const name = lockName();
      const old = await grab(name, 'owner-a');
      await sleep(old.ttlMs + slackMs);
      const next = await grab(name, 'owner-b');
      expect(next.fencingToken).toBeGreaterThan(old.fencingToken);
      expect(await service.renew({ lease: lease(name, old, 'owner-a'), ttlMs })).toEqual({ renewed: false });
      expect(await service.release(lease(name, old, 'owner-a'))).toBe(false);
      expect((await service.acquire(request(name, 'owner-c'))).acquired).toBe(false);
      expect(await service.release(lease(name, next, 'owner-b'))).toBe(true);
    });

    it('delivers a release notice to watchers, and none after unsubscribing', { timeout }, async () => {
      const name = lockName();
      let notices = 0;
      const unwatch = service.watch(name, () => {
        notices += 1;
      });
      try {
        const grant = await grab(name);
        await sleep(100); // let a remote watch register (and say so, if it does) before the release it must see
        // Counted from here: a notice sent when the subscription became active, or on the grant, is no release notice.
        const beforeRelease = notices;
        await service.release(lease(name, grant));
        expect(await waitFor(() => notices > beforeRelease, 5_000)).toBe(true);
      } finally {
        unwatch();
      }
      const seen = notices;
      const grant = await grab(name);
      await service.release(lease(name, grant));
      await sleep(100);
      expect(notices).toBe(seen);
    });

    it('isolates a watch or watchChanges callback that throws or rejects; the others still hear', {
      timeout,
    }, async () => {
      const name = lockName();
      // watch is public and typed () => void, so an async callback type-checks: what it throws, or the promise it
      // rejects, must not end the process (Node's default for both) nor keep the notice from the other callbacks.
      const escaped: unknown[] = [];
      const onEscaped = (error: unknown): void => {
        escaped.push(error);
      };
      process.prependListener('uncaughtException', onEscaped);
      process.prependListener('unhandledRejection', onEscaped);
      const calls = { throws: 0, rejects: 0, changeThrows: 0, changeRejects: 0 };
      let heard = 0;
      let changed = 0;
      let otherHeard = 0;
      const other = lockName('other');
      const unwatch = [
        service.watch(name, () => {
          calls.throws += 1;
          throw new Error('contract: watch callback throws');
        }),
        service.watch(name, async () => {
          calls.rejects += 1;
          throw new Error('contract: async watch callback rejects');
        }),
        service.watch(name, () => {
          heard += 1;
        }),
        // Another name's watch, which may share a stream or connection with the broken callbacks' name.
        service.watch(other, () => {
          otherHeard += 1;
        }),
      ];
      const watchChanges = service.watchChanges?.bind(service);
      if (watchChanges) {
        unwatch.push(
          watchChanges(name, () => {
            calls.changeThrows += 1;
            throw new Error('contract: change callback throws');
          }),
          watchChanges(name, async () => {
            calls.changeRejects += 1;
            throw new Error('contract: async change callback rejects');
          }),
          watchChanges(name, () => {
            changed += 1;
          }),
        );
      }
      try {
        // A long lease: this case is about the notices, not about a lease that ran out while watches registered.
        const grant = await grab(name, undefined, ttlMs * 4);
        await sleep(100); // let remote watches register before the release they must see
        const beforeRelease = heard;
        expect(await service.release(lease(name, grant))).toBe(true);
        const allHeard = (): boolean =>
          heard > beforeRelease &&
          calls.throws > 0 &&
          calls.rejects > 0 &&
          (!watchChanges || (changed > 0 && calls.changeThrows > 0 && calls.changeRejects > 0));
        expect(await waitFor(allHeard, 5_000)).toBe(true);
        const otherGrant = await grab(other, undefined, ttlMs * 4);
        const otherBefore = otherHeard;
        expect(await service.release(lease(other, otherGrant))).toBe(true);
        expect(await waitFor(() => otherHeard > otherBefore, 5_000)).toBe(true);
        // Unhandled rejections are reported after the microtask queue drains: give them a macrotask turn.
        await new Promise((resolve) => setImmediate(resolve));
        expect(escaped).toEqual([]);
      } finally {
        for (const stop of unwatch) stop();
        process.removeListener('uncaughtException', onEscaped);
        process.removeListener('unhandledRejection', onEscaped);
      }
    });

    if (options.checksInput ?? true) {
      const invalid = (field: string) => ({ code: 'INVALID_ARGUMENT', field });
      /** What a synchronous watch call threw (undefined if it returned: the watch is then ended at once). */
      const thrownBy = (subscribe: () => () => void): unknown => {
        try {
          subscribe()();
          return undefined;
        } catch (error) {
          return error;
        }
      };

      it('refuses a name core would refuse (empty, a lone surrogate, too long) with InvalidArgumentError', {
        timeout,
      }, async () => {
        const names = ['', lockName('a\ud800'), lockName('x'.repeat(MAX_NAME_BYTES))];
        for (const name of names) {
          const ask = request(name);
          await expect.soft(service.acquire(ask)).rejects.toMatchObject(invalid('request.name'));
          if (service.acquirePermit) {
            await expect
              .soft(service.acquirePermit({ ...ask, permits: 2 }))
              .rejects.toMatchObject(invalid('request.name'));
          }
          if (service.availablePermits) {
            await expect.soft(service.availablePermits(name, 2)).rejects.toMatchObject(invalid('name'));
          }
          if (service.inspectPermits) {
            await expect.soft(service.inspectPermits(name, 2)).rejects.toMatchObject(invalid('name'));
          }
          if (service.inspect)
            await expect.soft(service.inspect(name)).rejects.toMatchObject(invalid('name'));
          // Subscribing is synchronous: a bad name is refused by the call itself, not by a later notice.
          expect.soft(thrownBy(() => service.watch(name, () => {}))).toMatchObject(invalid('name'));
          const watchChanges = service.watchChanges?.bind(service);
          if (watchChanges)
            expect.soft(thrownBy(() => watchChanges(name, () => {}))).toMatchObject(invalid('name'));
        }
        // A lone surrogate is not read as the U+FFFD it would be sent as: the lock held under that is no answer.
        const replaced = lockName('a\ufffd');
        const held = await grab(replaced, 'holder');
        try {
          await expect
            .soft(service.acquire(request(lockName('a\ud800'), 'other')))
            .rejects.toMatchObject(invalid('request.name'));
        } finally {
          expect(await service.release(lease(replaced, held, 'holder'))).toBe(true);
        }
      });

      it('refuses an owner id core would refuse (empty, a lone surrogate, too long, not a string) with InvalidArgumentError', {
        timeout,
      }, async () => {
        // LockClient's rule (validateOwnerId): 1 to 256 UTF-16 units, no lone surrogate, which a backend would store
        // as U+FFFD and inspect would then answer with an owner id nobody has.
        const ownerIds: [string, unknown][] = [
          ['empty', ''],
          ['a lone surrogate', 'host\ud800:1'],
          ['257 UTF-16 units', 'o'.repeat(257)],
          ['a number', 42],
        ];
        for (const [label, ownerId] of ownerIds) {
          const ask = { ...request(lockName(label)), ownerId: ownerId as string };
          await expect
            .soft(service.acquire(ask), `acquire, owner id ${label}`)
            .rejects.toMatchObject(invalid('request.ownerId'));
          if (service.acquirePermit) {
            await expect
              .soft(service.acquirePermit({ ...ask, permits: 1 }), `acquirePermit, owner id ${label}`)
              .rejects.toMatchObject(invalid('request.ownerId'));
          }
        }
        // Refused before answering, so nothing was taken: a valid owner (256 units) gets each lock and permit.
        const valid = 'o'.repeat(256);
        for (const [label] of ownerIds) {
          const name = lockName(label);
          const grant = await grab(name, valid);
          expect(await service.release(lease(name, grant, valid))).toBe(true);
          if (service.acquirePermit) {
            const permit = await service.acquirePermit({ ...request(name, valid), permits: 1 });
            if (!permit.acquired || permit.grant.slot === undefined) {
              throw new Error(`expected the one permit of ${name} (owner id ${label} refused)`);
            }
            const slot = permit.grant.slot;
            expect(await service.release({ ...lease(name, permit.grant, valid), slot })).toBe(true);
          }
        }
      });

      it('refuses metadata core would refuse (too long, a lone surrogate, over 1 MB) with InvalidArgumentError', {
        timeout,
      }, async () => {
        // Only a service that reads metadata back (inspect) is given any by core.
        if (!service.inspect) return;
        const values = ['é'.repeat((MAX_METADATA_BYTES >> 1) + 1), 'a\ud800', 'm'.repeat(1_100_000)];
        const name = lockName();
        for (const metadata of values) {
          const ask = { ...request(name), metadata };
          await expect.soft(service.acquire(ask)).rejects.toMatchObject(invalid('request.metadata'));
          if (service.acquirePermit) {
            await expect
              .soft(service.acquirePermit({ ...ask, name: lockName('permits'), permits: 2 }))
              .rejects.toMatchObject(invalid('request.metadata'));
          }
        }
        expect((await service.inspect(name)).held).toBe(false);
        const grant = await service.acquire({ ...request(name), metadata: 'before' });
        if (!grant.acquired) throw new Error(`expected to acquire ${name}`);
        try {
          if (service.updateMetadata) {
            for (const metadata of values) {
              await expect
                .soft(service.updateMetadata(lease(name, grant.grant), metadata))
                .rejects.toMatchObject(invalid('metadata'));
            }
          }
          expect((await service.inspect(name)).metadata).toBe('before');
        } finally {
          expect(await service.release(lease(name, grant.grant))).toBe(true);
        }
      });
    }

    it('hands a released lock to a waiting LockClient without waiting out the backoff', {
      timeout,
    }, async () => {
      const name = lockName();
      const holder = newClient();
      // Neither its backoff (a minute) nor the holder's expiry (20 s), which a refusal may report, comes before the
      // end of its budget: only a release notice (or the service's own queue) can hand it the lock sooner.
      const waiter = new LockClient(service, {
        clock,
        retry: { baseMs: 60_000, capMs: 60_000 },
        operationTimeoutMs: 5_000,
      });
      clients.push(waiter);
      const first = await holder.acquire(name, { ttlMs: Math.max(ttlMs, 20_000) });
      const waitMs = 8_000;
      const waiting = waiter.acquire(name, { ttlMs, waitMs });
      await sleep(50);
      const releasedAt = clock.monotonic();
      await first.release();
      // Time passes while it waits (on a FakeClock too). A waiter nobody woke would get the lock only by its last
      // try at the end of its budget: woken, it has it long before.
      const second = await awaitWhileTimePasses(waiting, 10_000);
      expect(clock.monotonic() - releasedAt).toBeLessThan(waitMs / 4);
      expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
      expect(second.isHeld()).toBe(true);
      await second.release();
    });

    it('runs a LockClient end to end: exclusive, renewed past the TTL, released', { timeout }, async () => {
      const name = lockName();
      const a = newClient();
      const b = newClient();
      const handle = await a.acquire(name, { ttlMs });
      expect(await b.tryAcquire(name, { ttlMs })).toBeNull();
      await sleep(handle.ttlMs * 1.5);
      expect(handle.state).toBe('held');
      expect(await b.tryAcquire(name, { ttlMs })).toBeNull();
      await handle.release();
      const next = await b.acquire(name, { ttlMs, waitMs: 2_000 });
      expect(next.fencingToken).toBeGreaterThan(handle.fencingToken);
    });

    it(`serves waiting clients${options.fifo ? ' in arrival order' : ''}`, { timeout }, async () => {
      const name = lockName();
      const holder = newClient();
      const first = await holder.acquire(name, { ttlMs: Math.max(ttlMs, 2_000) });
      const order: number[] = [];
      const waits: Promise<void>[] = [];
      for (let i = 0; i < 3; i++) {
        const waiter = newClient();
        waits.push(
          waiter.acquire(name, { ttlMs, waitMs: 20_000 }).then(async (handle) => {
            order.push(i);
            await sleep(20);
            await handle.release();
          }),
        );
        // Arrival order: each waiter is in the queue before the next one asks.
        await sleep(150);
      }
      await first.release();
      await awaitWhileTimePasses(Promise.all(waits), 20_000);
      expect([...order].sort()).toEqual([0, 1, 2]);
      if (options.fifo) expect(order).toEqual([0, 1, 2]);
    });

    it('leaves nothing behind when a waiter gives up (deadline or abort)', { timeout }, async () => {
      const name = lockName();
      const holder = newClient();
      const first = await holder.acquire(name, { ttlMs: Math.max(ttlMs, 2_000) });
      const timedOut = await awaitWhileTimePasses(
        newClient().acquire(name, { ttlMs, waitMs: 200 }),
        10_000,
      ).catch((error: unknown) => error);
      expect(timedOut).toBeInstanceOf(AcquireTimeoutError);
      const abort = new AbortController();
      const aborted = newClient().acquire(name, { ttlMs, waitMs: 20_000, signal: abort.signal });
      await sleep(100);
      const reason = new Error('gave up');
      abort.abort(reason);
      await expect(awaitWhileTimePasses(aborted, 5_000)).rejects.toBe(reason);
      await first.release();
      // Neither waiter's queue entry may stand in front of a newcomer (an abandoned entry is removed in the
      // background, within a round trip): it gets the lock without waiting.
      await sleep(200);
      const next = await newClient().acquire(name, { ttlMs, waitMs: 0 });
      expect(next.fencingToken).toBeGreaterThan(first.fencingToken);
    });

    it('gives back a grant that races the client closing', { timeout }, async () => {
      const name = lockName();
      const holder = newClient();
      const first = await holder.acquire(name, { ttlMs: Math.max(ttlMs, 2_000) });
      const closing = new LockClient(service, { clock, operationTimeoutMs: 5_000 });
      const waiting = closing.acquire(name, { ttlMs: Math.max(ttlMs, 2_000), waitMs: 20_000 });
      waiting.catch(() => {}); // asserted below; it may reject while the close is still being awaited
      await sleep(100);
      // The release may hand the lock to the waiter while its client is closing: it must not keep it.
      const released = first.release();
      await awaitWhileTimePasses(closing.close(), 10_000);
      await released;
      await expect(awaitWhileTimePasses(waiting, 5_000)).rejects.toMatchObject({ code: 'CLIENT_CLOSED' });
      const next = await awaitWhileTimePasses(newClient().acquire(name, { ttlMs, waitMs: 5_000 }), 10_000);
      expect(next.fencingToken).toBeGreaterThan(first.fencingToken);
    });

    const closeService = options.closeService;
    if (closeService)
      it('rejects calls after the service is closed with ClientClosedError', { timeout }, async () => {
        const name = lockName();
        const grant = await grab(name);
        await closeService(subject);
        await expect(service.acquire(request(lockName('after')))).rejects.toMatchObject({
          code: 'CLIENT_CLOSED',
        });
        await expect(service.renew({ lease: lease(name, grant), ttlMs })).rejects.toMatchObject({
          code: 'CLIENT_CLOSED',
        });
      });

    const endSession = options.endSession;
    if (endSession)
      it('reports the grants of an ended session through watchLeases', { timeout }, async () => {
        expect(typeof service.watchLeases).toBe('function');
        const reported: string[] = [];
        const unwatch = service.watchLeases?.((tokens) => reported.push(...tokens)) ?? (() => {});
        try {
          const name = lockName();
          const client = newClient();
          const handle = await client.acquire(name, { ttlMs });
          const grant = await grab(lockName('direct'));
          await endSession(subject);
          expect(await waitFor(() => handle.state === 'lost', 10_000)).toBe(true);
          expect(reported).toContain(grant.ownershipToken);
        } finally {
          unwatch();
        }
      });

    for (const fault of options.faults ?? []) {
      it(`keeps fencing tokens increasing across a fault: ${fault.name}`, { timeout }, async () => {
        const name = lockName();
        const before = await grab(name, 'owner-a');
        await service.release(lease(name, before, 'owner-a'));
        await fault.inject(subject);
        await fault.recover(subject);
        let after: Grant | undefined;
        for (let i = 0; i < 50 && !after; i++) {
          try {
            const result = await service.acquire(request(name, 'owner-b'));
            if (result.acquired) after = result.grant;
            else await sleep(Math.max(20, result.holderExpiresInMs ?? 20));
          } catch {
            await sleep(100); // the service may still be coming back
          }
        }
        expect(after).toBeDefined();
        expect(after?.fencingToken).toBeGreaterThan(before.fencingToken);
      });
    }
  });
}
