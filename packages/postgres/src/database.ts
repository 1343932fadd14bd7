import { createHash } from 'node:crypto';
import type { Clock } from '@dlock/core';
import { boundedCall, CallDeadlines } from '@dlock/core/adapter';
import {
  isPGlite,
  type PGliteLike,
  type PgListenClientLike,
  type PgNotificationLike,
  type PgPoolClientLike,
  type PgPoolLike,
  type PgQueryConfigLike,
  type PgQueryResultLike,
} from './client-like.js';
import { transportError } from './errors.js';

/** A result row: every column this package reads is cast to text in SQL, so rows read the same on pg and PGlite. */
export type Row = Readonly<Record<string, string | null>>;

export interface QueryOptions {
  /** Bound of this statement; default the service's `requestTimeoutMs`. */
  readonly timeoutMs?: number;
  /** Settles the call at once when it aborts (the statement itself runs on and may still commit). */
  readonly signal?: AbortSignal | undefined;
  /** Receives rows that arrive after the call was given up, e.g. to undo a grant nobody will use. */
  readonly onLate?: (rows: readonly Row[]) => void;
  /**
   * Called once the statement has really finished on the server side of the driver (answered or failed), also when
   * the call was given up before: until then it may still commit.
   */
  readonly onSettled?: () => void;
  /**
   * True for a statement still worth running after its caller gave up on it (an owner-checked clean-up, a wake-up):
   * it runs however long it waited for a connection. Any other is given back unsent once its bound is over by the
   * time it gets one.
   */
  readonly runsLate?: boolean;
}

/**
 * A connection whose statement has not answered for this many times the statement's bound is given up on (pg fails
 * the statement and the pool destroys the connection). Its bytes may be lost for good (a cut-off or blackholed
 * socket stays open without an error): kept, it would hold its place in the pool and queue every later statement on
 * it, and the pool would never recover. Twice the bound leaves a slow but live statement room to finish.
 */
export const DEAD_CONNECTION_BOUNDS = 2;

/** The one connection a service listens on, while it listens. */
export interface Listening {
  /** One bounded round trip on the listening connection: rejects when it no longer answers (a half-open socket). */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface ListenHandlers {
  onNotice(payload: string): void;
  /** The connection failed or ended: notices may be missed until a new one listens. */
  onLost(): void;
}

/**
 * The database as the service uses it: one bounded statement at a time, and a listening connection. Hides the
 * differences between a `pg.Pool` and PGlite (and counts statements, for the tests and the bench).
 */
export class Database {
  readonly clock: Clock;
  readonly timeoutMs: number;
  readonly deadlines: CallDeadlines;
  readonly #pool: PgPoolLike | PGliteLike;
  readonly #listen: boolean | (() => Promise<PgListenClientLike>);
  /** Statement names by text, when statements are prepared (named) per connection. */
  readonly #names: Map<string, string> | undefined;
  #statements = 0;

  constructor(
    pool: PgPoolLike | PGliteLike,
    listen: boolean | (() => Promise<PgListenClientLike>),
    clock: Clock,
    timeoutMs: number,
    prepared = false,
  ) {
    this.#pool = pool;
    this.#listen = listen;
    this.#names = prepared && !isPGlite(pool) ? new Map() : undefined;
    this.clock = clock;
    this.timeoutMs = timeoutMs;
    this.deadlines = new CallDeadlines(clock);
  }

  /** Statements sent so far (each is one round trip). */
  get statements(): number {
    return this.#statements;
  }

  /**
   * A statement's own bound, as the parameter its SQL checks against `statement_timestamp()`: what is left of its
   * caller's bound (`timeoutMs`, default a statement's, counted from `since`) when pg writes it to a connection, not
   * the whole bound again. A statement that waited in the pool's queue for a connection past its caller's bound (pg
   * waits as long as it takes unless the pool says otherwise) then writes nothing: its caller and any clean-up of
   * theirs, a closed service's included, may be long gone, and a grant made then would be held by nobody for its
   * whole TTL. pg reads the value through `toPostgres` as it binds the statement; PGlite is sent the figure at once.
   */
  boundLeft(since: number, timeoutMs = this.timeoutMs): unknown {
    const end = since + timeoutMs;
    return this.atWrite(() => String(Math.max(0, end - this.clock.monotonic())));
  }

