/**
 * Keeps the process alive while a caller awaits one of the client's public calls, so that every such call settles
 * instead of the process exiting under it with the promise never resolved.
 *
 * The client's own timers are unref'd on purpose (an idle client holding locks must not keep a process alive), and
 * a real service's socket usually keeps the process alive during a call, but not always: a node-redis client that
 * was never connected, or any service that parks a call without I/O, leaves nothing referenced, and Node exits with
 * the caller's `await` pending. This handle never fires and measures no time; it is a reference on the event loop,
 * held while at least one public call is pending. One per client, toggled with `ref()`/`unref()` (cheap flag
 * changes), not a timer per call.
 */
export class PendingCallHold {
  #pending = 0;
  #handle: ReturnType<typeof setInterval> | undefined;
  #stopped = false;

  /** Wraps a public call's promise: the process stays alive until it settles. */
  hold<T>(promise: Promise<T>): Promise<T> {
    if (this.#stopped) return promise;
    this.enter();
    const leave = (): void => this.leave();
    promise.then(leave, leave);
    return promise;
  }

  /** One more call pending; pair with {@link leave}, for a caller that already watches the call settle. */
  enter(): void {
    if (this.#stopped) return;
    if (this.#pending++ === 0) {
      // 2^30 ms: far below the 2^31 − 1 overflow, and it never comes due in practice; `unref` when idle.
      this.#handle ??= setInterval(() => {}, 2 ** 30);
      this.#handle.ref();
    }
  }

  leave(): void {
    if (this.#pending === 0) return;
    if (--this.#pending === 0) this.#handle?.unref();
  }

  /** Drops the reference for good (after `close()`): nothing of the client keeps the process alive any more. */
  stop(): void {
    this.#stopped = true;
    clearInterval(this.#handle);
    this.#handle = undefined;
  }
}
