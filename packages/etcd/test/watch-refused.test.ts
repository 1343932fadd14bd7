import { LockClient } from '@dlock/core';
import { EtcdLockService } from '@dlock/etcd';
import { startEtcdCluster } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { countingClient, sleep, waitUntil } from './helpers.js';
import { startRestartableEtcd } from './restartable-etcd.js';

// A private one-member cluster: this test enables authentication, which the shared etcd's other tests must not see.

const PREFIX = 'refused/';

describe('a watch etcd refuses', () => {
  it('tells its subscriber, re-checks at a bounded rate, and resets the other watches of the stream at most once', {
    timeout: 30_000,
  }, async () => {
    const cluster = await startEtcdCluster({ size: 1 });
    const admin = new Etcd3({ hosts: [...cluster.endpoints] });
    let user: Etcd3 | undefined;
    let service: EtcdLockService | undefined;
    try {
      // The user may read and write the directory of lock "open" only: watching lock "closed" is refused.
      const role = await admin.role('open-only').create();
      await role.grant({
        permission: 'Readwrite',
        range: admin.range({ prefix: `${PREFIX}${escapeName('open')}/` }),
      });
      await (await admin.user('limited').create('limited-pw')).addRole(role);
      await (await admin.user('root').create('root-pw')).addRole('root');
      await admin.auth.authEnable({});
      user = new Etcd3({
        hosts: [...cluster.endpoints],
        auth: { username: 'limited', password: 'limited-pw' },
      });
      service = new EtcdLockService({ client: user, keyPrefix: PREFIX });

      let openNotices = 0;
      let closedNotices = 0;
      let closedChanges = 0;
      // Same tick, same stream: the refused create is answered between the two permitted ones.
      const unwatchOpen = service.watch('open', () => {
        openNotices += 1;
      });
      const unwatchClosed = service.watch('closed', () => {
        closedNotices += 1;
      });
      const unwatchChanges = service.watchChanges('closed', () => {
        closedChanges += 1;
      });
      try {
        expect(await waitUntil(() => closedNotices > 0 && closedChanges > 0, 5_000)).toBe(true);
        // A first refusal renews the stream once (its token may have gone stale): the permitted watch is reset at
        // most that once. Refused again on the new stream, the watch is tried again with backoff, not in a loop (a
        // loop tells thousands of times a second, the backoff, at most 2 s, a handful), and on that stream alone.
        await sleep(1_000);
        const openBefore = openNotices;
        expect(openBefore).toBeLessThanOrEqual(1);
        const before = closedNotices;
        await sleep(1_000);
        expect(closedNotices - before).toBeLessThan(20);
        expect(openNotices).toBe(openBefore);
        // The permitted watch still works: it hears the delete of a key in its directory.
        await user.put(`${PREFIX}${escapeName('open')}/k`).value('v');
        await user.delete().key(`${PREFIX}${escapeName('open')}/k`);
        expect(await waitUntil(() => openNotices > openBefore, 5_000)).toBe(true);
      } finally {
        unwatchOpen();
        unwatchClosed();
        unwatchChanges();
      }
    } finally {
      await service?.close();
      user?.close();
      admin.close();
      await cluster.stop();
    }
  });

  it('renews the stream when its token went stale, so a queued waiter waits on its watch, not in a loop', {
    timeout: 30_000,
  }, async () => {
    // etcd checks a watch create against the token the stream was opened with; a token unused for
    // --auth-token-ttl seconds is dropped, and etcd3 re-authenticates its unary calls only. Every create on the old
    // stream is then refused, while the waiter's re-checks (unary) go through.
    const member = await startRestartableEtcd(['--auth-token-ttl', '2']);
    const admin = new Etcd3({ hosts: member.endpoint });
    const auth = { username: 'root', password: 'root-pw' };
    let holderEtcd: Etcd3 | undefined;
    let holder: LockClient | undefined;
    let user: Etcd3 | undefined;
    let waiter: LockClient | undefined;
    try {
      await (await admin.user('root').create('root-pw')).addRole('root');
      await admin.auth.authEnable({});
      holderEtcd = new Etcd3({ hosts: member.endpoint, auth });
      holder = new LockClient(new EtcdLockService({ client: holderEtcd, keyPrefix: PREFIX }));
      const held = await holder.acquire('busy', { ttlMs: 20_000 });
      user = new Etcd3({ hosts: member.endpoint, auth });
      const { client, counts } = countingClient(user);
      const service = new EtcdLockService({ client, keyPrefix: PREFIX });
      waiter = new LockClient(service);
      // An observer keeps the service's watch stream open while its token goes stale.
      let changes = 0;
      const unwatch = service.watchChanges('other', () => {
        changes += 1;
      });
      expect(await waitUntil(() => changes > 0, 5_000)).toBe(true);
      await sleep(4_000);
      const before = counts.recheck;
      const waiting = waiter.acquire('busy', { ttlMs: 20_000, waitMs: 20_000 });
      await sleep(2_000);
      // On a watch: a re-check per wake-up (the refusal, the renewed stream's reset), not one per refused create.
      // Before, the waiter's watch was refused again at each sleep: 150 re-checks in these 2 s.
      expect(counts.recheck - before).toBeLessThan(20);
      await held.release();
      const handle = await waiting;
      await handle.release();
      unwatch();
    } finally {
      await waiter?.close();
      await holder?.close();
      user?.close();
      holderEtcd?.close();
      admin.close();
      await member.stop();
    }
  });
});
