import { Etcd3 } from 'etcd3';
import { describe, expect, it } from 'vitest';
import type { EtcdClientLike } from '../src/client-like.js';
import { EtcdLockService } from '../src/index.js';

describe('EtcdClientLike', () => {
  it('is satisfied by an etcd3 client as it is (checked by the compiler)', () => {
    const client = new Etcd3({ hosts: '127.0.0.1:1' });
    try {
      const like: EtcdClientLike = client;
      expect(typeof like.kv.txn).toBe('function');
      expect(new EtcdLockService({ client }).sessionMode).toBe(false);
    } finally {
      client.close();
    }
  });
});
