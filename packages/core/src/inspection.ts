import { TransportError, textOf } from './errors.js';
import type { LockInfo, PermitHolder, PermitsInfo } from './service.js';

/**
 * What `LockClient.inspect` and `Semaphore.inspect` hand out: a fresh object holding only the fields the SPI
 * defines, checked, so a backend's malformed answer is a `TransportError` here rather than a surprise in a dashboard.
 */
export function checkedLockInfo(info: unknown, name: string): LockInfo {
  const bad = (): TransportError =>
    new TransportError(`the service returned a malformed inspect for "${name}"`);
  if (typeof info !== 'object' || info === null) throw bad();
  const i = info as Record<string, unknown>;
  if (typeof i['held'] !== 'boolean') throw bad();
  if (!i['held']) return { held: false, ...optionalWaiters(i['waiters'], bad) };
  const out: { -readonly [K in keyof LockInfo]: LockInfo[K] } = { held: true };
  const { ownerId, fencingToken, expiresInMs, metadata } = i;
  if (ownerId !== undefined) out.ownerId = stringOf(ownerId, bad);
  if (fencingToken !== undefined) out.fencingToken = tokenOf(fencingToken, bad);
  if (expiresInMs !== undefined) out.expiresInMs = msOf(expiresInMs, bad);
  if (metadata !== undefined) out.metadata = stringOf(metadata, bad);
  return { ...out, ...optionalWaiters(i['waiters'], bad) };
}

/** As {@link checkedLockInfo}, for a semaphore of `permits`: holders sorted by slot, each slot in range and once. */
export function checkedPermitsInfo(info: unknown, name: string, permits: number): PermitsInfo {
  const bad = (): TransportError =>
    new TransportError(`the service returned a malformed permit inspect for "${name}"`);
  if (typeof info !== 'object' || info === null) throw bad();
  const i = info as Record<string, unknown>;
  const held = i['held'];
  if (i['permits'] !== permits || !Array.isArray(held) || held.length > permits) throw bad();
  const holders = held.map((h: unknown): PermitHolder => {
    if (typeof h !== 'object' || h === null) throw bad();
    const r = h as Record<string, unknown>;
    const slot = r['slot'];
    if (!Number.isInteger(slot) || (slot as number) < 0 || (slot as number) >= permits) throw bad();
    const holder: { -readonly [K in keyof PermitHolder]: PermitHolder[K] } = {
      slot: slot as number,
      ownerId: stringOf(r['ownerId'], bad),
      fencingToken: tokenOf(r['fencingToken'], bad),
    };
    if (r['expiresInMs'] !== undefined) holder.expiresInMs = msOf(r['expiresInMs'], bad);
    if (r['metadata'] !== undefined) holder.metadata = stringOf(r['metadata'], bad);
    return holder;
  });
  holders.sort((a, b) => a.slot - b.slot);
  if (holders.some((h, at) => at > 0 && holders[at - 1]?.slot === h.slot)) throw bad();
  return { permits, held: holders, ...optionalWaiters(i['waiters'], bad) };
}

/** What `Semaphore.available` hands out: a count of free permits, from 0 to `permits`. */
export function checkedAvailable(value: unknown, name: string, permits: number): number {
  if (!Number.isInteger(value) || (value as number) < 0 || (value as number) > permits) {
    throw new TransportError(
      `the service returned ${textOf(value)} free permits for "${name}", not a count from 0 to ${permits}`,
    );
  }
  return value as number;
}

function optionalWaiters(value: unknown, bad: () => Error): { readonly waiters?: number } {
  if (value === undefined) return {};
  if (!Number.isInteger(value) || (value as number) < 0) throw bad();
  return { waiters: value as number };
}

function stringOf(value: unknown, bad: () => Error): string {
  if (typeof value !== 'string') throw bad();
  return value;
}

function tokenOf(value: unknown, bad: () => Error): bigint {
  if (typeof value !== 'bigint') throw bad();
  return value;
}

/** Time left by the service's clock; a lease a moment past its end (not yet reaped) reads as 0. */
function msOf(value: unknown, bad: () => Error): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) throw bad();
  return Math.max(0, value);
}
