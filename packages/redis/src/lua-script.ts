import { createHash } from 'node:crypto';
import { normalizeReply } from './clients/replies.js';

/**
 * Sends one raw command; each service passes its own sender (fail-fast while disconnected, bounded, abortable). The
 * reply may come as the client library gives it: the script runner normalizes it (see `normalizeReply`).
 */
export type SendCommand = (args: string[]) => Promise<unknown>;

const COUNTS = ['0', '1', '2', '3', '4', '5', '6', '7', '8'];

/** `String(n)`, without making a string for the key counts every script call uses. */
function keyCount(n: number): string {
  return COUNTS[n] ?? String(n);
}

/** The server does not have the script cached (first use, restart, `SCRIPT FLUSH`): it did not run. */
export function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

export interface RunOptions {
  /**
   * Read when the server answers NOSCRIPT: once the caller has given up, nothing more may be sent, because a script
   * sent after the caller's clean-up would run after it on the server and undo the undo.
   */
  readonly abandoned?: boolean;
  /** Arguments of the re-sent script when they must differ from the first try's (see Redlock's renewal). */
  readonly retryArgs?: readonly string[];
  /** Called on NOSCRIPT, before anything is re-sent: the server lost its script cache. */
  readonly onNoScript?: () => void;
}

/**
 * A Lua script run by SHA, sending the source only when the server does not know it. The one runner of both
 * services: single-node scripts and every Redlock node's scripts go through it.
 */
export class LuaScript {
  readonly source: string;
  readonly sha: string;

  constructor(source: string) {
    this.source = source;
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  /**
   * EVALSHA, then EVAL on NOSCRIPT (which means the script did not run: sending it in full cannot apply it twice).
   * Answers the reply normalized. Not `async`: the hot path is one EVALSHA and one settle reaction, which both
   * normalizes the reply and catches NOSCRIPT, with no spread copies of the keys.
   */
  run(
    send: SendCommand,
    keys: readonly string[],
    args: readonly string[],
    options?: RunOptions,
  ): Promise<unknown> {
    // One array per call, reused for the rare EVAL fallback. Made at its final length and filled in place: grown by
    // `push`, it was copied at each growth, a third of the adapter's garbage per acquire and release cycle.
    const n = keys.length;
    const command = new Array<string>(3 + n + args.length);
    command[0] = 'EVALSHA';
    command[1] = this.sha;
    command[2] = keyCount(n);
    for (let i = 0; i < n; i++) command[3 + i] = keys[i] as string;
    for (let i = 0; i < args.length; i++) command[3 + n + i] = args[i] as string;
    let sent: Promise<unknown>;
    try {
      sent = send(command);
    } catch (error) {
      sent = Promise.reject(error);
    }
    return sent.then(normalizeReply, (error: unknown) =>
      this.#onFailure(error, send, command, keys, options),
    );
  }

  #onFailure(
    error: unknown,
    send: SendCommand,
    command: string[],
    keys: readonly string[],
    options: RunOptions | undefined,
  ): Promise<unknown> {
    if (!isNoScript(error)) throw error;
    options?.onNoScript?.();
    if (options?.abandoned) throw error;
    const retryArgs = options?.retryArgs;
    if (retryArgs !== undefined)
      return send(['EVAL', this.source, command[2] as string, ...keys, ...retryArgs]).then(normalizeReply);
    command[0] = 'EVAL';
    command[1] = this.source;
    return send(command).then(normalizeReply);
  }

  /**
   * EVAL with the source, for clean-ups: with replies being lost, the NOSCRIPT answer that would make `run` send
   * the source can be lost too, and the clean-up would never run (the cache is empty after every restart).
   */
  runWhole(send: SendCommand, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    return send(['EVAL', this.source, String(keys.length), ...keys, ...args]).then(normalizeReply);
  }
}
