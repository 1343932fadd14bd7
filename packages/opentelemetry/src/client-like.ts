import type { LockEventListener, LockEventType } from '@dlock/core';

/** The part of a `LockClient` this package uses: its event stream. The client is the caller's. */
export interface InstrumentableClient {
  /** The client's event emitter; `instrument` listens to its acquire, release, loss and renewal events. */
  readonly events: {
    /** Adds `listener` for events of `type`; returns the function that removes it. */
    on<K extends LockEventType>(type: K, listener: LockEventListener<K>): () => void;
  };
}

/**
 * The client's event stream, read once: a getter may answer differently the next time, and one that throws (or a
 * Proxy's trap) must not reach the caller as anything but "not a client". `undefined` when it is no stream.
 */
export function eventsOf(value: unknown): InstrumentableClient['events'] | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  try {
    const events = (value as { events?: unknown }).events;
    if (typeof events !== 'object' || events === null) return undefined;
    return typeof (events as { on?: unknown }).on === 'function'
      ? (events as InstrumentableClient['events'])
      : undefined;
  } catch {
    return undefined;
  }
}
