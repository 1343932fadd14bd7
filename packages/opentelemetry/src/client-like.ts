import type { LockEventListener, LockEventType } from '@dlock/core';

/** The part of a `LockClient` this package uses: its event stream. The client is the caller's. */
export interface InstrumentableClient {
  /** The client's event emitter; `instrument` listens to its acquire, release, loss and renewal events. */
  readonly events: {
    /** Adds `listener` for events of `type`; returns the function that removes it. */
    on<K extends LockEventType>(type: K, listener: LockEventListener<K>): () => void;
  };
}

export function isInstrumentable(value: unknown): value is InstrumentableClient {
  if (typeof value !== 'object' || value === null) return false;
  const events = (value as { events?: unknown }).events;
  return (
    typeof events === 'object' && events !== null && typeof (events as { on?: unknown }).on === 'function'
  );
}
