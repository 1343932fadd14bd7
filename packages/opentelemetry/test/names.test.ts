import { describe, expect, it } from 'vitest';
import { ATTRIBUTES as A, METRICS as M, SPANS } from '../src/index.js';
import { setup } from './otel.js';

const TTL = 3_000;

describe('the name attribute', () => {
  it('is off by default: no metric point and no span carries a name or a slot', async () => {
    const { client, clock, metrics, spans } = setup();
    for (let job = 0; job < 20; job += 1) {
      const handle = await client.acquire(`job:${job}`, { ttlMs: TTL });
      await clock.advance(TTL);
      await handle.release();
    }
    const permit = await client.semaphore('pool', { permits: 2, ttlMs: TTL }).acquire();
    await permit.release();
    const all = await metrics();
    expect([...all.keys()].sort()).toEqual([M.acquireWait, M.holdDuration, M.held, M.renewals].sort());
    for (const metric of all.values()) {
      for (const point of metric.dataPoints) {
        expect(point.attributes).not.toHaveProperty(A.name);
        expect(point.attributes).not.toHaveProperty(A.slot);
      }
      // Twenty job names, one series per kind (and outcome): names do not make series.
      expect(metric.dataPoints.length).toBeLessThanOrEqual(2);
    }
    for (const span of spans()) {
      expect(span.attributes).not.toHaveProperty(A.name);
      expect(span.attributes).not.toHaveProperty(A.slot);
    }
  });

  it('mapped: names that map alike share a series; undefined leaves the name out; a throw too', async () => {
    const { client, points, spans } = setup({
      nameAttribute: (name) => {
        if (name.startsWith('bad')) throw new Error('mapping bug');
        return name.startsWith('invoice:') ? 'invoice' : undefined;
      },
    });
    await client.acquire('invoice:1', { ttlMs: TTL });
    await client.acquire('invoice:2', { ttlMs: TTL });
    await client.acquire('tenant-42', { ttlMs: TTL });
    await client.acquire('bad:1', { ttlMs: TTL });
    expect(await points(M.held)).toEqual([
      { attributes: { [A.kind]: 'lock', [A.name]: 'invoice' }, value: 2 },
      { attributes: { [A.kind]: 'lock' }, value: 2 },
    ]);
    expect(spans(SPANS.acquire).map((s) => s.attributes[A.name])).toEqual([
      'invoice',
      'invoice',
      undefined,
      undefined,
    ]);
  });

  it("mapped: a permit's slot joins the name", async () => {
    const { client, points, spans } = setup({ nameAttribute: (name) => name });
    const pool = client.semaphore('pool', { permits: 2, ttlMs: TTL });
    const first = await pool.acquire();
    const second = await pool.acquire();
    const slots = (await points(M.held)).map((p) => p.attributes);
    expect(slots).toEqual([
      { [A.kind]: 'permit', [A.name]: 'pool', [A.slot]: first.slot },
      { [A.kind]: 'permit', [A.name]: 'pool', [A.slot]: second.slot },
    ]);
    expect(spans(SPANS.acquire)[0]?.attributes).toMatchObject({ [A.name]: 'pool', [A.slot]: first.slot });
  });
});
