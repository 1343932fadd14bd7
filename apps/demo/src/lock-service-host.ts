import type { MessagePort } from 'node:worker_threads';
import type { LockService } from '@dlock/core';
import type { ServiceReply, ServiceRequest } from './port-protocol.js';

/**
 * Serves one real {@link LockService} to a {@link PortLockService} on the other end of `port`. One host per
 * port; many hosts may share a service (that is the point: every worker contends on the same locks).
 */
export class LockServiceHost {
  readonly #service: LockService;
  readonly #port: MessagePort;
  readonly #aborts = new Map<number, AbortController>();
  readonly #unwatch = new Map<number, () => void>();
  #closed = false;

  constructor(service: LockService, port: MessagePort) {
    this.#service = service;
    this.#port = port;
    port.on('message', (request: ServiceRequest) => this.#onRequest(request));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const controller of this.#aborts.values()) controller.abort(new Error('host closed'));
    for (const unwatch of this.#unwatch.values()) unwatch();
    this.#aborts.clear();
    this.#unwatch.clear();
    this.#port.close();
  }

  #onRequest(request: ServiceRequest): void {
    switch (request.op) {
      case 'abort':
        this.#aborts.get(request.id)?.abort(new Error('caller gave up'));
        return;
      case 'watch':
        this.#unwatch.set(
          request.id,
          this.#service.watch(request.name, () => this.#reply({ id: request.id, released: true })),
        );
        return;
      case 'unwatch':
        this.#unwatch.get(request.id)?.();
        this.#unwatch.delete(request.id);
        return;
      default:
        this.#answer(request.id, () => this.#dispatch(request));
    }
  }

  #dispatch(request: Exclude<ServiceRequest, { op: 'abort' | 'watch' | 'unwatch' }>): Promise<unknown> {
    switch (request.op) {
      case 'acquire': {
        const controller = new AbortController();
        this.#aborts.set(request.id, controller);
        const { name, ownerId, ttlMs, waitMs } = request;
        return this.#service
          .acquire({ name, ownerId, ttlMs, waitMs, signal: controller.signal })
          .finally(() => this.#aborts.delete(request.id));
      }
      case 'renew':
        return this.#service.renew(request.request);
      case 'renewMany': {
        const service = this.#service;
        return service.renewMany
          ? service.renewMany(request.requests)
          : Promise.all(request.requests.map((r) => service.renew(r)));
      }
      case 'release':
        return this.#service.release(request.lease);
    }
  }

  #answer(id: number, call: () => Promise<unknown>): void {
    let pending: Promise<unknown>;
    try {
      pending = call();
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (value) => this.#reply({ id, ok: true, value } as ServiceReply),
      (error: unknown) => this.#reply({ id, ok: false, message: String(error) }),
    );
  }

  #reply(reply: ServiceReply): void {
    if (!this.#closed) this.#port.postMessage(reply);
  }
}