  /**
   * A lease's TTL as the parameter a grant or renewal counts from `statement_timestamp()`: `ttlMs` less the time since
   * `since` (the call's start, from which its caller counts the lease) when pg writes the statement to a connection.
   * Counted whole from the server's receipt, a lease whose statement waited in the pool's queue would outlive its
   * holder's window by that wait, and a renewal arriving after the holder had reported the lock lost would still find
   * it live. May be 0 or less (the wait outlasted the TTL): such a lease is over when it is written.
   */
  ttlLeft(since: number, ttlMs: number): unknown {
    return this.atWrite(() => ttlMs - (this.clock.monotonic() - since));
  }

  /** `value()` when pg binds the statement (after any wait for a pool connection); PGlite, which has none, now. */
  atWrite(value: () => unknown): unknown {
    return isPGlite(this.#pool) ? value() : { toPostgres: () => value() };
  }

  /** True when notices can arrive at all (the `listen` option is not `false`). */
  get canListen(): boolean {
    return this.#listen !== false;
  }

  /** One statement with parameters, bounded; failures become `TransportError`s. */
  query(
    what: string,
    text: string,
    values: readonly unknown[],
    options: QueryOptions = {},
  ): Promise<readonly Row[]> {
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    this.#statements++;
    const { onSettled } = options;
    const end = options.runsLate ? undefined : this.clock.monotonic() + timeoutMs;
    return boundedCall(
      () => {
        const sent = this.#send(text, values, timeoutMs, end);
        if (onSettled) sent.then(onSettled, onSettled);
        return sent.then(
          (result) => result.rows as readonly Row[],
          (error: unknown) => {
            throw transportError(what, error);
          },
        );
      },
      {
        deadlines: this.deadlines,
        clock: this.clock,
        timeoutMs,
        what: `PostgreSQL ${what}`,
        signal: options.signal,
        ...(options.onLate ? { onLate: options.onLate } : {}),
      },
    );
  }

  /** `end`: the caller's deadline (monotonic), past which the statement is not sent; undefined, sent however late. */
  #send(
    text: string,
    values: readonly unknown[],
    timeoutMs: number,
    end: number | undefined,
  ): Promise<PgQueryResultLike> {
    const pool = this.#pool;
    if (isPGlite(pool)) return pool.query(text, values as unknown[]);
    const names = this.#names;
    let name: string | undefined;
    if (names) {
      name = names.get(text);
      if (name === undefined) {
        // Named by a hash of the text: two services with other tables on one pool never reuse a name for another
        // text.
        name = `dlock_${createHash('sha1').update(text).digest('hex').slice(0, 16)}`;
        names.set(text, name);
      }
    }
    // With a name it is a prepared statement, parsed and planned once per connection; query_timeout is counted from
    // when the statement is written to its connection, so time spent waiting for a free connection is not in it.
    const config: PgQueryConfigLike = {
      ...(name === undefined ? {} : { name }),
      text,
      values: values as unknown[],
      query_timeout: DEAD_CONNECTION_BOUNDS * timeoutMs,
    };
    return end === undefined ? pool.query(config) : this.#inTime(pool, config, end);
  }

  /**
   * The statement on a connection of its own, unless its caller's bound was over by the time the pool handed one
   * out: then the connection goes straight back, unused, and the statement is never sent. pg's pool queue has no
   * public way to withdraw a waiter, so a given-up statement still waits its turn, but no longer costs a round trip
   * that writes nothing (its bound is over on the server too) while live statements queue behind it. The caller was
   * told already (its bound settled the call); the rejection reaches only `onSettled`.
   */
  async #inTime(pool: PgPoolLike, config: PgQueryConfigLike, end: number): Promise<PgQueryResultLike> {
    const client = await pool.connect();
    if (this.clock.monotonic() >= end) {
      client.release();
      throw new Error('waited for a connection past its bound; not sent');
    }
    return runOn(client, config);
  }

  /** Several statements without parameters, as one implicit transaction (the simple query protocol). */
  async script(what: string, text: string): Promise<void> {
    this.#statements++;
    const pool = this.#pool;
    // No values: pg sends it with the simple query protocol, which takes several statements. Given up on like any
    // statement (query_timeout), so a reply lost for good does not keep its connection out of the pool.
    const run = isPGlite(pool)
      ? pool.exec(text)
      : pool.query({ text, values: [], query_timeout: DEAD_CONNECTION_BOUNDS * this.timeoutMs });
    await boundedCall(
      () =>
        run.then(
          () => undefined,
          (error: unknown) => {
            throw transportError(what, error);
          },
        ),
      { deadlines: this.deadlines, clock: this.clock, timeoutMs: this.timeoutMs, what: `PostgreSQL ${what}` },
    );
  }

