import { describe, expect, it } from 'vitest';
import {
  attemptPrefix,
  encodeLockName,
  isNodeOfAttempt,
  isQueueNode,
  lockParentPath,
  queueOrder,
  validRoot,
} from './keys.js';

const id = (c: string): string => c.repeat(32);

describe('keys', () => {
  it('keeps plain names readable and escapes the rest byte by byte', () => {
    expect(encodeLockName('invoice:42')).toBe('invoice:42');
    expect(encodeLockName('a/b')).toBe('a%2Fb');
    expect(encodeLockName('a%2Fb')).toBe('a%252Fb');
    expect(encodeLockName('.')).toBe('%2E');
    expect(encodeLockName('..')).toBe('%2E.');
    expect(encodeLockName('.hidden')).toBe('%2Ehidden');
    expect(encodeLockName('x.y')).toBe('x.y');
    expect(encodeLockName('é')).toBe('%C3%A9');
    expect(encodeLockName('🔒')).toBe('%F0%9F%94%92');
    expect(lockParentPath('/dlock', 'with space')).toBe('/dlock/with%20space');
  });

  it('names one attempt and orders the queue by sequence number', () => {
    const prefix = attemptPrefix('/dlock/x', id('a'));
    expect(prefix).toBe(`/dlock/x/_c_${id('a')}-`);
    const mine = `_c_${id('a')}-0000000010`;
    expect(isQueueNode(mine)).toBe(true);
    expect(isNodeOfAttempt(mine, id('a'))).toBe(true);
    expect(isNodeOfAttempt(mine, id('b'))).toBe(false);
    expect(isQueueNode('lock-0000000001')).toBe(false);
    expect(isQueueNode(`_c_${id('a')}-000000001`)).toBe(false);
    const children = [`_c_${id('b')}-0000000011`, 'unrelated', mine, `_c_${id('c')}-0000000002`];
    expect(queueOrder(children)).toEqual([`_c_${id('c')}-0000000002`, mine, `_c_${id('b')}-0000000011`]);
  });

  it('accepts only absolute roots outside /zookeeper', () => {
    expect(validRoot('/dlock')).toBe(true);
    expect(validRoot('/apps/locks')).toBe(true);
    for (const bad of [
      '',
      '/',
      'dlock',
      '/dlock/',
      '/a//b',
      '/zookeeper',
      '/zookeeper/x',
      '/a/./b',
      '/a/../b',
      '/a\u0000',
    ]) {
      expect(validRoot(bad)).toBe(false);
    }
  });
});
