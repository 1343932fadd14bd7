import { InvalidArgumentError } from '@dlock/core';
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
  ])('rejects %o at %s', (options, field) => {
    try {
      resolveOptions(options);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).field).toBe(field);
    }
  });
});
