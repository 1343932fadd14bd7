import { LockClient, type Permit, type Semaphore } from '@dlock/core';
import type { ContractSubject } from '@dlock/testing/contract';
import { expect } from 'vitest';
import { type RedisClientLike, RedisLockService } from '../src/index.js';
import type { Connected } from './clients.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Six waiters queue in a known order on a full semaphore of 2 permits (each made by `semaphore()`, another client
 * each, as separate processes would be); as the holders release one at a time, each release hands its slot to the
 * next waiter in that order and to no one else.
 */
export async function servesSixWaitersInOrder(semaphore: () => Semaphore): Promise<void> {
  const held = [await semaphore().acquire(), await semaphore().acquire()];
  const order: number[] = [];
  const waiters: Promise<Permit>[] = [];
  for (let i = 0; i < 6; i++) {
    waiters.push(
      semaphore()
        .acquire({ waitMs: 10_000 })
        .then((permit) => {
          order.push(i);
          return permit;
        }),
    );
    await sleep(30); // each one queued before the next arrives
  }
  for (let round = 0; round < 6; round++) {
    const releasing = held.shift() as Permit;
    await releasing.release();
    const next = await (waiters[round] as Promise<Permit>);
    expect(next.slot).toBe(releasing.slot);
    expect(next.fencingToken).toBeGreaterThan(releasing.fencingToken);
    held.push(next);
    await sleep(20);
    // Exactly one more waiter served per release.
    expect(order).toEqual(Array.from({ length: round + 1 }, (_, i) => i));
  }
  await Promise.all(held.map((permit) => permit.release()));
}

/** A service under `keyPrefix` on `connected`, as a contract subject: `close` closes both. */
export function subjectOn(
  connected: Connected,
  keyPrefix: string,
): { readonly service: RedisLockService; close(): Promise<void> } {
  const service = new RedisLockService({
    client: connected.client as RedisClientLike,
    keyPrefix,
    fenceRetentionMs: 60_000,
  });
  return {
    service,
    close: async () => {
      await service.close();
      await connected.close();
    },
  };
}

/** The contract's way to close a subject's service (not its connection): later calls must say CLIENT_CLOSED. */
export const closeService = async (subject: ContractSubject): Promise<void> => {
  await (subject.service as RedisLockService).close();
};

/** LockClients on one service, another one per call as separate processes would be; `closeAll` after each test. */
export class ClientsOf {
  readonly #made: LockClient[] = [];
  constructor(readonly service: () => RedisLockService) {}

  make(): LockClient {
    const client = new LockClient(this.service(), { operationTimeoutMs: 2_000 });
    this.#made.push(client);
    return client;
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.#made.splice(0).map((client) => client.close()));
  }
}
