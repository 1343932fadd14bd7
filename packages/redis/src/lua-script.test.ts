import { describe, expect, it } from 'vitest';
import { LuaScript } from './lua-script.js';

describe('LuaScript', () => {
  const noScript = (): Error => new Error('NOSCRIPT No matching script. Please use EVAL.');

  it('re-sends the source after NOSCRIPT, unless the call was given up meanwhile', async () => {
    const script = new LuaScript('return 1');
    const sent: string[] = [];
    const send = async (args: string[]): Promise<unknown> => {
      sent.push(args[0] as string);
      if (args[0] === 'EVALSHA') throw noScript();
      return 1;
    };
    await expect(script.run(send, ['k'], ['a'])).resolves.toBe(1);
    expect(sent).toEqual(['EVALSHA', 'EVAL']);
    sent.length = 0;
    // A script that ran after the caller's clean-up would undo it: nothing more is sent.
    await expect(script.run(send, ['k'], ['a'], { abandoned: true })).rejects.toThrow('NOSCRIPT');
    expect(sent).toEqual(['EVALSHA']);
  });

  it('sends clean-ups whole, never by SHA', async () => {
    const script = new LuaScript('return 2');
    const sent: string[][] = [];
    await script.runWhole(
      async (args) => {
        sent.push(args);
        return 0;
      },
      ['k1', 'k2'],
      ['x'],
    );
    expect(sent).toEqual([['EVAL', 'return 2', '2', 'k1', 'k2', 'x']]);
  });
});
