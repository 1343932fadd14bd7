import { systemClock } from '@dlock/core';
import { type RedisServer, startRedisServer } from '@dlock/test-utils';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionOf } from '../src/clients/detect.js';
import { redlockKeys } from '../src/keys.js';
import type { NodeRenew, RedlockNode } from '../src/redlock/node.js';
import { RedisRedlockNode } from '../src/redlock/redis-node.js';
import { QuorumLock } from '../src/redlock/redlock-protocol.js';

// A renewal's answers belong to the node that gave them: what it does next with one (confirming a re-taken key)
// must reach that node, whatever another node's call did. Four private redis-servers and one node that is not a
// server, so that a renewal is confirmed (3 of 5 extended) while one server answers `retaken`.
type Client = ReturnType<typeof createClient>;

const PREFIX = 'dlock:redlock:';
const servers: RedisServer[] = [];
const clients: Client[] = [];

beforeAll(async () => {
  servers.push(...(await Promise.all([0, 1, 2, 3].map(() => startRedisServer()))));
  for (const server of servers) {
    const client = createClient({ url: server.url, socket: { reconnectStrategy: false } });
    client.on('error', () => {});
    await client.connect();
    clients.push(client);
  }
}, 30_000);

afterAll(async () => {
  for (const client of clients) client.destroy();
  await Promise.all(servers.map((s) => s.process.stop()));
});

function realNode(index: number): RedisRedlockNode {
  return new RedisRedlockNode(
    connectionOf(clients[index], 'client', { allowCluster: false, clock: systemClock }),
    { prefix: PREFIX, fenceRetentionMs: 60_000, label: `node ${index}` },
  );
}

describe('QuorumLock renewals on real nodes', () => {
  it("a node whose renew throws synchronously does not shift another node's answer onto it", async () => {
    const refused = (): Promise<never> => Promise.reject(new Error('this node is down'));
    const throwing: RedlockNode = {
      acquire: refused,
      mint: refused,
      renew: () => {
        throw new Error('renew threw before returning a promise');
      },
      release: refused,
      confirm: refused,
    };
    const real = [0, 1, 2, 3].map(realNode);
    const [a, b, c, d] = real as [RedlockNode, RedlockNode, RedlockNode, RedisRedlockNode];
    const lock = new QuorumLock({
      nodes: [a, throwing, b, c, d],
      nodeTimeoutMs: 1_000,
      clock: systemClock,
      newOwnershipToken: () => `owner-${Date.now()}`,
    });
    const name = `renew-answers-${Date.now()}`;
    const granted = await lock.acquire({
      name,
      ownerId: 'test',
      ttlMs: 30_000,
      waitMs: 0,
      signal: new AbortController().signal,
    });
    if (!granted.acquired) throw new Error('not granted');
    const lease = { name, ownerId: 'test', ...granted.grant };
    // The last node loses the key (a restart, an eviction): the renewal re-takes it there, marked until confirmed.
    await (clients[3] as Client).del(redlockKeys(PREFIX, name).lock);
    expect(await lock.renew([{ lease, ttlMs: 30_000 }])).toEqual([{ renewed: true }]);
    // The majority confirmed the renewal, so the key the last node re-took is confirmed there, in the background.
    // Before the fix the confirmation went to the node before it (its answers were taken for that node's), and the
    // key stayed marked: every later renewal counted it against the lease.
    const item: NodeRenew = { ...lease, ttlMs: 30_000 };
    const signal = new AbortController().signal;
    const deadline = Date.now() + 2_000;
    let reply = await d.renew([item], signal);
    while (reply[0] !== 'extended' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      reply = await d.renew([item], signal);
    }
    expect(reply).toEqual(['extended']);
    lock.close();
  });
});
