import { EventEmitter } from 'node:events';
import { FakeClock } from '@dlock/testing';
import { beforeEach, describe, expect, it } from 'vitest';
import { ChangeFeeds } from './change-feeds.js';
import type { WatchClientLike, WatchRequestLike, WatchResponseLike } from './client-like.js';
import { EtcdReleaseWatch } from './etcd-release-watch.js';
import { lockDirectory } from './keys.js';
import { EtcdRequests } from './requests.js';

class FakeWatchStream extends EventEmitter {
  readonly written: WatchRequestLike[] = [];
  write(item: WatchRequestLike): void {
    this.written.push(item);
  }
  end(): void {}
  cancel(): void {}
  reply(response: Partial<WatchResponseLike>): void {
    this.emit('data', {
      header: { revision: '100' },
      watch_id: '0',
      created: false,
      canceled: false,
      compact_revision: '0',
      events: [],
      ...response,
    } satisfies WatchResponseLike);
  }
  get creates() {
    return this.written.flatMap((w) => (w.create_request ? [w.create_request] : []));
  }
  get cancels() {
    return this.written.flatMap((w) => (w.cancel_request ? [w.cancel_request] : []));
  }
}

const kv = (key: string, revision: number) => ({
  key: Buffer.from(key),
  create_revision: String(revision),
  mod_revision: String(revision),
  lease: '0',
});

describe('ChangeFeeds', () => {
  let clock: FakeClock;
  let streams: FakeWatchStream[];
  let hub: EtcdReleaseWatch;
  let feeds: ChangeFeeds;
  beforeEach(() => {
    clock = new FakeClock();
    streams = [];
    const client: WatchClientLike = {
      watch: async () => {
        const stream = new FakeWatchStream();
        streams.push(stream);
        return stream;
      },
    };
    hub = new EtcdReleaseWatch(client, new EtcdRequests(clock, 1_000));
    feeds = new ChangeFeeds(hub, 'p/');
  });

  it('shares one watch of the directory, puts included, among the subscribers of a name', async () => {
    const told = { a: 0, b: 0, other: 0 };
    const stopA = feeds.subscribe('job', () => told.a++);
    const stopB = feeds.subscribe('job', () => told.b++);
    feeds.subscribe('other', () => told.other++);
    await clock.advance(0);
    const stream = streams[0] as FakeWatchStream;
    expect(streams).toHaveLength(1);
    expect(stream.creates).toHaveLength(2);
    const job = stream.creates[0];
    expect(job?.key).toEqual(lockDirectory('p/', 'job'));
    expect(job?.range_end).toEqual(Buffer.from('p/job0'));
    expect(job?.filters).toBeUndefined();
    expect(feeds.size).toBe(2);

    // Told once when etcd confirms the watch: a change made before that is then read.
    stream.reply({ watch_id: job?.watch_id ?? '', created: true });
    expect(told).toEqual({ a: 1, b: 1, other: 0 });
    // A metadata update is a put; a release a delete: both tell every subscriber of that name only.
    stream.reply({ watch_id: job?.watch_id ?? '', events: [{ type: 'Put', kv: kv('p/job/x_0', 7) }] });
    stream.reply({ watch_id: job?.watch_id ?? '', events: [{ type: 'Delete', kv: kv('p/job/x_0', 8) }] });
    expect(told).toEqual({ a: 3, b: 3, other: 0 });

    stopA();
    stopA();
    expect(stream.cancels).toEqual([]);
    stream.reply({ watch_id: job?.watch_id ?? '', events: [{ type: 'Put', kv: kv('p/job/y_0', 9) }] });
    expect(told).toEqual({ a: 3, b: 4, other: 0 });
    stopB();
    expect(stream.cancels).toEqual([{ watch_id: job?.watch_id }]);
    expect(feeds.size).toBe(1);

    // A later subscriber gets a watch of its own again.
    feeds.subscribe('job', () => {});
    expect(stream.creates).toHaveLength(3);
    hub.close();
  });

  it('counts the same function subscribed twice as two subscriptions', async () => {
    let told = 0;
    const onChange = (): void => {
      told++;
    };
    const stop1 = feeds.subscribe('job', onChange);
    const stop2 = feeds.subscribe('job', onChange);
    await clock.advance(0);
    const stream = streams[0] as FakeWatchStream;
    const id = stream.creates[0]?.watch_id ?? '';
    stream.reply({ watch_id: id, created: true });
    expect(told).toBe(2);
    stop1();
    expect(stream.cancels).toEqual([]);
    stop2();
    expect(stream.cancels).toHaveLength(1);
    hub.close();
  });

  it('tells every subscriber even if one throws, and again after the stream resets and the watch is back', async () => {
    let told = 0;
    feeds.subscribe('job', () => {
      throw new Error('observer bug');
    });
    feeds.subscribe('job', () => told++);
    await clock.advance(0);
    const first = streams[0] as FakeWatchStream;
    first.reply({ watch_id: first.creates[0]?.watch_id ?? '', created: true });
    expect(told).toBe(1);
    first.emit('error', new Error('reset by peer'));
    expect(told).toBe(2);
    await clock.advance(2_000);
    const second = streams[1] as FakeWatchStream;
    expect(second.creates).toHaveLength(1);
    second.reply({ watch_id: second.creates[0]?.watch_id ?? '', created: true });
    expect(told).toBe(3);
    hub.close();
  });
});
