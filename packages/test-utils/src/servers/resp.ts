import { Socket } from 'node:net';

/**
 * A RESP2 reply. Bulk strings come back as text (UTF-8) unless asked for as bytes, which is what keys read from a
 * server must be when they are sent back to it (a key need not be valid UTF-8).
 */
export type RespReply = string | number | null | Buffer | RespReply[];

/** An error reply (`-ERR ...`, `-MOVED ...`): the server answered, and the answer was an error. */
export class RedisReplyError extends Error {
  override readonly name = 'RedisReplyError';
}

export type RespArg = string | number | Uint8Array;

export interface RespOptions {
  readonly host?: string;
  /** For the whole exchange: connect, send, every reply. Default 5 s. */
  readonly timeoutMs?: number;
  /** Bulk strings as Buffers instead of text. */
  readonly bytes?: boolean;
}

function encode(args: readonly RespArg[]): Buffer {
  const parts: Buffer[] = [Buffer.from(`*${args.length}\r\n`)];
  for (const arg of args) {
    const bytes = typeof arg === 'number' ? Buffer.from(String(arg)) : Buffer.from(arg);
    parts.push(Buffer.from(`$${bytes.length}\r\n`), bytes, Buffer.from('\r\n'));
  }
  return Buffer.concat(parts);
}

interface Parsed {
  readonly value: RespReply | RedisReplyError;
  readonly next: number;
}

/** One reply starting at `at`, or undefined when the buffer does not hold all of it yet. */
function parse(buf: Buffer, at: number, bytes: boolean): Parsed | undefined {
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return undefined;
  const line = buf.toString('utf8', at + 1, eol);
  const next = eol + 2;
  switch (buf[at]) {
    case 0x2b: // +
      return { value: line, next };
    case 0x2d: // -
      return { value: new RedisReplyError(line), next };
    case 0x3a: // :
      return { value: Number(line), next };
    case 0x24: {
      // $
      const length = Number(line);
      if (length < 0) return { value: null, next };
      if (buf.length < next + length + 2) return undefined;
      const body = buf.subarray(next, next + length);
      return { value: bytes ? Buffer.from(body) : body.toString('utf8'), next: next + length + 2 };
    }
    case 0x2a: {
      // *
      const count = Number(line);
      if (count < 0) return { value: null, next };
      const items: RespReply[] = [];
      let cursor = next;
      for (let i = 0; i < count; i++) {
        const item = parse(buf, cursor, bytes);
        if (item === undefined) return undefined;
        // Nested error replies only occur in EXEC results, which these helpers never send.
        items.push(item.value instanceof RedisReplyError ? item.value.message : item.value);
        cursor = item.next;
      }
      return { value: items, next: cursor };
    }
    default:
      throw new Error(`unexpected RESP type byte ${String(buf[at])}`);
  }
}

/**
 * Sends commands down one fresh connection (pipelined) and resolves every reply in order, error replies included
 * as RedisReplyError values. Rejects on a connection failure, a malformed reply or the timeout.
 */
export function redisPipeline(
  port: number,
  commands: readonly (readonly RespArg[])[],
  options: RespOptions = {},
): Promise<(RespReply | RedisReplyError)[]> {
  const { host = '127.0.0.1', timeoutMs = 5_000, bytes = false } = options;
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    const replies: (RespReply | RedisReplyError)[] = [];
    let pending: Buffer = Buffer.alloc(0);
    let settled = false;
    const finish = (error: Error | undefined): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (error) reject(error);
      else resolve(replies);
    };
    const timer = setTimeout(
      () => finish(new Error(`redis ${host}:${port}: no full reply within ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.once('error', (error) => finish(error));
    socket.once('close', () =>
      finish(new Error(`redis ${host}:${port}: connection closed after ${replies.length} replies`)),
    );
    socket.on('data', (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      try {
        for (;;) {
          const item = parse(pending, 0, bytes);
          if (item === undefined) break;
          replies.push(item.value);
          pending = pending.subarray(item.next);
          if (replies.length === commands.length) return finish(undefined);
        }
      } catch (error) {
        finish(error instanceof Error ? error : new Error(String(error)));
      }
    });
    if (commands.length === 0) return finish(undefined);
    socket.connect(port, host, () => socket.write(Buffer.concat(commands.map(encode))));
  });
}

/** One command; an error reply rejects with RedisReplyError. */
export async function redisCommand(
  port: number,
  args: readonly RespArg[],
  options: RespOptions = {},
): Promise<RespReply> {
  const [reply] = await redisPipeline(port, [args], options);
  if (reply instanceof RedisReplyError) throw reply;
  return reply ?? null;
}
