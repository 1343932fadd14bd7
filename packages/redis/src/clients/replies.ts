/**
 * A reply as the services read it: bulk strings as strings whichever way the client maps them (a Buffer under a
 * buffer type mapping, a string by default), integers as numbers (RESP3 clients may give bigints or strings for
 * them; the scripts' integers are small), arrays element by element.
 */
export function normalizeReply(reply: unknown): unknown {
  if (Buffer.isBuffer(reply)) return reply.toString();
  if (typeof reply === 'bigint') return Number(reply);
  if (Array.isArray(reply)) return reply.map(normalizeReply);
  return reply;
}

/** A pub/sub payload as a string, or undefined when it cannot be one of ours. */
export function messageText(message: unknown): string | undefined {
  if (typeof message === 'string') return message;
  if (Buffer.isBuffer(message)) return message.toString();
  return undefined;
}
