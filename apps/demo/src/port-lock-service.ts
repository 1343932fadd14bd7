import type { MessagePort } from 'node:worker_threads';
import type {
  AcquireRequest,
  AcquireResult,
  Lease,
  LockService,
  RenewRequest,
  RenewResult,
} from '@dlock/core';
import type { ServiceReply, ServiceRequest } from './port-protocol.js';

type Pending = { resolve: (value: never) => void; reject: (error: Error) => void };
type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/**
 * A {@link LockService} whose every call crosses a `MessagePort` to the thread that owns the real service. It
 * lets worker threads share one in-memory service the way processes share a server: when a worker's thread is
 * frozen its requests stop too, and the service sees its lease run out.
 *
 * No call here has its own deadline: `LockClient` bounds every service call (`operationTimeoutMs`), and `close()`
 * fails whatever is still waiting.
 */
export class PortLockService implements LockService {
  readonly #port: MessagePort;
  readonly #pending = new Map<number, Pending>();
  readonly #watchers = new Map<number, () => void>();
  #nextId = 1;
  #closed = false;

  constructor(port: MessagePort) {
    this.#port = port;
    port.on('message', (reply: ServiceReply) => this.#onReply(reply));
  }

  async acquire(request: AcquireRequest): Promise<AcquireResult> {
    const id = this.#nextId++;
    const onAbort = (): void => this.#post({ id, op: 'abort' });
    request.signal.addEventListener('abort', onAbort, { once: true });
    try {
      return await this.#call<AcquireResult>(id, {
        op: 'acquire',
        name: request.name,
        ownerId: request.ownerId,
        ttlMs: request.ttlMs,
        waitMs: request.waitMs,
      });
    } finally {
      request.signal.removeEventListener('abort', onAbort);
    }
  }

  renew(request: RenewRequest): Promise<RenewResult> {
    return this.#call(this.#nextId++, { op: 'renew', request });
  }

  renewMany(requests: readonly RenewRequest[]): Promise<readonly RenewResult[]> {
    return this.#call(this.#nextId++, { op: 'renewMany', requests });
  }

  release(lease: Lease): Promise<boolean> {
    return this.#call(this.#nextId++, { op: 'release', lease });
  }

  watch(name: string, onReleased: () => void): () => void {
    if (this.#closed) return () => {};
    const id = this.#nextId++;
    this.#watchers.set(id, onReleased);
    this.#post({ id, op: 'watch', name });
    return () => {
      if (this.#watchers.delete(id)) this.#post({ id, op: 'unwatch' });
    };
  }

  /** Fails every call still waiting and closes the port. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const pending of this.#pending.values()) pending.reject(new Error('lock service port closed'));
    this.#pending.clear();
    this.#watchers.clear();
    this.#port.close();
  }

  #call<T>(id: number, request: DistributiveOmit<ServiceRequest, 'id'>): Promise<T> {
    if (this.#closed) return Promise.reject(new Error('lock service port closed'));
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (value: never) => void, reject });
      this.#post({ id, ...request } as ServiceRequest);
    });
  }

  #post(request: ServiceRequest): void {
    if (!this.#closed) this.#port.postMessage(request);
  }

  #onReply(reply: ServiceReply): void {
    if ('released' in reply) {
      this.#watchers.get(reply.id)?.();
      return;
    }
    const pending = this.#pending.get(reply.id);
    if (!pending) return;
    this.#pending.delete(reply.id);
    if (reply.ok) pending.resolve(reply.value as never);
    else pending.reject(new Error(reply.message));
  }
}
