/**
 * Counts the Redis requests this process sends, whatever the client library: it wraps `net.Socket#write` for
 * sockets to the Redis port and counts top-level RESP arrays (one per command, pipelined or not). Unlike
 * `INFO commandstats`, this ignores other processes using the same server and does not count the commands a Lua
 * script runs inside Redis, so "one script call per batch" shows as one request.
 */
import net from 'node:net';

const STAR = 0x2a; // '*' starts a command (an array of bulk strings)
const DOLLAR = 0x24; // '$' starts a bulk string
const CR = 0x0d;
const LF = 0x0a;

/** Incremental counter of commands in one socket's outgoing RESP stream; survives any chunking. */
class RespCommandCounter {
  commands = 0;
  #state = 'array'; // 'array' | 'bulk' | 'skip'
  #header = -1; // digits read so far of a `*n` / `$n` header, -1 before its marker
  #bulks = 0; // bulk strings left in the current command
  #skip = 0; // bytes left of the current bulk payload, CRLF included

  feed(bytes) {
    let i = 0;
    while (i < bytes.length) {
      if (this.#state === 'skip') {
        const n = Math.min(this.#skip, bytes.length - i);
        this.#skip -= n;
        i += n;
        if (this.#skip === 0) this.#state = --this.#bulks > 0 ? 'bulk' : 'array';
        continue;
      }
      const b = bytes[i++];
      if (this.#header < 0) {
        if (b === (this.#state === 'array' ? STAR : DOLLAR)) this.#header = 0;
        continue;
      }
      if (b === CR) continue;
      if (b !== LF) {
        this.#header = this.#header * 10 + (b - 48);
        continue;
      }
      const n = this.#header;
      this.#header = -1;
      if (this.#state === 'array') {
        this.commands += 1;
        if (n > 0) {
          this.#bulks = n;
          this.#state = 'bulk';
        }
      } else {
        this.#skip = n + 2;
        this.#state = 'skip';
      }
    }
  }
}

/**
 * Starts counting writes to `ports` (one port or several: the masters of a cluster) on every socket of this
 * process; returns `() => commands so far`.
 */
export function countOutgoingRequests(ports) {
  const watched = new Set(Array.isArray(ports) ? ports : [ports]);
  const counters = new WeakMap();
  let total = 0;
  const original = net.Socket.prototype.write;
  net.Socket.prototype.write = function write(chunk, encoding, cb) {
    if (watched.has(this.remotePort) && chunk != null) {
      let counter = counters.get(this);
      if (!counter) {
        counter = new RespCommandCounter();
        counters.set(this, counter);
      }
      const before = counter.commands;
      counter.feed(
        typeof chunk === 'string'
          ? Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8')
          : chunk,
      );
      total += counter.commands - before;
    }
    return original.call(this, chunk, encoding, cb);
  };
  return () => total;
}

export { RespCommandCounter };
