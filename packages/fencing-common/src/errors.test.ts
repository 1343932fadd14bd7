import { describe, expect, it } from 'vitest';
import {
  FenceBusyError,
  FenceConflictError,
  InvalidArgumentError,
  isDLockError,
  StaleFencingTokenError,
} from './errors.js';

describe('fencing errors', () => {
  it('carry stable codes, retryability and their fields', () => {
    const stale = new StaleFencingTokenError('orders/1', 4n, 5n);
    expect(stale).toMatchObject({
      code: 'STALE_FENCING_TOKEN',
      retryable: false,
      resource: 'orders/1',
      token: 4n,
      highWaterMark: 5n,
      name: 'StaleFencingTokenError',
    });
    expect(stale.message).toContain('5');
    expect(new InvalidArgumentError('token', 'must be positive')).toMatchObject({
      code: 'INVALID_ARGUMENT',
      field: 'token',
      message: 'token must be positive',
    });
    const cause = new Error('could not serialize access');
    expect(new FenceConflictError('r', cause)).toMatchObject({
      code: 'FENCE_CONFLICT',
      retryable: true,
      cause,
    });
    expect(new FenceBusyError('r', cause)).toMatchObject({ code: 'FENCE_BUSY', retryable: true, cause });
  });

  it('are recognised by brand, also when built by another copy of the package', () => {
    expect(isDLockError(new StaleFencingTokenError('r', 1n, 2n))).toBe(true);
    // What a second installed copy (or @dlock/core) produces: same registered symbol, different class.
    const foreign = Object.assign(new Error('x'), { code: 'LOCK_LOST', [Symbol.for('dlock.error')]: true });
    expect(isDLockError(foreign)).toBe(true);
    expect(isDLockError(new Error('plain'))).toBe(false);
    expect(isDLockError({ code: 'STALE_FENCING_TOKEN' })).toBe(false);
    expect(isDLockError(null)).toBe(false);
    expect(isDLockError('STALE_FENCING_TOKEN')).toBe(false);
  });

  it('isDLockError answers false for a value it cannot read, never throws', () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const trapping = new Proxy(
      {},
      {
        get() {
          throw new Error('trap');
        },
      },
    );
    expect(isDLockError(proxy)).toBe(false);
    expect(isDLockError(trapping)).toBe(false);
  });
});
