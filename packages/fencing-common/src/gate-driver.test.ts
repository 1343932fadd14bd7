import { describe, expect, it } from 'vitest';
import { errorProperty, markFromRows } from './gate-driver.js';

describe('markFromRows', () => {
  it('reads the text mark exactly, and null when there is no row', () => {
    expect(markFromRows([{ last_token: '9223372036854775807' }])).toBe(9_223_372_036_854_775_807n);
    expect(markFromRows([{ last_token: '7' }, { last_token: '8' }])).toBe(7n);
    expect(markFromRows([])).toBeNull();
  });
});

describe('errorProperty', () => {
  it('reads code and errno from anything a driver throws, without throwing itself', () => {
    expect(errorProperty(Object.assign(new Error('x'), { code: '40001' }), 'code')).toBe('40001');
    expect(errorProperty({ errno: 1213 }, 'errno')).toBe(1213);
    for (const thrown of [null, undefined, 'boom', 42, Symbol('s')]) {
      expect(errorProperty(thrown, 'code')).toBeUndefined();
    }
  });
});
