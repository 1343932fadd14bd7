import { EventEmitter } from 'node:events';
import { TransportError } from '@dlock/core';
import { FakeClock } from '@dlock/testing';
import { beforeEach, describe, expect, it } from 'vitest';
import type { LeaseClientLike, LeaseKeepAliveResponseLike } from './client-like.js';
import { KeepAliveChannel } from './etcd-session-keepalive.js';
import { EtcdRequests } from './requests.js';

/** A stand-in for the gRPC duplex stream: records writes, and the test plays etcd's answers. */
class FakeStream extends EventEmitter {
  readonly written: { ID?: string }[] = [];
  readonly calls: string[] = [];
  write(item: { ID?: string }): void {
    this.written.push(item);
  }
  end(): void {
    this.calls.push('end');
  }
  cancel(): void {
    this.calls.push('cancel');
  }
  answer(ID: string, TTL: string): void {
    this.emit('data', { ID, TTL } satisfies LeaseKeepAliveResponseLike);
  }
}

function fakeLeaseClient() {
  const streams: FakeStream[] = [];
  const client: LeaseClientLike = {
    leaseGrant: () => Promise.reject(new Error('unused')),
    leaseRevoke: () => Promise.reject(new Error('unused')),
    leaseKeepAlive: async () => {
      const stream = new FakeStream();
      streams.push(stream);
      return stream;
    },
  };
  return { client, streams };
}

describe('KeepAliveChannel', () => {
  let clock: FakeClock;
  beforeEach(() => {
    clock = new FakeClock();
  });

  it('matches answers to requests per lease id, in order, over one stream', async () => {
    const { client, streams } = fakeLeaseClient();
    const channel = new KeepAliveChannel(client, new EtcdRequests(clock, 1_000));
    const a1 = channel.keepAlive('1');
    const b = channel.keepAlive('2');
    const a2 = channel.keepAlive('1');
    await clock.advance(0);
    expect(streams).toHaveLength(1);
    const stream = streams[0] as FakeStream;
    expect(stream.written.map((w) => w.ID)).toEqual(['1', '2', '1']);
    stream.answer('2', '7');
    stream.answer('1', '5');
    stream.answer('1', '0');
    await expect(b).resolves.toBe(7);
    await expect(a1).resolves.toBe(5);
    // TTL 0 is etcd's way of saying the lease does not exist.
    await expect(a2).resolves.toBe(0);
    channel.close();
  });

  it('discards the whole stream after a timeout, so a late answer never counts for a newer request', async () => {
    const { client, streams } = fakeLeaseClient();
    const channel = new KeepAliveChannel(client, new EtcdRequests(clock, 1_000));
    const first = channel.keepAlive('1');
    const firstResult = first.catch((error: unknown) => error);
    await clock.advance(1_000);
    expect(await firstResult).toBeInstanceOf(TransportError);
    const old = streams[0] as FakeStream;
    // Half-closed before cancelled (see closeStream).
    expect(old.calls).toEqual(['end', 'cancel']);
    const second = channel.keepAlive('1');
    await clock.advance(0);
    expect(streams).toHaveLength(2);
    old.answer('1', '5'); // the stale answer to the first request
    let settled = false;
    second.then(
      () => {
        settled = true;
      },
      () => {},
    );
    await clock.advance(0);
    expect(settled).toBe(false);
    (streams[1] as FakeStream).answer('1', '6');
    await expect(second).resolves.toBe(6);
    channel.close();
  });

  it('fails every pending request when the stream errors, and reopens on the next one', async () => {
    const { client, streams } = fakeLeaseClient();
    const channel = new KeepAliveChannel(client, new EtcdRequests(clock, 1_000));
    const pending = [channel.keepAlive('1'), channel.keepAlive('2')].map((p) => p.catch((e: unknown) => e));
    await clock.advance(0);
    (streams[0] as FakeStream).emit('error', new Error('connection reset'));
    for (const result of await Promise.all(pending)) expect(result).toBeInstanceOf(TransportError);
    const next = channel.keepAlive('1');
    await clock.advance(0);
    (streams[1] as FakeStream).answer('1', '3');
    await expect(next).resolves.toBe(3);
    channel.close();
    await expect(channel.keepAlive('1')).rejects.toBeInstanceOf(TransportError);
  });

  it('closes an idle stream so it does not keep the process alive', async () => {
    const { client, streams } = fakeLeaseClient();
    const channel = new KeepAliveChannel(client, new EtcdRequests(clock, 1_000));
    const done = channel.keepAlive('1');
    await clock.advance(0);
    (streams[0] as FakeStream).answer('1', '2');
    await done;
    expect((streams[0] as FakeStream).calls).toEqual([]);
    await clock.advance(2_000);
    expect((streams[0] as FakeStream).calls).toEqual(['end', 'cancel']);
    channel.close();
  });
});
