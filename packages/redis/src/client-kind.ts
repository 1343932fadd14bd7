import { InvalidArgumentError } from '@dlock/core';

/**
 * Which Redis client library an object passed as a client comes from, told apart by shape alone (the adapter never
 * imports a client library). Other libraries' clients have methods of the same names with other contracts —
 * ioredis' `sendCommand` takes a Command object, its `subscribe` callback gets `(error, count)`, node-redis 4 has no
 * `close()` — so a look-alike is refused at construction instead of failing later inside a callback, where an error
 * would crash the process.
 *
 * To support another library, add a kind here with `supported: true` and route it to a client seam that speaks its
 * contract; the order of the list matters only in that the first match wins.
 */
interface ClientKind {
  /** How the error message names it: "an ioredis client". */
  readonly name: string;
  readonly supported: boolean;
  matches(value: Readonly<Record<string, unknown>>): boolean;
}

const fn = (value: Readonly<Record<string, unknown>>, ...names: string[]): boolean =>
  names.every((name) => typeof value[name] === 'function');

const bool = (value: Readonly<Record<string, unknown>>, ...names: string[]): boolean =>
  names.every((name) => typeof value[name] === 'boolean');

/** What the services call on a node-redis 5 or 6 client and on the subscriber it duplicates (see `client-like.ts`). */
const NODE_REDIS_METHODS = [
  'sendCommand',
  'duplicate',
  'connect',
  'subscribe',
  'unsubscribe',
  'on',
  'off',
  'close',
  'destroy',
] as const;

const KINDS: readonly ClientKind[] = [
  {
    name: 'an ioredis Cluster client',
    supported: false,
    matches: (v) => typeof v['status'] === 'string' && v['isCluster'] === true,
  },
  {
    name: 'an ioredis client',
    supported: false,
    matches: (v) => typeof v['status'] === 'string' && typeof v['isCluster'] === 'boolean',
  },
  {
    name: 'a node-redis cluster client (createCluster)',
    supported: false,
    matches: (v) => fn(v, 'sendCommand', 'getSlotMaster'),
  },
  {
    name: 'a node-redis sentinel client (createSentinel)',
    supported: false,
    matches: (v) => fn(v, 'sendCommand', 'getMasterNode'),
  },
  {
    name: 'a node-redis client pool (createClientPool)',
    supported: false,
    matches: (v) => fn(v, 'sendCommand', 'execute') && typeof v['totalClients'] === 'number',
  },
  {
    name: 'a node-redis 4 client',
    supported: false,
    matches: (v) => fn(v, 'sendCommand', 'commandOptions'),
  },
  {
    name: 'a node-redis 3 (or older) client',
    supported: false,
    matches: (v) => fn(v, 'send_command'),
  },
  {
    name: 'a node-redis 5 or 6 client',
    supported: true,
    matches: (v) => fn(v, ...NODE_REDIS_METHODS) && bool(v, 'isOpen', 'isReady'),
  },
];

/** What the error says is supported. */
export const SUPPORTED_CLIENTS = 'a node-redis 5 or 6 client (`createClient()` from `redis` ^5.11.0 or ^6)';

/** The first kind `value` matches. A getter that throws (a Proxy, say) makes it no kind rather than a crash. */
function kindOf(value: Readonly<Record<string, unknown>>): ClientKind | undefined {
  try {
    return KINDS.find((kind) => kind.matches(value));
  } catch {
    return undefined;
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value !== 'object' && typeof value !== 'function') return `a ${typeof value}`;
  const v = value as Readonly<Record<string, unknown>>;
  const kind = kindOf(v);
  if (kind) return kind.name;
  try {
    return describeUnknown(v);
  } catch {
    return 'an object that could not be inspected';
  }
}

function describeUnknown(v: Readonly<Record<string, unknown>>): string {
  const missing = NODE_REDIS_METHODS.filter((name) => typeof v[name] !== 'function');
  const ctor = (Object.getPrototypeOf(v) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  const what =
    typeof ctor === 'string' && ctor !== '' && ctor !== 'Object' ? `a ${ctor} object` : 'an object';
  return missing.length > 0
    ? `${what} without ${missing.join(', ')}`
    : `${what} whose isOpen/isReady are not booleans`;
}

/** Throws an `InvalidArgumentError` naming what was passed unless `value` is a client the services can use. */
export function checkNodeRedisClient(value: unknown, field: string): void {
  if (typeof value === 'object' && value !== null && kindOf(value as Record<string, unknown>)?.supported)
    return;
  throw new InvalidArgumentError(field, `must be ${SUPPORTED_CLIENTS}; got ${describe(value)}`);
}
