import { EtcdLockService } from '@dlock/etcd';
import { startEtcdCluster } from '@dlock/test-utils';
import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import { escapeName } from '../src/keys.js';
import { sleep, waitUntil } from './helpers.js';

// A private one-member cluster: this test enables authentication, which the shared etcd's other tests must not see.

const PREFIX = 'refused/';

describe('a watch etcd refuses', () => {
  it('tells its subscriber, re-checks at a bounded rate, and leaves the other watches of the stream alone', {
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
        // The permitted watch was neither told nor broken: it hears the delete of a key in its directory.
        expect(openNotices).toBe(0);
        await user.put(`${PREFIX}${escapeName('open')}/k`).value('v');
        await user.delete().key(`${PREFIX}${escapeName('open')}/k`);
        expect(await waitUntil(() => openNotices > 0, 5_000)).toBe(true);
        // Still refused, the watch is tried again with backoff, not in a loop: a loop tells thousands of times a
        // second, the backoff (at most 2 s) a handful.
        const before = closedNotices;
        await sleep(1_000);
        expect(closedNotices - before).toBeLessThan(20);
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
});
