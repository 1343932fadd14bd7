import { describe, expect, it } from 'vitest';
import { propertyRuns, propertySeed } from './property-env.js';

describe('property test settings from the environment', () => {
  it('takes a whole number, or the fallback when unset', () => {
    expect(propertySeed(7, {})).toBe(7);
    expect(propertySeed(7, { DLOCK_PROPERTY_SEED: '42' })).toBe(42);
    expect(propertySeed(7, { DLOCK_PROPERTY_SEED: ' -2147483648 ' })).toBe(-(2 ** 31));
    expect(propertyRuns(500, {})).toBe(500);
    expect(propertyRuns(500, { DLOCK_PROPERTY_RUNS: '20' })).toBe(20);
  });

  it('refuses anything else by name, rather than running on NaN or a seed nobody set', () => {
    for (const bad of ['abc', '', '12abc', '1.5', '1e3', '0x10', 'NaN', '2147483648']) {
      expect
        .soft(() => propertySeed(7, { DLOCK_PROPERTY_SEED: bad }))
        .toThrow(
          `DLOCK_PROPERTY_SEED must be a whole number from -2147483648 to 2147483647, got ${JSON.stringify(bad)}`,
        );
    }
    for (const bad of ['abc', '', '0', '-3', '2.5']) {
      expect
        .soft(() => propertyRuns(500, { DLOCK_PROPERTY_RUNS: bad }))
        .toThrow(/^DLOCK_PROPERTY_RUNS must be/);
    }
  });
});
