import { InvalidArgumentError } from '@dlock/core';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from './options.js';

function invalid(options: unknown): InvalidArgumentError {
  try {
    resolveOptions(options);
  } catch (error) {
    if (error instanceof InvalidArgumentError) return error;
    throw error;
  }
  throw new Error('expected InvalidArgumentError');
}

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
