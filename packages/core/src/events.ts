import type { LostReason } from './errors.js';

interface EventBase {
  readonly name: string;
  readonly fencingToken: bigint;
  /** Client monotonic time of the event, in ms. */
  readonly at: number;
}

/** The events a {@link LockClient} emits, for logs, metrics and dashboards. */
export interface LockEventMap {
  acquired: EventBase & {
    readonly ttlMs: number;
    readonly expiresAt: number;
    readonly waitedMs: number;
    readonly attempts: number;
    /** True when a reentrant acquire returned the already-held handle. */
    readonly reentered: boolean;
  };
  renewed: EventBase & { readonly expiresAt: number; readonly latencyMs: number };
  'renew-failed': EventBase & { readonly failures: number; readonly error: unknown };
  lost: EventBase & { readonly reason: LostReason; readonly error?: unknown };
  released: EventBase & { readonly heldMs: number };
  /** A user callback (onLost, onRelease, an event listener) threw; the library caught it. */
  'callback-error': {
    readonly name: string;
    readonly at: number;
    readonly source: string;
    readonly error: unknown;
  };
}

export type LockEventType = keyof LockEventMap;
export type LockEventListener<K extends LockEventType> = (event: LockEventMap[K]) => void;

/** A small typed event stream. Listener exceptions never reach the code that emitted the event. */
export class LockEvents {
  readonly #listeners = new Map<LockEventType, Set<(event: never) => void>>();

  /** Subscribes; returns the unsubscribe function. */
  on<K extends LockEventType>(type: K, listener: LockEventListener<K>): () => void {
    let set = this.#listeners.get(type);
    if (!set) {
      set = new Set();
      this.#listeners.set(type, set);
    }
    set.add(listener as (event: never) => void);
    return () => this.off(type, listener);
  }

  off<K extends LockEventType>(type: K, listener: LockEventListener<K>): void {
    this.#listeners.get(type)?.delete(listener as (event: never) => void);
  }

  /** @internal Whether anyone listens for `type`: an emitter can skip building an event nobody receives. */
  listens(type: LockEventType): boolean {
    return (this.#listeners.get(type)?.size ?? 0) > 0;
  }

  /** @internal */
  emit<K extends LockEventType>(type: K, event: LockEventMap[K]): void {
    const set = this.#listeners.get(type);
    if (!set || set.size === 0) {
      if (type === 'callback-error') {
        const e = event as LockEventMap['callback-error'];
        process.emitWarning(
          `dlock: ${e.source} for lock "${e.name}" threw: ${String(e.error)}`,
          'DLockWarning',
        );
      }
      return;
    }
    for (const listener of [...set]) {
      try {
        (listener as LockEventListener<K>)(event);
      } catch (error) {
        if (type !== 'callback-error') {
          this.emit('callback-error', {
            name: 'name' in event ? String(event.name) : '',
            at: event.at,
            source: `${type} listener`,
            error,
          });
        }
      }
    }
  }
}
