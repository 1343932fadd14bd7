import { EventEmitter } from 'node:events';
import { FakeClock } from '@dlock/testing';
import { beforeEach, describe, expect, it } from 'vitest';
import type { WatchClientLike, WatchRequestLike, WatchResponseLike } from './client-like.js';
import { EtcdReleaseWatch } from './etcd-release-watch.js';
import { EtcdRequests } from './requests.js';

class FakeWatchStream extends EventEmitter {
  readonly written: WatchRequestLike[] = [];
  ended = false;
  write(item: WatchRequestLike): void {
    this.written.push(item);
  }
  end(): void {
    this.ended = true;
  }
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
}

const kv = (key: string, modRevision: number) => ({
  key: Buffer.from(key),
  create_revision: '1',
  mod_revision: String(modRevision),
  lease: '0',
});

function fakeWatchClient() {
  const streams: FakeWatchStream[] = [];
  const client: WatchClientLike = {
    watch: async () => {
      const stream = new FakeWatchStream();
      streams.push(stream);
      return stream;
    },
  };
  return { client, streams };
}

describe('EtcdReleaseWatch', () => {
  let clock: FakeClock;
  beforeEach(() => {
    clock = new FakeClock();
  });

  it('creates watches with its own ids and routes delete events by id', async () => {
    const { client, streams } = fakeWatchClient();
    const hub = new EtcdReleaseWatch(client, new EtcdRequests(clock, 1_000));
    const a: string[] = [];
    const b: string[] = [];
    hub.watch(
      { key: Buffer.from('a'), startRevision: 10n },
      { onDeletes: (e) => a.push(...e.map((x) => `${x.kv.key}`)) },
    );
    hub.watch({ key: Buffer.from('b') }, { onDeletes: (e) => b.push(...e.map((x) => `${x.kv.key}`)) });
    await clock.advance(0);
    const stream = streams[0] as FakeWatchStream;
    const creates = stream.written.map((w) => w.create_request);
    expect(creates.map((c) => c?.watch_id)).toEqual(['1', '2']);
    // One revision early: a compaction at exactly 10 then cancels the watch instead of hiding a delete at 10.
    expect(creates[0]?.start_revision).toBe('9');
    expect(creates[1]?.start_revision).toBeUndefined();
    expect(creates.every((c) => c?.filters?.includes('Noput'))).toBe(true);
    stream.reply({ watch_id: '2', events: [{ type: 'Delete', kv: kv('b', 12) }] });
    stream.reply({ watch_id: '1', events: [{ type: 'Put', kv: kv('a', 13) }] });
    // The revision before the one asked for is not reported.
    stream.reply({ watch_id: '1', events: [{ type: 'Delete', kv: kv('a', 9) }] });
    expect(a).toEqual([]);
    stream.reply({ watch_id: '1', events: [{ type: 'Delete', kv: kv('a', 14) }] });
    expect(a).toEqual(['a']);
    expect(b).toEqual(['b']);
    hub.close();
  });

  it('after a broken stream, tells every watch and re-creates it from the revision after its last event', async () => {
    const { client, streams } = fakeWatchClient();
    const hub = new EtcdReleaseWatch(client, new EtcdRequests(clock, 1_000));
    let resets = 0;
    let deletes = 0;
    hub.watch(
      { key: Buffer.from('a'), startRevision: 10n },
      { onDeletes: () => deletes++, onReset: () => resets++ },
    );
    await clock.advance(0);
    const first = streams[0] as FakeWatchStream;
    first.reply({ watch_id: '1', events: [{ type: 'Delete', kv: kv('a', 41) }] });
    first.emit('error', new Error('reset by peer'));
    expect(resets).toBe(1);
    await clock.advance(2_000);
    expect(streams).toHaveLength(2);
    const recreated = (streams[1] as FakeWatchStream).written[0]?.create_request;
    expect(recreated?.start_revision).toBe('41');
    // The replayed revision 41 reaches nobody: its delete was reported on the old stream.
    const replay = {
      watch_id: recreated?.watch_id ?? '',
      events: [{ type: 'Delete' as const, kv: kv('a', 41) }],
    };
    (streams[1] as FakeWatchStream).reply(replay);
    expect(deletes).toBe(1);
    expect(recreated?.watch_id).not.toBe('1');
    // An answer for the old id on the old stream reaches nobody.
    first.reply({ watch_id: '1', events: [{ type: 'Delete', kv: kv('a', 43) }] });
    expect(deletes).toBe(1);
    hub.close();
  });

  it('re-creates a watch etcd cancelled (e.g. compacted) from now, after telling its owner', async () => {
    const { client, streams } = fakeWatchClient();
    const hub = new EtcdReleaseWatch(client, new EtcdRequests(clock, 1_000));
    let resets = 0;
    hub.watch({ key: Buffer.from('a'), startRevision: 3n }, { onDeletes: () => {}, onReset: () => resets++ });
    await clock.advance(0);
    const stream = streams[0] as FakeWatchStream;
    stream.reply({ watch_id: '1', created: true, canceled: true, compact_revision: '50' });
    expect(resets).toBe(1);
    const again = stream.written[1]?.create_request;
    expect(again?.watch_id).toBe('2');
    expect(again?.start_revision).toBeUndefined();
    hub.close();
  });

  it('cancels on the server, ignores later events, and closes the stream once idle', async () => {
    const { client, streams } = fakeWatchClient();
    const hub = new EtcdReleaseWatch(client, new EtcdRequests(clock, 1_000));
    let deletes = 0;
    const cancel = hub.watch({ key: Buffer.from('a') }, { onDeletes: () => deletes++ });
    await clock.advance(0);
    const stream = streams[0] as FakeWatchStream;
    cancel();
    cancel();
    expect(stream.written.filter((w) => w.cancel_request)).toEqual([{ cancel_request: { watch_id: '1' } }]);
    stream.reply({ watch_id: '1', events: [{ type: 'Delete', kv: kv('a', 5) }] });
    expect(deletes).toBe(0);
    expect(stream.ended).toBe(false);
    await clock.advance(2_000);
    expect(stream.ended).toBe(true);
    hub.close();
  });
});
