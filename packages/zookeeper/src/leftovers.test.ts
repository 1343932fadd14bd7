import { describe, expect, it } from 'vitest';
import { Leftovers } from './leftovers.js';
import type { NodeRead, Session } from './zookeeper-session.js';

/** A session that owns one node (its data names the attempt that made it) and records the deletes it is sent. */
function sessionWithNode(path: string, madeBy: string): { session: Session; removed: string[] } {
  const removed: string[] = [];
  let present = true;
  const session = {
    id: 'session-1',
    owned: false,
    readNode: async (at: string): Promise<NodeRead | null> =>
      at === path && present ? ({ data: Buffer.from(madeBy), stat: {} } as unknown as NodeRead) : null,
    remove: async (at: string): Promise<void> => {
      removed.push(at);
      present = false;
    },
  } as unknown as Session;
  return { session, removed };
}

const madeBy = (attempt: string) => (read: NodeRead) => read.data.toString() === attempt;

describe('Leftovers.addChecked', () => {
  it('deletes a node two claims left unsure, whichever of them made it', async () => {
    for (const owner of ['attempt-a', 'attempt-b']) {
      const { session, removed } = sessionWithNode('/sem/slots/0', owner);
      const leftovers = new Leftovers({ sweeperFor: () => session });
      leftovers.addChecked(session, '/sem/slots/0', madeBy('attempt-a'));
      leftovers.addChecked(session, '/sem/slots/0', madeBy('attempt-b'));
      await leftovers.sweep(session.id);
      expect(removed).toEqual(['/sem/slots/0']);
    }
  });

  it('leaves a node that none of the checks claims', async () => {
    const { session, removed } = sessionWithNode('/sem/slots/0', 'someone-else');
    const leftovers = new Leftovers({ sweeperFor: () => session });
    leftovers.addChecked(session, '/sem/slots/0', madeBy('attempt-a'));
    leftovers.addChecked(session, '/sem/slots/0', madeBy('attempt-b'));
    await leftovers.sweep(session.id);
    expect(removed).toEqual([]);
  });
});
