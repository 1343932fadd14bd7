import {
  LockClient,
  type LockClientOptions,
  type LockEventMap,
  type LockEventType,
  MemoryLockService,
} from '@dlock/core';
import { FakeClock, FaultyLockService } from '@dlock/testing';

/** A client on a FakeClock over a fault-switchable in-memory service, with every event recorded. */
export function harness(options: LockClientOptions = {}, seed = 1) {
  const clock = new FakeClock({ seed });
  const memory = new MemoryLockService({ clock });
  const faulty = new FaultyLockService(memory, { clock });
  const events: { type: LockEventType; event: LockEventMap[LockEventType] }[] = [];
  const clients: LockClient[] = [];
  const makeClient = (extra: LockClientOptions = {}): LockClient => {
    const client = new LockClient(faulty, { clock, ...options, ...extra });
    for (const type of [
      'acquired',
      'renewed',
      'renew-failed',
      'lost',
      'released',
      'callback-error',
    ] as const) {
      client.events.on(type, (event) => events.push({ type, event }));
    }
    clients.push(client);
    return client;
  };
  const client = makeClient();
  const eventsOf = <K extends LockEventType>(type: K): LockEventMap[K][] =>
    events.filter((e) => e.type === type).map((e) => e.event as LockEventMap[K]);
  return { clock, memory, faulty, client, makeClient, events, eventsOf, clients };
}

/** Settles a promise's outcome without letting a rejection go unhandled. */
export function outcome<T>(promise: Promise<T>): {
  readonly value?: T;
  readonly error?: unknown;
  readonly done: boolean;
} {
  const state: { value?: T; error?: unknown; done: boolean } = { done: false };
  promise.then(
    (value) => {
      state.value = value;
      state.done = true;
    },
    (error: unknown) => {
      state.error = error;
      state.done = true;
    },
  );
  return state;
}
