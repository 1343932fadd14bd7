import { InvalidArgumentError } from '@dlock/core';
import { describe, expect, it } from 'vitest';
import { CLIENT_METHODS } from './client-like.js';
import { requestTimeoutFor, resolveOptions } from './options.js';

/** Passes the options' structural check: a function for every client method, none of them ever called. */
const fakeClient = Object.fromEntries(CLIENT_METHODS.map((m) => [m, () => {}]));

function invalid(options: unknown): InvalidArgumentError {
  try {
    resolveOptions(options);
  } catch (error) {
    if (error instanceof InvalidArgumentError) return error;
    throw error;
  }
  throw new Error('expected InvalidArgumentError');
}

describe('options', () => {
  it('resolves defaults', () => {
    const o = resolveOptions({ connectionString: '127.0.0.1:2181' });
    expect(o).toMatchObject({ root: '/dlock', sessionTimeoutMs: 10_000, idleParentMs: 30_000 });
    expect(o.requestTimeoutMs).toBeUndefined();
    expect(resolveOptions({ client: fakeClient }).client).toBe(fakeClient);
  });

  it('rejects what cannot work, naming the field', () => {
    expect(invalid(undefined).field).toBe('options');
    expect(invalid({}).field).toBe('options');
    expect(invalid({ client: fakeClient, connectionString: 'x:1' }).field).toBe('options');
    expect(invalid({ client: {} }).field).toBe('options.client');
    // What was passed and what is required: a client without getACL could not read a parent's ACL.
    const { getACL: _, ...withoutAcl } = fakeClient;
    const noAcl = invalid({ client: withoutAcl });
    expect(noAcl.field).toBe('options.client');
    expect(noAcl.message).toContain('lacks getACL');
    expect(invalid({ client: 42 }).message).toContain('got number 42');
    expect(invalid({ client: fakeClient, sessionTimeoutMs: 5_000 }).field).toBe('options.sessionTimeoutMs');
    expect(invalid({ connectionString: '' }).field).toBe('options.connectionString');
    expect(invalid({ connectionString: 'a b:1' }).field).toBe('options.connectionString');
    expect(invalid({ connectionString: 'x:1', sessionTimeoutMs: 1.5 }).field).toBe(
      'options.sessionTimeoutMs',
    );
    expect(invalid({ connectionString: 'x:1', root: '/' }).field).toBe('options.root');
    expect(invalid({ connectionString: 'x:1', root: '/zookeeper' }).field).toBe('options.root');
    expect(invalid({ connectionString: 'x:1', requestTimeoutMs: 0 }).field).toBe('options.requestTimeoutMs');
    expect(invalid({ connectionString: 'x:1', idleParentMs: -1 }).field).toBe('options.idleParentMs');
    expect(invalid({ connectionString: 'x:1', clock: {} }).field).toBe('options.clock');
  });

  it('refuses a misspelt key, naming it and the key that was probably meant', () => {
    const typo = invalid({ connectionString: 'x:1', sesionTimeoutMs: 5_000 });
    expect(typo.code).toBe('INVALID_ARGUMENT');
    expect(typo.field).toBe('options.sesionTimeoutMs');
    expect(typo.message).toContain('"sessionTimeoutMs"');
    // Reported before the check for exactly one of `client` and `connectionString`, which the typo would trip.
    const missing = invalid({ connectionStrng: 'x:1' });
    expect(missing.field).toBe('options.connectionStrng');
    expect(missing.message).toContain('"connectionString"');
    expect(invalid({ client: fakeClient, idleParentMS: 100 }).message).toContain('"idleParentMs"');
    expect(invalid({ client: fakeClient, prefix: '/locks' }).field).toBe('options.prefix');
    // A key far from every option gets no suggestion, only the list.
    const far = invalid({ client: fakeClient, zzzzzzzzzz: 1 });
    expect(far.message).not.toContain('did you mean');
    expect(far.message).toContain('idleParentMs');
  });

  it('bounds each request by a third of the session timeout, within 0.5 to 5 s', () => {
    expect(requestTimeoutFor(400, undefined)).toBe(500);
    expect(requestTimeoutFor(4_000, undefined)).toBe(1_333);
    expect(requestTimeoutFor(60_000, undefined)).toBe(5_000);
    expect(requestTimeoutFor(60_000, 200)).toBe(200);
  });
});

describe('keyPrefix and its deprecated alias root', () => {
  it('takes the root node from keyPrefix, or from root as before', () => {
    expect(resolveOptions({ connectionString: 'x:1', keyPrefix: '/locks/a' }).root).toBe('/locks/a');
    expect(resolveOptions({ connectionString: 'x:1', root: '/locks/b' }).root).toBe('/locks/b');
    expect(resolveOptions({ connectionString: 'x:1' }).root).toBe('/dlock');
  });

  it('refuses both at once, and names the one that was given when it is wrong', () => {
    const both = invalid({ connectionString: 'x:1', keyPrefix: '/a', root: '/a' });
    expect(both.field).toBe('options.root');
    expect(both.message).toContain('keyPrefix');
    expect(invalid({ connectionString: 'x:1', keyPrefix: 'dlock/' }).field).toBe('options.keyPrefix');
    expect(invalid({ connectionString: 'x:1', keyPrefix: '/zookeeper/x' }).field).toBe('options.keyPrefix');
    expect(invalid({ connectionString: 'x:1', root: 'dlock' }).field).toBe('options.root');
  });

  it('suggests keyPrefix for a near miss', () => {
    expect(invalid({ connectionString: 'x:1', keyPrefx: '/a' }).message).toContain('"keyPrefix"');
  });
});
