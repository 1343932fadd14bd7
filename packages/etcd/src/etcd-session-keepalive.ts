import type { CallDeadlines } from '@dlock/core/adapter';
import type { DuplexStreamLike, LeaseClientLike, LeaseKeepAliveResponseLike } from './client-like.js';
import { transportError } from './errors.js';
import { closeStream, type EtcdRequests, later } from './requests.js';

type KeepAliveStream = DuplexStreamLike<{ ID?: string }, LeaseKeepAliveResponseLike>;

interface Pending {
  readonly leaseId: string;
  readonly resolve: (ttlSeconds: number) => void;
  readonly reject: (error: Error) => void;
  readonly deadline: ReturnType<CallDeadlines['add']>;
}

/** One keep-alive stream and the requests sent on it; a stream that misbehaves is thrown away whole. */
interface Generation {
  stream: KeepAliveStream | undefined;
  /** Requests waiting for the stream to open. */
  queued: Pending[];
  /** Requests written, per lease id, in the order their answers will come back. */
  readonly inFlight: Map<string, Pending[]>;
  dead: boolean;
}

/** How long an idle stream stays open: long enough to serve a burst, short enough not to hold the process. */
const IDLE_CLOSE_MS = 2_000;

/**
 * The session's keep-alive transport (part of the session role: only `EtcdSession` uses it): single keep-alive
 * round trips over one shared `LeaseKeepAlive` stream. Each request has its own deadline. When a
 * request times out, the whole stream is discarded and every request on it fails: answers on a stream that stalled
 * could otherwise be matched to later requests, and a keep-alive answer must never be credited to a request sent
 * after it. `etcd3`'s own `Lease` keep-alive state is not used at all (it reports loss only after about 2×TTL).
 */
export class KeepAliveChannel {
  readonly #client: LeaseClientLike;
  readonly #requests: EtcdRequests;
  #current: Generation | undefined;
  #stopIdleTimer: (() => void) | undefined;
  #closed = false;

  constructor(client: LeaseClientLike, requests: EtcdRequests) {
    this.#client = client;
    this.#requests = requests;
  }

  /**
   * Sends one keep-alive for `leaseId`. Resolves the TTL etcd granted in seconds, or 0 when the lease no longer
   * exists (expired or revoked). Rejects with a `TransportError` on failure or after the deadline.
   */
  keepAlive(leaseId: string): Promise<number> {
    if (this.#closed) return Promise.reject(transportError('lease keep-alive', new Error('service closed')));
    const generation = this.#generation();
    const { clock, deadlines, timeoutMs } = this.#requests;
    return new Promise<number>((resolve, reject) => {
      const deadline = deadlines.add(clock.monotonic() + timeoutMs, () => {
        this.#fail(
          generation,
          transportError('lease keep-alive', new Error(`no answer within ${timeoutMs} ms`)),
        );
      });
      const pending: Pending = { leaseId, resolve, reject, deadline };
      if (generation.stream) this.#send(generation, pending);
      else generation.queued.push(pending);
    });
  }

  close(): void {
    this.#closed = true;
    if (this.#current)
      this.#fail(this.#current, transportError('lease keep-alive', new Error('service closed')));
  }

  #generation(): Generation {
    this.#stopIdleTimer?.();
    this.#stopIdleTimer = undefined;
    if (this.#current && !this.#current.dead) return this.#current;
    const generation: Generation = { stream: undefined, queued: [], inFlight: new Map(), dead: false };
    this.#current = generation;
    // No gRPC deadline on the stream itself: it would end the stream, not the call to open it.
    this.#requests
      .run('lease keep-alive stream', () => this.#client.leaseKeepAlive(), {
        onLate: (late) => closeStream(late),
      })
      .then(
        (stream) => {
          if (generation.dead) {
            closeStream(stream);
            return;
          }
          generation.stream = stream;
          stream.on('data', (response) => this.#answer(generation, response));
          stream.on('error', (error) =>
            this.#fail(generation, transportError('lease keep-alive stream', error)),
          );
          stream.on('end', () =>
            this.#fail(generation, transportError('lease keep-alive stream', new Error('stream ended'))),
          );
          const queued = generation.queued;
          generation.queued = [];
          for (const pending of queued) this.#send(generation, pending);
        },
        (error: unknown) => this.#fail(generation, transportError('lease keep-alive stream', error)),
      );
    return generation;
  }

  #send(generation: Generation, pending: Pending): void {
    let queue = generation.inFlight.get(pending.leaseId);
    if (!queue) {
      queue = [];
      generation.inFlight.set(pending.leaseId, queue);
    }
    queue.push(pending);
    try {
      generation.stream?.write({ ID: pending.leaseId });
    } catch (error) {
      this.#fail(generation, transportError('lease keep-alive', error));
    }
  }

  #answer(generation: Generation, response: LeaseKeepAliveResponseLike): void {
    const queue = generation.inFlight.get(String(response.ID));
    const pending = queue?.shift();
    if (!pending) return;
    if (queue?.length === 0) generation.inFlight.delete(String(response.ID));
    this.#requests.deadlines.delete(pending.deadline);
    const ttl = Number(response.TTL);
    pending.resolve(Number.isFinite(ttl) && ttl > 0 ? ttl : 0);
    this.#maybeIdle(generation);
  }

  /** Closes the stream once nothing has been pending on it for a while, so it does not keep the process alive. */
  #maybeIdle(generation: Generation): void {
    if (generation.inFlight.size > 0 || generation.queued.length > 0 || this.#stopIdleTimer) return;
    this.#stopIdleTimer = later(this.#requests.clock, IDLE_CLOSE_MS, () => {
      this.#stopIdleTimer = undefined;
      if (this.#current === generation && generation.inFlight.size === 0 && generation.queued.length === 0) {
        generation.dead = true;
        this.#current = undefined;
        if (generation.stream) closeStream(generation.stream);
      }
    });
  }

  #fail(generation: Generation, error: Error): void {
    if (generation.dead) return;
    generation.dead = true;
    if (this.#current === generation) this.#current = undefined;
    const all = [...generation.queued, ...[...generation.inFlight.values()].flat()];
    generation.queued = [];
    generation.inFlight.clear();
    for (const pending of all) {
      this.#requests.deadlines.delete(pending.deadline);
      pending.reject(error);
    }
    if (generation.stream) closeStream(generation.stream);
  }
}
