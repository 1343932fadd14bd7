import { InvalidArgumentError, systemClock } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { describe, expect, it } from 'vitest';
import type { EtcdClientLike } from './client-like.js';
import { resolveOptions } from './options.js';

const client = { kv: {}, leaseClient: {}, watchClient: {} } as unknown as EtcdClientLike;

describe('resolveOptions', () => {
  it('has defaults: prefix dlock/, a lease per lock, 3 s per request', () => {
    expect(resolveOptions({ client })).toEqual({
      client,
      prefix: 'dlock/',
      sessionTtlMs: undefined,
      requestTimeoutMs: 3_000,
    });
    expect(resolveOptions({ client, session: true }).sessionTtlMs).toBe(0);
    expect(resolveOptions({ client, session: {} }).sessionTtlMs).toBe(0);
    expect(resolveOptions({ client, session: { ttlMs: 15_000 } }).sessionTtlMs).toBe(15_000);
  });

  it.each([
    [undefined, 'options'],
    [{}, 'options.client'],
    [{ client: { kv: {} } }, 'options.client'],
    [{ client, prefix: 42 }, 'options.prefix'],
    [{ client, prefix: 'x'.repeat(257) }, 'options.prefix'],
    [{ client, session: 'yes' }, 'options.session'],
    [{ client, session: { ttlMs: 0 } }, 'options.session.ttlMs'],
    [{ client, session: { ttlMs: 1.5 } }, 'options.session.ttlMs'],
    [{ client, requestTimeoutMs: 0 }, 'options.requestTimeoutMs'],
    [{ client, requestTimeoutMs: Number.NaN }, 'options.requestTimeoutMs'],
    [{ client, keyPrefix: 'a/', prefix: 'b/' }, 'options.prefix'],
    [{ client, keyPrefix: 42 }, 'options.keyPrefix'],
    // Both written as U+FFFD: the two would share their keys (a lock held under one reads as busy under the other).
    [{ client, keyPrefix: 'a/\uD800/' }, 'options.keyPrefix'],
    [{ client, prefix: 'a/\uDC00/' }, 'options.prefix'],
    [{ client, clock: {} }, 'options.clock'],
    [{ client, clock: { ...systemClock, sleep: 5 } }, 'options.clock'],
  ])('rejects %o at %s', (options, field) => {
    try {
      resolveOptions(options);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
  });

  it.each([
    [{ client, requestTimeout: 1_000 }, 'options.requestTimeout', 'requestTimeoutMs'],
    [{ client, Prefix: 'app/' }, 'options.Prefix', 'prefix'],
    [{ client, sesion: true }, 'options.sesion', 'session'],
    [{ client, session: { ttl: 15_000 } }, 'options.session.ttl', 'ttlMs'],
    [{ client, session: { TTLms: 15_000 } }, 'options.session.TTLms', 'ttlMs'],
  ])('refuses the misspelt key in %o, naming it (%s) and the key meant (%s)', (options, field, meant) => {
    try {
      resolveOptions(options);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
      expect((error as InvalidArgumentError).message).toContain(`"${meant}"`);
    }
  });

  it('refuses an unknown key with no close match without suggesting one', () => {
    try {
      resolveOptions({ client, retries: 3 });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe('options.retries');
      expect((error as InvalidArgumentError).message).not.toContain('did you mean');
    }
  });
});

describe('resolveOptions: keyPrefix, its deprecated alias prefix, and clock', () => {
  it('takes keyPrefix, and still takes prefix, for the same thing', () => {
    expect(resolveOptions({ client, keyPrefix: 'app/' }).prefix).toBe('app/');
    expect(resolveOptions({ client, prefix: 'app/' }).prefix).toBe('app/');
    expect(resolveOptions({ client, keyPrefix: '' }).prefix).toBe('');
  });

  it('keeps the clock it is given', () => {
    const clock = new FakeClock();
    expect(resolveOptions({ client, clock }).clock).toBe(clock);
    expect(resolveOptions({ client }).clock).toBeUndefined();
  });
});