  /** Opens the listening connection and runs `LISTEN channel` on it (channel: lower-case letters, digits, _). */
  async listen(channel: string, handlers: ListenHandlers): Promise<Listening> {
    const pool = this.#pool;
    if (isPGlite(pool)) {
      const unlisten = await pool.listen(channel, (payload) => handlers.onNotice(payload));
      return { ping: async () => {}, close: () => unlisten().catch(() => undefined) };
    }
    const factory = this.#listen;
    const own = typeof factory === 'function';
    // Bounded like a statement: an exhausted pool would otherwise keep this waiting (and the service not listening)
    // for as long as the pool's own connection timeout, which is none by default.
    const client = await boundedCall(() => (typeof factory === 'function' ? factory() : pool.connect()), {
      deadlines: this.deadlines,
      clock: this.clock,
      timeoutMs: this.timeoutMs,
      what: 'PostgreSQL listening connection',
      onLate: (late) => dispose(late, own, true),
    });
    let closed = false;
    const onNotification = (message: PgNotificationLike): void => {
      if (message.channel === channel && message.payload !== undefined) handlers.onNotice(message.payload);
    };
    const lost = (): void => {
      if (closed) return;
      closed = true;
      detach();
      dispose(client, own, new Error('listening connection lost'));
      handlers.onLost();
    };
    const onError = (): void => lost();
    const onEnd = (): void => lost();
    const detach = (): void => {
      client.removeListener?.('notification', onNotification as (...args: unknown[]) => void);
      client.removeListener?.('end', onEnd as (...args: unknown[]) => void);
      // The error listener stays: a late error on a connection being torn down must not crash the process.
    };
    client.on('notification', onNotification);
    client.on('error', onError);
    client.on('end', onEnd);
    try {
      await boundedCall(() => client.query(`LISTEN ${channel}`), {
        deadlines: this.deadlines,
        clock: this.clock,
        timeoutMs: this.timeoutMs,
        what: 'PostgreSQL listen',
      });
    } catch (error) {
      closed = true;
      detach();
      dispose(client, own, error instanceof Error ? error : new Error(String(error)));
      throw transportError('listen', error);
    }
    return {
      ping: async () => {
        await boundedCall(() => client.query('SELECT 1'), {
          deadlines: this.deadlines,
          clock: this.clock,
          timeoutMs: this.timeoutMs,
          what: 'PostgreSQL listening connection check',
        });
      },
      close: async () => {
        if (closed) return;
        closed = true;
        detach();
        // Never back into a pool with a LISTEN on it: the next user of that connection would get our notices.
        dispose(client, own, true);
      },
    };
  }
}

/**
 * One statement on a checked-out client, which goes back afterwards as `pool.query` gives it back: destroyed after a
 * failure (a connection whose statement failed or timed out may be broken) or an error event meanwhile.
 */
function runOn(client: PgPoolClientLike, config: PgQueryConfigLike): Promise<PgQueryResultLike> {
  return new Promise((resolve, reject) => {
    let released = false;
    const giveBack = (error?: Error): boolean => {
      if (released) return false;
      released = true;
      client.removeListener?.('error', onError as (...args: unknown[]) => void);
      try {
        client.release(error);
      } catch {
        // A pool wrapper's release that throws: thrown here, in a promise callback, it would go unhandled and the
        // statement would never settle with the answer it got.
      }
      return true;
    };
    const onError = (error: Error): void => {
      if (giveBack(error)) reject(error);
    };
    client.on('error', onError);
    const failed = (error: unknown): void => {
      if (giveBack(error instanceof Error ? error : new Error(String(error)))) reject(error);
    };
    try {
      client.query(config).then((result) => {
        if (giveBack()) resolve(result);
      }, failed);
    } catch (error) {
      failed(error);
    }
  });
}

function dispose(client: PgListenClientLike, own: boolean, error: Error | true): void {
  try {
    if (!own && client.release) client.release(error);
    else void Promise.resolve(client.end?.()).catch(() => undefined);
  } catch {
    // already gone
  }
}
