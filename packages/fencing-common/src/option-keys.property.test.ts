import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from './errors.js';
import { closestKey, rejectUnknownKeys } from './option-keys.js';

// The option lists the gates actually pass, plus a generated one.
const KNOWN_LISTS: readonly (readonly string[])[] = [
  ['table', 'schema'],
  ['isolationLevel', 'lockTimeoutMs'],
  ['table', 'schema', 'dialect', 'isolationLevel', 'lockTimeoutMs'],
  ['maxAttempts', 'baseDelayMs', 'maxDelayMs', 'signal'],
];
const knownList = fc.oneof(
  fc.constantFrom(...KNOWN_LISTS),
  fc.uniqueArray(fc.string({ minLength: 1, maxLength: 16 }), { minLength: 1, maxLength: 6 }),
);

/** Near misses of a known key (case flips, dropped, doubled and swapped letters) as well as arbitrary strings. */
function candidateKey(known: readonly string[]): fc.Arbitrary<string> {
  const nearMiss = fc
    .tuple(
      fc.constantFrom(...known),
      fc.nat(),
      fc.constantFrom('upper', 'lower', 'drop', 'double', 'swap', 'append'),
    )
    .map(([key, at, how]) => {
      const i = key.length === 0 ? 0 : at % key.length;
      switch (how) {
        case 'upper':
          return key.toUpperCase();
        case 'lower':
          return key.toLowerCase();
        case 'drop':
          return key.slice(0, i) + key.slice(i + 1);
        case 'double':
          return key.slice(0, i + 1) + key.slice(i);
        case 'swap':
          return key.slice(0, i) + key.slice(i + 1, i + 2) + key.slice(i, i + 1) + key.slice(i + 2);
        default:
          return `${key}s`;
      }
    });
  return fc.oneof(nearMiss, fc.string({ maxLength: 20 }), fc.string({ unit: 'binary', maxLength: 20 }));
}

describe('rejectUnknownKeys (properties)', () => {
  it('never refuses an object whose keys are all known, whatever the values', () => {
    fc.assert(
      fc.property(
        knownList.chain((known) =>
          fc.tuple(fc.constant(known), fc.dictionary(fc.constantFrom(...known), fc.anything())),
        ),
        ([known, options]) => {
          rejectUnknownKeys(options, 'options', known);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('always refuses a key that is not known, naming it, even beside known keys', () => {
    fc.assert(
      fc.property(
        knownList.chain((known) =>
          fc.tuple(
            fc.constant(known),
            candidateKey(known).filter((key) => !known.includes(key)),
            fc.subarray([...known]),
          ),
        ),
        ([known, unknownKey, alsoKnown]) => {
          const options: Record<string, unknown> = {};
          for (const key of alsoKnown) options[key] = 1;
          // defineProperty, so a generated "__proto__" becomes an own key as it would from JSON.parse.
          Object.defineProperty(options, unknownKey, { value: 1, enumerable: true });
          let thrown: unknown;
          try {
            rejectUnknownKeys(options, 'options', known);
          } catch (error) {
            thrown = error;
          }
          expect(thrown).toBeInstanceOf(InvalidArgumentError);
          expect(thrown).toMatchObject({ code: 'INVALID_ARGUMENT', field: `options.${unknownKey}` });
          const meant = closestKey(unknownKey, known);
          expect((thrown as Error).message.includes('did you mean')).toBe(meant !== undefined);
        },
      ),
      { numRuns: 2000 },
    );
  });
});

describe('closestKey (properties)', () => {
  it('suggests only known keys, and a known key suggests itself', () => {
    fc.assert(
      fc.property(
        knownList.chain((known) => fc.tuple(fc.constant(known), candidateKey(known))),
        ([known, typed]) => {
          const meant = closestKey(typed, known);
          if (meant !== undefined) expect(known).toContain(meant);
          if (known.includes(typed)) expect(meant?.toLowerCase()).toBe(typed.toLowerCase());
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('suggests a key spelt with the same letters when the typo only changed case', () => {
    fc.assert(
      fc.property(
        fc
          .constantFrom(...KNOWN_LISTS)
          .chain((known) =>
            fc.tuple(
              fc.constant(known),
              fc.constantFrom(...known),
              fc.array(fc.boolean(), { minLength: 16, maxLength: 16 }),
            ),
          ),
        ([known, key, flips]) => {
          const typed = [...key].map((c, i) => (flips[i] ? c.toUpperCase() : c.toLowerCase())).join('');
          expect(closestKey(typed, known)).toBe(key);
        },
      ),
    );
  });
});
