import type { LockKind } from '@dlock/core';
import type { Attributes } from '@opentelemetry/api';
import { ATTRIBUTES } from './names.js';

/**
 * The attributes every instrument shares: the kind always; the mapped name, and a permit's slot beside it, only
 * through the user's mapping. A mapping that throws or returns anything but a string leaves the name out: a bad
 * mapping costs a label, never a lock operation.
 */
export function attributesFor(
  nameAttribute: ((name: string) => string | undefined) | undefined,
  kind: LockKind,
  name: string,
  slot: number | undefined,
): Attributes {
  const attributes: Attributes = { [ATTRIBUTES.kind]: kind };
  if (nameAttribute === undefined) return attributes;
  let mapped: unknown;
  try {
    mapped = nameAttribute(name);
  } catch {
    return attributes;
  }
  if (typeof mapped !== 'string') return attributes;
  attributes[ATTRIBUTES.name] = mapped;
  // A stream other than core's may hand a slot of NaN: it would label every point of that permit NaN.
  if (typeof slot === 'number' && Number.isFinite(slot)) attributes[ATTRIBUTES.slot] = slot;
  return attributes;
}
