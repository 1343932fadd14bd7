/** Replaces a lock name's occurrences in a text. */
export type Redact = (text: string) => string;

/**
 * How many names' redactors one instrumentation keeps. Building one costs time in proportion to the name (about
 * 4 ms for 1,024 characters) and a failing lock usually fails again (a service down, a retry loop), so each name's
 * is kept; a pattern for a long name runs to tens of kilobytes, so only a few are, the least recently used going.
 */
export const CACHED_REDACTORS = 32;

/** `build` memoized per name, for the last `capacity` names asked for. */
export function redactorCache(
  build: (name: string) => Redact,
  capacity = CACHED_REDACTORS,
): (name: string) => Redact {
  const cache = new Map<string, Redact>();
  return (name) => {
    let redact = cache.get(name);
    if (redact !== undefined) {
      // A Map iterates in insertion order: put back, the name is the newest and the first key the oldest.
      cache.delete(name);
    } else {
      redact = build(name);
      if (cache.size >= capacity) {
        const oldest = cache.keys().next();
        if (!oldest.done) cache.delete(oldest.value);
      }
    }
    cache.set(name, redact);
    return redact;
  };
}
