import { describe, expect, it } from 'vitest';
import { Slots } from './slots.js';

describe('Slots', () => {
  it('hands out the lowest free slot per name and forgets idle names', () => {
    const slots = new Slots();
    expect([slots.take('a'), slots.take('a'), slots.take('b'), slots.take('a')]).toEqual([0, 1, 0, 2]);
    slots.free('a', 1);
    expect(slots.take('a')).toBe(1);
    for (const slot of [0, 1, 2]) slots.free('a', slot);
    expect(slots.inUse('a')).toBe(0);
    slots.free('a', 0); // freeing twice is harmless
    expect(slots.take('a')).toBe(0);
  });
});
