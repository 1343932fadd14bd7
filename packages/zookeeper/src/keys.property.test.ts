import { MAX_NAME_BYTES, validateName } from '@dlock/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeLockName, encodeLockName, lockParentPath } from './keys.js';

const utf8 = new TextEncoder();

/** Lock names as core admits them: well-formed Unicode (any plane), 1 to 1024 UTF-8 bytes. */
const unit = fc.oneof(
  fc.constantFrom('.', '..', '/', '%', '%2E', ' ', '\u0000', '\u007f', '\ufff0', '\ue000'),
  fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 1 }),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
);
const lockName = fc
  .array(unit, { minLength: 1, maxLength: 400 })
  .map((units) => units.join(''))
  .filter((name) => utf8.encode(name).length <= MAX_NAME_BYTES && !/\p{Cs}/u.test(name));

/** What ZooKeeper's PathUtils.validatePath rejects in a node name (as UTF-16 code units), plus `/`. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are exactly the characters ZooKeeper rejects
const INVALID = /[/\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]/;

describe('lock name → znode name', () => {
  it('is a valid znode name for every lock name', () => {
    fc.assert(
      fc.property(lockName, (name) => {
        validateName(name);
        const encoded = encodeLockName(name);
        expect(encoded.length).toBeGreaterThan(0);
        expect(INVALID.test(encoded)).toBe(false);
        expect(encoded === '.' || encoded === '..').toBe(false);
        expect(encoded.length).toBeLessThanOrEqual(3 * MAX_NAME_BYTES);
      }),
      { numRuns: 2_000 },
    );
  });

  it('is injective: decoding gives the name back', () => {
    fc.assert(
      fc.property(lockName, (name) => {
        expect(decodeLockName(encodeLockName(name))).toBe(name);
      }),
      { numRuns: 2_000 },
    );
  });

  it('never maps two different names to one node', () => {
    fc.assert(
      fc.property(lockName, lockName, (a, b) => {
        fc.pre(a !== b);
        expect(lockParentPath('/dlock', a)).not.toBe(lockParentPath('/dlock', b));
      }),
      { numRuns: 2_000 },
    );
  });
});
