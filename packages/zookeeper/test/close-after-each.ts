import { afterEach } from 'vitest';
/**
 * Registers an `afterEach` that closes, newest first, everything the test handed to the returned `onClose` (which
 * returns what it was given), so that a failing test leaves no client, service or proxy open for the next.
 */
export function closeAfterEach(): <T extends { close(): unknown }>(item: T) => T {
  const opened: { close(): unknown }[] = [];
  afterEach(async () => {
    for (const item of opened.splice(0).reverse()) await item.close();
  });
  return (item) => {
    opened.push(item);
    return item;
  };
}
