import { InvalidArgumentError } from '@dlock/core';

/**
 * Every statement the service sends, built once per table location. Each operation is ONE statement: its CTEs read
 * one snapshot and their writes land together, so there is no transaction to keep open and no session state (a
 * transaction-pooling proxy such as PgBouncer may run each statement on another server connection). The comment on
 * each statement says what it decides; the README's "Tables" section shows the DDL for a DBA.
 *
 * Rows are keyed by (kind, name, slot): kind `l` is a lock (slot 0), kind `s` a semaphore's slot. Time is the
 * server's: every expiry is `clock_timestamp()` + a duration, and the client only ever sends durations.
 */
export interface PostgresStatements {
  /** The tables, where they are, and the DDL that creates them (idempotent, serialised by an xact lock). */
  readonly tables: {
    /** The quoted, qualified name of the fencing-counter table, whose rows are never deleted. */
    readonly tokens: string;
    /** The name of the grant table: holder, token, metadata and expiry of each lock or permit. */
    readonly leases: string;
    /** The name of the table of queued claims and of services observing a name. */
    readonly waiters: string;
  };
  /** The DDL `ensureSchema` runs: tables, index and functions; safe to run again and concurrently. */
  readonly createSchema: string;
  /** Takes a lock if free and nobody is ahead, else queues or re-checks the claim. */
  readonly acquireLock: string;
  /** Takes a semaphore permit if a slot is free and nobody is ahead, else queues or re-checks the claim. */
  readonly acquirePermit: string;
  /** Extends a batch of grants whose owner and token still hold them and whose lease has not run out. */
  readonly renew: string;
  /** Releases a lock or a permit, owner-checked, and wakes the next waiter. */
  readonly release: string;
  /** Undoes a claim that gave up or failed: its waiter row and any grant made to it. */
  readonly leave: string;
  /** Reads a lock's live holder and its count of live waiters. */
  readonly inspect: string;
  /** Replaces a held lock's metadata, owner-checked, keeping its token and expiry. */
  readonly updateMetadata: string;
  /** Counts a semaphore's free slots, or reads the limit it was stored with when that differs. */
  readonly availablePermits: string;
  /** Reads a semaphore's live holders and waiters, or the limit it was stored with when that differs. */
  readonly inspectPermits: string;
  /** Starts or refreshes a service's observation of lock names, for change notices. */
  readonly observe: string;
  /** Ends a service's observation of one name. */
  readonly unobserve: string;
  /** Deletes expired lease and waiter rows, a bounded number per call. */
  readonly sweep: string;
  /** Passes a wake-up that reached a claim no longer waiting on to the first live waiter. */
  readonly wakeHead: string;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** PostgreSQL truncates identifiers past 63 bytes; the longest table name is the prefix + "waiters". */
const MAX_PREFIX = 63 - 'waiters'.length;

export function assertSchemaName(schema: unknown, field: string): string {
  if (typeof schema !== 'string' || !IDENTIFIER.test(schema) || schema.length > 63) {
    throw new InvalidArgumentError(field, 'must match [A-Za-z_][A-Za-z0-9_]* and be at most 63 characters');
  }
  return schema;
}

export function assertTablePrefix(prefix: unknown, field: string): string {
  if (
    typeof prefix !== 'string' ||
    (prefix !== '' && !IDENTIFIER.test(prefix)) ||
    prefix.length > MAX_PREFIX
  ) {
    throw new InvalidArgumentError(
      field,
      `must match [A-Za-z_][A-Za-z0-9_]* (or be empty) and be at most ${MAX_PREFIX} characters`,
    );
  }
  return prefix;
}

/**
 * A lock or semaphore name, an owner id or metadata as this adapter stores them: `text` values, which PostgreSQL
 * cannot hold with a NUL character in them. Any other string core accepts is stored as it is. Refused before any
 * I/O: sent, every statement carrying it would fail with the server's encoding error, reported as a
 * `TransportError` (the service unreachable), which retrying never mends.
 */
export function assertStorableText(value: string, field: string): string {
  if (value.includes('\u0000')) {
    throw new InvalidArgumentError(
      field,
      'must not contain the NUL character (U+0000): PostgreSQL text cannot hold it',
    );
  }
  return value;
}

const quote = (identifier: string): string => `"${identifier}"`;

/** The lease row's duration arithmetic: `$n` milliseconds as an interval. */
const ms = (param: string): string => `(${param}::float8 * interval '1 millisecond')`;

/**
 * The statement's own deadline ($n ms after the server received it), checked where a grant, a queue entry or a mark
 * is written, i.e. after any row-lock wait: a statement that stalled on the server past the bound its caller gave
 * it writes none of them, so a caller that gave up and cleaned up is not left with a grant landing after its undo.
 */
const inTime = (param: string): string => `clock_timestamp() < statement_timestamp() + ${ms(param)}`;

/**
 * The same deadline for a statement that changes rows it does not create (renew, metadata update; the release
 * function does it in PL/pgSQL): `late` is true when the bound had passed once the statement held every row it
 * writes. An UPDATE's own WHERE is evaluated before it waits for a row lock and, when the holder of that lock only
 * locked the row (did not change it), is not evaluated again after the wait: the rows are locked first (`locked`,
 * `FOR UPDATE`), the clock read after all of them are, and the write is made only if it was not late.
 */
const lateAfter = (locked: string, param: string): string =>
  `late AS MATERIALIZED (SELECT NOT (${inTime(param)}) AS late FROM (SELECT count(*) FROM ${locked}) c)`;

/**
 * A wake-up notice: `<claim id>:<kind>:<name>`. The claim's service forwards it to the head of (kind, name) when
 * that claim no longer waits (see PostgresReleaseWatch); claim ids never contain ':'.
 */
const wakePayload = (id: string, kind: string, name: string): string =>
  `${id} || ':' || ${kind}::text || ':' || ${name}::text`;

/**
 * The statements for tables named `<tablePrefix>tokens`, `<tablePrefix>leases` and `<tablePrefix>waiters`, in
 * `schema` or, when it is undefined, wherever `search_path` finds them; the same text `service.sql` holds, built
 * without a database. Both names must already be valid identifiers (the service's options check them).
 */
export function postgresStatements(tablePrefix: string, schema: string | undefined): PostgresStatements {
  const qualify = (table: string): string =>
    schema === undefined ? quote(table) : `${quote(schema)}.${quote(table)}`;
  const T = qualify(`${tablePrefix}tokens`);
  const L = qualify(`${tablePrefix}leases`);
  const W = qualify(`${tablePrefix}waiters`);
  const orderIndex = quote(`${tablePrefix}waiters_order`);
  const orderIndexQualified = qualify(`${tablePrefix}waiters_order`);
  const permitFunction = qualify(`${tablePrefix}permit`);
  const lockFunction = qualify(`${tablePrefix}lock`);
  const releaseFunction = qualify(`${tablePrefix}release`);

  // The waiter's place: the live rows of the queue before its own (all of them while it has none, so a caller that
  // does not queue never overtakes one that does).
  const ahead = `ahead AS (
    SELECT count(*) AS n FROM queue q
     WHERE q.id <> $2
       AND q.seq < coalesce((SELECT m.seq FROM queue m WHERE m.id = $2), 9223372036854775807))`;
  // Dead waiters of this name go (a crashed waiter's row stops counting at its expiry and is deleted by the next
  // statement that touches the name), and so does the caller's own row once it holds the grant.
  const dequeued = (kind: string): string => `dequeued AS (
    DELETE FROM ${W} w USING now
     WHERE w.kind = '${kind}' AND w.name = $1
       AND ((w.id = $2 AND EXISTS (SELECT 1 FROM granted)) OR (w.id <> $2 AND w.expires_at <= now.t)))`;

  // A claim's own waiter row: a live one is refreshed in place (`refreshed`, keeping its seq, so its place), else
  // one is written. A row of the claim that expired (its process frozen past the row's lease) but that no statement
  // has deleted yet is written anew with a new seq: it left the queue at its expiry, and taking its old seq back
  // would put it ahead of the waiters that stayed. (An identity column can be updated only to DEFAULT, i.e. to its
  // next value.)
  const requeue = `ON CONFLICT (kind, name, id) DO UPDATE
       SET seq = DEFAULT, expires_at = excluded.expires_at, channel = excluded.channel
     WHERE w.expires_at <= clock_timestamp()`;

  // Observers of a lock name (watch, watchChanges, elections' observers) are rows of kind 'o' in the waiters table,
  // one per service, naming its channel; a statement that changes the holder tells each of them, payload 'c:<name>'
  // (no claim id contains ':'), only when something changed and only if someone observes.
  const tellObservers = (name: string, when: string): string => `observers AS (
    SELECT pg_notify(o.channel, 'c:' || ${name}) FROM ${W} o
     WHERE o.kind = 'o' AND o.name = ${name} AND o.expires_at > clock_timestamp() AND ${when})`;

  // Semaphore acquire, enqueue and re-check ($1-$6 as for a lock, $7 the limit, $8 the statement's bound in ms),
  // the second statement of the permit function. The function's first statement locks the semaphore's admission
  // row (token row (s, name, -1), never a slot): every permit statement of a name waits for the one before it to
  // commit, and this query, run after that wait with a snapshot of its own (a VOLATILE function takes a fresh
  // snapshot per statement under READ COMMITTED), sees every grant committed before it. Without that, a statement
  // that waited on a slot's token row decided on a snapshot older than a grant under another limit, and two limits
  // held the semaphore at once.
  // A waiter with k live waiters before it takes the (k+1)-th free slot, so waiters woken together pick different
  // slots and a caller that does not queue takes a slot only when more are free than waiters wait; a waiter granted
  // while more slots are free than it and those ahead of it need wakes the waiter after them. The slot's token row
  // is (s, name, slot): tokens rise per slot across holders. A live holder or waiter stored with another limit
  // refuses the call (`stored`) and nothing is written. The first waiter in line, with no slot free, writes itself
  // into every live holder's row (next_waiter), as for a lock, and looks again at once (`again`) if a row went
  // before it could: a release running concurrently then wakes it whatever its snapshot saw. It locks those rows
  // first, in slot order (`marking`), as a renewal batch locks its rows in key order (see `renew`): an UPDATE locks
  // in its plan's order, and two statements locking two rows in opposite orders deadlock. A grant's lease counts
  // from when the call reached the server (statement_timestamp()), not from after the admission row's wait: its
  // holder's window counts from the send (see `renew`).
  const permitQuery = `WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
  held AS (
    SELECT l.slot, l.permits, l.expires_at, l.next_waiter FROM ${L} l, now
     WHERE l.kind = 's' AND l.name = $1 AND l.expires_at > now.t),
  queue AS (
    SELECT w.id, w.seq, w.permits, w.channel FROM ${W} w, now
     WHERE w.kind = 's' AND w.name = $1 AND w.expires_at > now.t),
  stored AS (
    (SELECT h.permits FROM held h WHERE h.permits IS DISTINCT FROM $7::int
     UNION ALL
     SELECT q.permits FROM queue q WHERE q.permits IS DISTINCT FROM $7::int AND q.id <> $2) LIMIT 1),
  ${ahead},
  pick AS (
    SELECT s.slot FROM generate_series(0, $7::int - 1) AS s(slot)
     WHERE NOT EXISTS (SELECT 1 FROM stored) AND NOT EXISTS (SELECT 1 FROM held h WHERE h.slot = s.slot)
     ORDER BY s.slot OFFSET (SELECT n FROM ahead) LIMIT 1),
  minted AS (
    INSERT INTO ${T} AS f (kind, name, slot, token) SELECT 's', $1, pick.slot, 1 FROM pick
    ON CONFLICT (kind, name, slot) DO UPDATE SET token = f.token + 1
    RETURNING f.slot, f.token),
  granted AS (
    INSERT INTO ${L} AS l (kind, name, slot, permits, owner, owner_id, token, expires_at, metadata)
    SELECT 's', $1, minted.slot, $7::int, $2, $9::text, minted.token, statement_timestamp() + ${ms('$3')}, $4::text
      FROM minted
     WHERE ${inTime('$8')}
    ON CONFLICT (kind, name, slot) DO UPDATE
       SET permits = excluded.permits, owner = excluded.owner, owner_id = excluded.owner_id, token = excluded.token,
           expires_at = excluded.expires_at, metadata = excluded.metadata, next_waiter = NULL, next_channel = NULL
     WHERE l.expires_at <= clock_timestamp() AND ${inTime('$8')}
    RETURNING l.slot, l.token),
  ${dequeued('s')},
  refreshed AS (
    UPDATE ${W} w SET expires_at = now.t + ${ms('$5')}, channel = $6::text FROM now
     WHERE w.kind = 's' AND w.name = $1 AND w.id = $2 AND w.expires_at > now.t
       AND $5::float8 > 0 AND NOT EXISTS (SELECT 1 FROM granted) AND NOT EXISTS (SELECT 1 FROM stored)
       AND ${inTime('$8')}
    RETURNING w.seq),
  queued AS (
    INSERT INTO ${W} AS w (kind, name, id, permits, channel, expires_at)
    SELECT 's', $1, $2, $7::int, $6::text, now.t + ${ms('$5')} FROM now
     WHERE $5::float8 > 0 AND NOT EXISTS (SELECT 1 FROM granted) AND NOT EXISTS (SELECT 1 FROM stored)
       AND NOT EXISTS (SELECT 1 FROM refreshed) AND ${inTime('$8')}
    ${requeue}
    RETURNING w.seq),
  unmarked AS (
    SELECT h.slot FROM held h
     WHERE $5::float8 > 0 AND (SELECT n FROM ahead) = 0 AND NOT EXISTS (SELECT 1 FROM pick)
       AND NOT EXISTS (SELECT 1 FROM stored) AND h.next_waiter IS DISTINCT FROM $2),
  marking AS (
    SELECT l.slot FROM ${L} l, unmarked u, now
     WHERE l.kind = 's' AND l.name = $1 AND l.slot = u.slot AND l.expires_at > now.t
     ORDER BY l.slot
       FOR UPDATE OF l),
  marked AS (
    UPDATE ${L} l SET next_waiter = $2, next_channel = $6::text FROM marking m
     WHERE l.kind = 's' AND l.name = $1 AND l.slot = m.slot AND ${inTime('$8')}
    RETURNING 1),
  told AS (
    SELECT pg_notify(q.channel, ${wakePayload('q.id', "'s'", '$1')}) FROM queue q
     WHERE EXISTS (SELECT 1 FROM granted) AND q.id <> $2 AND q.channel IS NOT NULL
       AND $7::int - (SELECT count(*) FROM held h WHERE h.slot < $7::int) > 1 + (SELECT n FROM ahead)
     ORDER BY q.seq OFFSET (SELECT n FROM ahead) LIMIT 1)
SELECT (SELECT g.slot::text FROM granted g) AS slot,
       (SELECT g.token::text FROM granted g) AS token,
       (SELECT x.permits::text FROM stored x) AS stored,
       (SELECT ceil(extract(epoch FROM min(h.expires_at) - (SELECT t FROM now)) * 1000)::text FROM held h)
         AS holder_ms,
       ((EXISTS (SELECT 1 FROM pick) AND NOT EXISTS (SELECT 1 FROM granted))
         OR (SELECT count(*) FROM marked) < (SELECT count(*) FROM unmarked))::text AS again,
       (SELECT a.n FROM ahead a)::text AS ahead,
       ((SELECT count(*) FROM refreshed) + (SELECT count(*) FROM queued))::text AS queued,
       (SELECT count(*) FROM told)::text AS told`;
  // ON CONFLICT ... DO UPDATE ... WHERE false locks the existing row without writing a new version of it.
  const createPermitFunction = `CREATE OR REPLACE FUNCTION ${permitFunction}(
  text, text, float8, text, float8, text, integer, float8, text)
RETURNS TABLE (slot text, token text, stored text, holder_ms text, again text, ahead text, queued text, told text)
LANGUAGE sql VOLATILE AS $dlock$
INSERT INTO ${T} AS f (kind, name, slot, token) VALUES ('s', $1, -1, 1)
ON CONFLICT (kind, name, slot) DO UPDATE SET token = f.token WHERE false;
${permitQuery}
$dlock$`;

  // Lock acquire, enqueue and re-check alike ($1 name, $2 claim id = the grant's ownership token, $3 TTL ms less the
  // time the call waited for a pool connection, counted from statement_timestamp(),
  // $4 metadata, $5 the waiter row's lease in ms (0: do not queue), $6 the caller's notify channel, $7 the
  // statement's bound in ms: past it, nothing is granted, queued or marked; $8 the owner id, stored for inspect),
  // the body of the lock function.
  // Free = no live lease and no live waiter ahead: then the token row is bumped (token = counter + 1, written in
  // this statement with the grant) and the lease row inserted, or an expired one taken over; the takeover's
  // WHERE is evaluated on the latest row version, so of two racing grants one wins and the other, refused, has
  // only spent a token. Otherwise the claim's waiter row is written (or its expiry refreshed, keeping its place while it is live:
  // see `requeue`).
  // A first-in-line waiter behind a live holder writes itself into the lease row (next_waiter): a release that
  // deletes that row waits for this statement and reads its newest version, so the wake-up cannot slip between
  // the two; had the release come first, the update finds no row and the caller looks again at once (`again`).
  // The grant itself, shared by both lock queries: the token row bumped and the lease row written, when `free`; its
  // lease counts from when the call reached the server, as a renewal's (see `renew`).
  const lockGrant = `minted AS (
    INSERT INTO ${T} AS f (kind, name, slot, token) SELECT 'l', $1, 0, 1 FROM free
    ON CONFLICT (kind, name, slot) DO UPDATE SET token = f.token + 1
    RETURNING f.token),
  granted AS (
    INSERT INTO ${L} AS l (kind, name, slot, owner, owner_id, token, expires_at, metadata)
    SELECT 'l', $1, 0, $2, $8::text, minted.token, statement_timestamp() + ${ms('$3')}, $4::text FROM minted
     WHERE ${inTime('$7')}
    ON CONFLICT (kind, name, slot) DO UPDATE
       SET owner = excluded.owner, owner_id = excluded.owner_id, token = excluded.token, expires_at = excluded.expires_at,
           metadata = excluded.metadata, permits = NULL, next_waiter = NULL, next_channel = NULL
     WHERE l.expires_at <= clock_timestamp() AND ${inTime('$7')}
    RETURNING l.token)`;
  const lockQuery = `WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
  live AS (
    SELECT l.expires_at, l.next_waiter FROM ${L} l, now
     WHERE l.kind = 'l' AND l.name = $1 AND l.slot = 0 AND l.expires_at > now.t),
  queue AS (
    SELECT w.id, w.seq FROM ${W} w, now WHERE w.kind = 'l' AND w.name = $1 AND w.expires_at > now.t),
  ${ahead},
  free AS (SELECT 1 AS ok WHERE NOT EXISTS (SELECT 1 FROM live) AND (SELECT n FROM ahead) = 0),
  ${lockGrant},
  ${dequeued('l')},
  refreshed AS (
    UPDATE ${W} w SET expires_at = now.t + ${ms('$5')}, channel = $6::text FROM now
     WHERE w.kind = 'l' AND w.name = $1 AND w.id = $2 AND w.expires_at > now.t
       AND $5::float8 > 0 AND NOT EXISTS (SELECT 1 FROM granted) AND ${inTime('$7')}
    RETURNING w.seq),
  queued AS (
    INSERT INTO ${W} AS w (kind, name, id, channel, expires_at)
    SELECT 'l', $1, $2, $6::text, now.t + ${ms('$5')} FROM now
     WHERE $5::float8 > 0 AND NOT EXISTS (SELECT 1 FROM granted) AND NOT EXISTS (SELECT 1 FROM refreshed)
       AND ${inTime('$7')}
    ${requeue}
    RETURNING w.seq),
  unmarked AS (
    SELECT 1 AS due FROM live
     WHERE $5::float8 > 0 AND (SELECT n FROM ahead) = 0 AND live.next_waiter IS DISTINCT FROM $2),
  marked AS (
    UPDATE ${L} l SET next_waiter = $2, next_channel = $6::text FROM now
     WHERE l.kind = 'l' AND l.name = $1 AND l.slot = 0 AND l.expires_at > now.t
       AND EXISTS (SELECT 1 FROM unmarked) AND ${inTime('$7')}
    RETURNING 1),
  ${tellObservers('$1', 'EXISTS (SELECT 1 FROM granted)')}
SELECT (SELECT g.token::text FROM granted g) AS token,
       (SELECT ceil(extract(epoch FROM live.expires_at - now.t) * 1000)::text FROM live, now) AS holder_ms,
       ((EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM granted))
         OR (EXISTS (SELECT 1 FROM unmarked) AND NOT EXISTS (SELECT 1 FROM marked)))::text AS again,
       (SELECT n FROM ahead)::text AS ahead,
       ((SELECT count(*) FROM refreshed) + (SELECT count(*) FROM queued))::text AS queued,
       (SELECT count(*) FROM observers)::text AS observers`;

  // The same call for a claim that does not queue ($5 = 0: tryAcquire, one attempt): what lockQuery does with
  // nothing to queue or mark. Such a claim never has a waiter row (its id is new and it never writes one), so every
  // live waiter is ahead of it. A smaller plan: this is the whole of an uncontended tryAcquire on the server, and
  // the executor's per-call cost grows with the plan (about a tenth of the lock call's server CPU).
  const tryLockQuery = `WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
  live AS (
    SELECT l.expires_at FROM ${L} l, now
     WHERE l.kind = 'l' AND l.name = $1 AND l.slot = 0 AND l.expires_at > now.t),
  ahead AS (SELECT count(*) AS n FROM ${W} w, now WHERE w.kind = 'l' AND w.name = $1 AND w.expires_at > now.t),
  free AS (SELECT 1 AS ok WHERE NOT EXISTS (SELECT 1 FROM live) AND (SELECT n FROM ahead) = 0),
  ${lockGrant},
  dequeued AS (
    DELETE FROM ${W} w USING now WHERE w.kind = 'l' AND w.name = $1 AND w.expires_at <= now.t),
  ${tellObservers('$1', 'EXISTS (SELECT 1 FROM granted)')}
SELECT (SELECT g.token::text FROM granted g) AS token,
       (SELECT ceil(extract(epoch FROM live.expires_at - now.t) * 1000)::text FROM live, now) AS holder_ms,
       (EXISTS (SELECT 1 FROM free) AND NOT EXISTS (SELECT 1 FROM granted))::text AS again,
       (SELECT n FROM ahead)::text AS ahead,
       '0'::text AS queued,
       (SELECT count(*) FROM observers)::text AS observers`;

  // Release ($1 kind, $2 name, $3 slot, $4 owner, $5 token; $6 the bound, checked before it by the release
  // function), the body of the release function: deletes the row if
  // the owner and token match (an expired row of ours too, reported as not released), and wakes the first live
  // waiter of the name with one notice to its service's channel, plus the waiter the row names (see lockQuery) if
  // that is another one; a lock's observers are told.
  const releaseQuery = `WITH gone AS (
    DELETE FROM ${L} l
     WHERE l.kind = $1::"char" AND l.name = $2 AND l.slot = $3::int AND l.owner = $4 AND l.token = $5::bigint
    RETURNING l.expires_at > clock_timestamp() AS live, l.next_waiter, l.next_channel),
  head AS (
    SELECT w.id, w.channel FROM ${W} w
     WHERE w.kind = $1::"char" AND w.name = $2 AND w.expires_at > clock_timestamp()
       AND EXISTS (SELECT 1 FROM gone)
     ORDER BY w.seq LIMIT 1),
  told AS (
    SELECT pg_notify(n.channel, ${wakePayload('n.id', '$1', '$2')}) FROM (
      SELECT h.id, h.channel FROM head h
      UNION SELECT g.next_waiter, g.next_channel FROM gone g
       WHERE g.next_waiter IS NOT NULL
         -- A semaphore waiter marks every held slot; once granted one, it no longer needs the others' wake-ups.
         AND NOT EXISTS (SELECT 1 FROM ${L} o WHERE o.kind = $1::"char" AND o.name = $2 AND o.owner = g.next_waiter)) n
     WHERE n.channel IS NOT NULL),
  ${tellObservers('$2', `$1 = 'l' AND EXISTS (SELECT 1 FROM gone)`)}
SELECT coalesce((SELECT live FROM gone), false)::text AS released, (SELECT count(*) FROM told)::text AS told,
       (SELECT count(*) FROM observers)::text AS observers, NULL::text AS late`;

  // The lock and release statements run inside PL/pgSQL functions, one query per call (the lock function picks
  // lockQuery or tryLockQuery by $5), so each server connection plans them once and reuses the plan (PL/pgSQL
  // caches its statements' plans per connection; planning the CTE chain cost more than running it). The query is
  // the same single statement as before: one snapshot, taken when it starts, for all its CTEs. Nothing is kept
  // between calls but the plan, so a transaction-pooling proxy may still run each call on another connection.
  // ensureSchema replaces the functions on every run, so a schema made by an older version gets this version's
  // bodies (their result columns must not change for a signature; a new signature is a new function, beside the
  // old one: the release's sixth argument, its bound, came that way, and older versions still call the five-argument
  // one a schema made by them keeps).
  const plpgsql = (fn: string, args: string, result: string, body: string): string =>
    `CREATE OR REPLACE FUNCTION ${fn}(${args})
RETURNS TABLE (${result})
LANGUAGE plpgsql VOLATILE AS $dlock$
#variable_conflict use_column
BEGIN
  ${body}
END
$dlock$`;
  const createLockFunction = plpgsql(
    lockFunction,
    'text, text, float8, text, float8, text, float8, text',
    'token text, holder_ms text, again text, ahead text, queued text, observers text',
    // Each RETURN QUERY has its own cached plan; a call runs one of them, as one statement.
    `IF $5 > 0 THEN
    RETURN QUERY ${lockQuery};
  ELSE
    RETURN QUERY ${tryLockQuery};
  END IF;`,
  );
  const createReleaseFunction = plpgsql(
    releaseFunction,
    'text, text, integer, text, bigint, float8',
    'released text, told text, observers text, late text',
    // The release's commit does not wait for its WAL flush (for this transaction only): a server crash right after
    // can undo a release, and the lease then runs out at its TTL, as if its holder had crashed. No token is
    // involved, and every grant's commit does wait for its flush, which flushes each release before it too, so
    // no grant can rest on a release that was lost.
    // $6 is the statement's bound, as an acquire's: the row is locked first (an outside lock only on the row would
    // not make the DELETE look at its WHERE again after the wait), and a release that got it past the bound deletes
    // nothing and says `late`.
    `PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM ${L} l
   WHERE l.kind = $1::"char" AND l.name = $2 AND l.slot = $3 AND l.owner = $4 AND l.token = $5
     FOR UPDATE;
  IF NOT (${inTime('$6')}) THEN
    RETURN QUERY SELECT 'false'::text, '0'::text, '0'::text, 'true'::text;
    RETURN;
  END IF;
  RETURN QUERY ${releaseQuery};`,
  );

  return {
    tables: { tokens: T, leases: L, waiters: W },
    // Serialised by a transaction-level advisory lock (released at commit), so concurrent runs never race on the
    // catalog; one simple-protocol query is one implicit transaction, so a failure leaves no half-made schema and
    // no open transaction on a pooled connection. On existing tables it takes no table lock at all (the index is
    // created only when its name is missing: CREATE INDEX IF NOT EXISTS would take a SHARE lock, which waits for
    // and then blocks every writer, before it looks at the name), and lock_timeout bounds any wait it does have.
    createSchema: [
      "SELECT pg_advisory_xact_lock(hashtext('dlock/postgres ensureSchema'))",
      "SET LOCAL lock_timeout = '5s'",
      ...(schema === undefined ? [] : [`CREATE SCHEMA IF NOT EXISTS ${quote(schema)}`]),
      `CREATE TABLE IF NOT EXISTS ${T} (
  kind  "char"  NOT NULL,
  name  text    NOT NULL,
  slot  integer NOT NULL,
  token bigint  NOT NULL CHECK (token > 0),
  PRIMARY KEY (kind, name, slot)
)`,
      `CREATE TABLE IF NOT EXISTS ${L} (
  kind         "char"      NOT NULL,
  name         text        NOT NULL,
  slot         integer     NOT NULL,
  permits      integer,
  owner        text        NOT NULL,
  owner_id     text,
  token        bigint      NOT NULL,
  expires_at   timestamptz NOT NULL,
  metadata     text,
  next_waiter  text,
  next_channel text,
  PRIMARY KEY (kind, name, slot)
)`,
      `CREATE TABLE IF NOT EXISTS ${W} (
  kind       "char"      NOT NULL,
  name       text        NOT NULL,
  id         text        NOT NULL,
  seq        bigint      GENERATED ALWAYS AS IDENTITY,
  permits    integer,
  channel    text,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (kind, name, id)
)`,
      // The holder's owner id (AcquireRequest.ownerId, for inspect), added to a leases table made before it. Only when
      // missing: ALTER TABLE takes an ACCESS EXCLUSIVE lock even with IF NOT EXISTS.
      `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                  WHERE attrelid = '${L.replace(/'/g, "''")}'::regclass AND attname = 'owner_id' AND NOT attisdropped) THEN
    ALTER TABLE ${L} ADD COLUMN owner_id text;
  END IF;
END $$`,
      `DO $$ BEGIN
  IF to_regclass('${orderIndexQualified.replace(/'/g, "''")}') IS NULL THEN
    CREATE INDEX ${orderIndex} ON ${W} (kind, name, seq);
  END IF;
END $$`,
      createPermitFunction,
      createLockFunction,
      createReleaseFunction,
    ].join(';\n'),

    // Lock acquire, enqueue and re-check: one call of the lock function (see lockQuery).
    acquireLock: `SELECT * FROM ${lockFunction}($1, $2, $3, $4, $5, $6, $7, $8)`,

    // Semaphore acquire, enqueue and re-check: one call of the function ensureSchema creates (see permitQuery).
    acquirePermit: `SELECT * FROM ${permitFunction}($1, $2, $3, $4, $5, $6, $7, $8, $9)`,

    // Renewal of many grants, locks and permits alike, in one statement: each row is extended only while its owner
    // and token still hold it and its lease has not run out by the server's clock (an expired lease is never
    // revived), and only within the statement's bound ($7, as an acquire's), checked once every row is locked
    // (see `lateAfter`). $1-$6 are parallel arrays; the answer lists the 1-based positions that were renewed, or
    // is one row with `late` set when the bound had passed and nothing was renewed. The rows are locked in key order
    // (the sort runs below the row locking), as a semaphore's first waiter locks its holders' rows when it marks them
    // (`marked`, slot by slot): locked in the batch's order, a batch holding two permits of one semaphore and the
    // waiter each held one row and waited for the other, and PostgreSQL aborted one of them as a deadlock.
    // The new expiry counts from when the statement reached the server (statement_timestamp()), not from when it got
    // its rows: the holder's window counts from when it sent the renewal, so a lease counted from after a row-lock
    // wait would outlive that window by the wait, and the next renewal, reaching the row after the holder had
    // reported the lock lost (its window closed), would find it live and extend it again: held by a holder that
    // believes it lost it. The TTLs ($6) come less the time the call waited for a pool connection, for the same
    // reason. Counted from arrival, the lease ends at most a one-way trip (and the clocks' drift)
    // after the window, so a renewal that arrives after the window finds it run out. Never shortened (`greatest`),
    // as core's window is the latest of its renewals' (a renewal with a shorter TTL, or one whose wait outlasted its
    // TTL, may be answered after the holder counted on a longer one).
    renew: `WITH r AS MATERIALIZED (
    SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::bigint[], $6::float8[])
           WITH ORDINALITY AS r(kind, name, slot, owner, token, ttl, i)),
  locked AS (
    SELECT l.kind, l.name, l.slot, r.ttl, r.i FROM ${L} l JOIN r
        ON l.kind = r.kind::"char" AND l.name = r.name AND l.slot = r.slot AND l.owner = r.owner
       AND l.token = r.token
     ORDER BY l.kind, l.name, l.slot
       FOR UPDATE OF l),
  ${lateAfter('locked', '$7')},
  renewed AS (
    UPDATE ${L} l SET expires_at = greatest(l.expires_at, statement_timestamp() + k.ttl * interval '1 millisecond')
      FROM locked k
     WHERE l.kind = k.kind AND l.name = k.name AND l.slot = k.slot AND l.expires_at > clock_timestamp()
       AND NOT (SELECT late FROM late)
    RETURNING k.i)
SELECT x.i::text AS i, NULL::text AS late FROM renewed x
UNION ALL SELECT NULL, 'true' FROM late WHERE late`,

    // Release of a lock or a permit: one call of the release function (see releaseQuery).
    release: `SELECT * FROM ${releaseFunction}($1, $2, $3, $4, $5, $6)`,

    // Leave ($1 kind, $2 name, $3 claim id): the owner-checked undo of an attempt that gave up or failed. Deletes
    // its waiter row and any grant made to it, and wakes the next waiter when that freed a slot or moved it up.
    leave: `WITH gone AS (
    DELETE FROM ${L} l WHERE l.kind = $1::"char" AND l.name = $2 AND l.owner = $3 RETURNING 1),
  left_queue AS (
    DELETE FROM ${W} w WHERE w.kind = $1::"char" AND w.name = $2 AND w.id = $3 RETURNING w.seq),
  head AS (
    SELECT w.id, w.channel, w.seq FROM ${W} w
     WHERE w.kind = $1::"char" AND w.name = $2 AND w.id <> $3 AND w.expires_at > clock_timestamp()
     ORDER BY w.seq LIMIT 1),
  told AS (
    SELECT pg_notify(h.channel, ${wakePayload('h.id', '$1', '$2')}) FROM head h
     WHERE h.channel IS NOT NULL
       AND (EXISTS (SELECT 1 FROM gone) OR EXISTS (SELECT 1 FROM left_queue q WHERE q.seq < h.seq))),
  ${tellObservers('$2', `$1 = 'l' AND EXISTS (SELECT 1 FROM gone)`)}
SELECT (SELECT count(*) FROM gone)::text AS gone, (SELECT count(*) FROM told)::text AS told,
       (SELECT count(*) FROM observers)::text AS observers`,

    // The lock's live holder (owner id, token, metadata, time left by the server's clock) and its live waiters
    // ($1 name).
    inspect: `SELECT l.token::text AS token, l.owner_id, l.metadata,
       ceil(extract(epoch FROM l.expires_at - now.t) * 1000)::text AS ms,
       (SELECT count(*) FROM ${W} w WHERE w.kind = 'l' AND w.name = $1 AND w.expires_at > now.t)::text AS waiters
  FROM (SELECT clock_timestamp() AS t) now
  LEFT JOIN ${L} l ON l.kind = 'l' AND l.name = $1 AND l.slot = 0 AND l.expires_at > now.t`,

    // Owner-checked like a renewal, and bounded like one ($5, see `lateAfter`); keeps the token and the expiry
    // ($1 name, $2 owner, $3 token, $4 metadata); tells the name's observers.
    updateMetadata: `WITH locked AS (
    SELECT 1 FROM ${L} l
     WHERE l.kind = 'l' AND l.name = $1 AND l.slot = 0 AND l.owner = $2 AND l.token = $3::bigint
       FOR UPDATE),
  ${lateAfter('locked', '$5')},
  updated AS (
    UPDATE ${L} l SET metadata = $4
     WHERE l.kind = 'l' AND l.name = $1 AND l.slot = 0 AND l.owner = $2 AND l.token = $3::bigint
       AND l.expires_at > clock_timestamp() AND NOT (SELECT late FROM late)
    RETURNING 1),
  ${tellObservers('$1', 'EXISTS (SELECT 1 FROM updated)')}
SELECT (SELECT count(*) FROM updated)::text AS updated, (SELECT count(*) FROM observers)::text AS observers,
       (SELECT late FROM late)::text AS late`,

    // Free slots of a semaphore ($1 name, $2 limit), or the limit its live holders and waiters were stored with.
    availablePermits: `WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
  held AS (SELECT l.slot, l.permits FROM ${L} l, now WHERE l.kind = 's' AND l.name = $1 AND l.expires_at > now.t)
SELECT (SELECT x.permits FROM (
          SELECT h.permits FROM held h WHERE h.permits IS DISTINCT FROM $2::int
          UNION ALL
          SELECT w.permits FROM ${W} w, now
           WHERE w.kind = 's' AND w.name = $1 AND w.expires_at > now.t AND w.permits IS DISTINCT FROM $2::int
        ) x LIMIT 1)::text AS stored,
       ($2::int - (SELECT count(*) FROM held WHERE slot < $2::int))::text AS free`,

    // A semaphore's live holders ($1 name, $2 limit: slot, owner id, token, metadata, time left) and live waiters, or
    // the limit they were stored with (as availablePermits). One row per holder; with none, one row of NULLs.
    inspectPermits: `WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
  held AS (
    SELECT l.slot, l.permits, l.owner_id, l.token, l.metadata, l.expires_at FROM ${L} l, now
     WHERE l.kind = 's' AND l.name = $1 AND l.expires_at > now.t),
  queue AS (SELECT w.permits FROM ${W} w, now WHERE w.kind = 's' AND w.name = $1 AND w.expires_at > now.t),
  info AS (
    SELECT (SELECT x.permits FROM (
              SELECT h.permits FROM held h WHERE h.permits IS DISTINCT FROM $2::int
              UNION ALL
              SELECT q.permits FROM queue q WHERE q.permits IS DISTINCT FROM $2::int) x LIMIT 1)::text AS stored,
           (SELECT count(*) FROM queue)::text AS waiters)
SELECT info.stored, info.waiters, h.slot::text AS slot, h.owner_id, h.token::text AS token, h.metadata,
       ceil(extract(epoch FROM h.expires_at - now.t) * 1000)::text AS ms
  FROM info CROSS JOIN now LEFT JOIN held h ON true
 ORDER BY h.slot`,

    // A service starts or refreshes observing lock names ($1 names, $2 its channel, $3 the rows' lease in ms), within
    // the statement's bound ($4, see `lateAfter`), as the delete: an insert or refresh that got its rows only after its
    // caller gave up on it (close() may have settled, its delete found nothing yet) writes nothing. The rows already
    // there are locked first, in key order; one that appears meanwhile is refreshed only within the bound (the
    // conflict's WHERE is evaluated once its row is locked).
    observe: `WITH locked AS (
    SELECT 1 FROM ${W} w WHERE w.kind = 'o' AND w.name = ANY($1::text[]) AND w.id = $2
     ORDER BY w.name
       FOR UPDATE),
  ${lateAfter('locked', '$4')},
  written AS (
    INSERT INTO ${W} AS w (kind, name, id, channel, expires_at)
    SELECT 'o', n.name, $2, $2, clock_timestamp() + ${ms('$3')} FROM unnest($1::text[]) AS n(name)
     WHERE NOT (SELECT late FROM late)
    ON CONFLICT (kind, name, id) DO UPDATE SET expires_at = excluded.expires_at WHERE ${inTime('$4')}
    RETURNING 1)
SELECT (SELECT count(*) FROM written)::text AS written, (SELECT late FROM late)::text AS late`,

    // ... and stops ($1 name, $2 its channel), within the statement's bound ($3, see `lateAfter`): a delete that got
    // the row only after its caller gave up on it deletes nothing, as every other write of the service.
    unobserve: `WITH locked AS (
    SELECT 1 FROM ${W} w WHERE w.kind = 'o' AND w.name = $1 AND w.id = $2 FOR UPDATE),
  ${lateAfter('locked', '$3')},
  gone AS (
    DELETE FROM ${W} w WHERE w.kind = 'o' AND w.name = $1 AND w.id = $2 AND NOT (SELECT late FROM late)
    RETURNING 1)
SELECT (SELECT count(*) FROM gone)::text AS gone, (SELECT late FROM late)::text AS late`,

    // Rows of names nobody touches any more: expired leases and waiters, at most $1 of each per call, skipping rows
    // another statement has locked. Token rows are never deleted.
    sweep: `WITH leases AS (
    DELETE FROM ${L} WHERE ctid IN (
      SELECT ctid FROM ${L} WHERE expires_at <= clock_timestamp() LIMIT $1::int FOR UPDATE SKIP LOCKED)
    RETURNING 1),
  waiters AS (
    DELETE FROM ${W} WHERE ctid IN (
      SELECT ctid FROM ${W} WHERE expires_at <= clock_timestamp() LIMIT $1::int FOR UPDATE SKIP LOCKED)
    RETURNING 1)
SELECT (SELECT count(*) FROM leases)::text AS leases, (SELECT count(*) FROM waiters)::text AS waiters`,

    // A wake-up reached a claim that no longer waits (granted by a statement that did not see the release that sent
    // it, or gone): its service passes it on to the first live waiter of ($1 kind, $2 name), as a bare id that is
    // never passed on again.
    wakeHead: `SELECT count(pg_notify(w.channel, w.id))::text AS told FROM (
    SELECT w.id, w.channel FROM ${W} w
     WHERE w.kind = $1::"char" AND w.name = $2 AND w.expires_at > clock_timestamp() AND w.channel IS NOT NULL
     ORDER BY w.seq LIMIT 1) w`,
  };
}
