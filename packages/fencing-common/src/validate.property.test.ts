import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from './errors.js';
import { MAX_FENCING_TOKEN, parseFencingToken } from './validate.js';

describe('parseFencingToken (properties)', () => {
  it('every in-range token parses to itself from bigint, decimal string and (when safe) number', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 1n, max: MAX_FENCING_TOKEN }), (token) => {
        expect(parseFencingToken(token)).toBe(token);
        expect(parseFencingToken(token.toString())).toBe(token);
        if (token <= BigInt(Number.MAX_SAFE_INTEGER)) expect(parseFencingToken(Number(token))).toBe(token);
      }),
    );
  });

  it('every out-of-range bigint is rejected', () => {
    const outOfRange = fc.oneof(fc.bigInt({ max: 0n }), fc.bigInt({ min: MAX_FENCING_TOKEN + 1n }));
    fc.assert(
      fc.property(outOfRange, (token) => {
        expect(() => parseFencingToken(token)).toThrow(InvalidArgumentError);
        expect(() => parseFencingToken(token.toString())).toThrow(InvalidArgumentError);
      }),
    );
  });

  it('an arbitrary string is either rejected or parsed exactly as its digits say', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 24 }), (s) => {
        let parsed: bigint | undefined;
        try {
          parsed = parseFencingToken(s);
        } catch (error) {
          expect(error).toBeInstanceOf(InvalidArgumentError);
          return;
        }
        expect(s).toMatch(/^[0-9]+$/);
        expect(parsed).toBe(BigInt(s));
        expect(parsed >= 1n && parsed <= MAX_FENCING_TOKEN).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('a number is accepted exactly when it is a positive safe integer', () => {
    fc.assert(
      fc.property(fc.double(), (n) => {
        const ok = Number.isSafeInteger(n) && n > 0;
        if (ok) expect(parseFencingToken(n)).toBe(BigInt(n));
        else expect(() => parseFencingToken(n)).toThrow(InvalidArgumentError);
      }),
      { numRuns: 2000 },
    );
  });
});
