import { type Clock, InvalidArgumentError } from '@dlock/core';
import type { RedisConnection, RedisSubscription } from './connection.js';
import {
  type IORedisClient,
  type IORedisCluster,
  IORedisConnection,
  type IORedisStandalone,
} from './ioredis.js';
import {
  type NodeRedisClient,
  type NodeRedisCluster,
  NodeRedisClusterConnection,
  NodeRedisConnection,
} from './node-redis.js';

/**
 * Which client library an object passed as a client comes from, told apart by shape alone (the adapter imports no
 * client library), and the adapter that speaks its contract. Libraries share method names with different
 * contracts — ioredis' `sendCommand` takes a Command object, node-redis 4 has no `close()` — so a client the
 * services cannot use is refused at construction, never later inside a callback where an error would crash the
 * process. The first kind that matches wins.
 */
interface ClientKind {
  /** How the error message names it: "an ioredis client". */
  readonly name: string;
  readonly family: 'node-redis' | 'ioredis' | 'other';
  readonly cluster: boolean;
  matches(value: Readonly<Record<string, unknown>>): boolean;
  /** Why this client cannot be used as it is now (not connected, ...); undefined when it can. */
  unusable?(value: Readonly<Record<string, unknown>>): string | undefined;
  /** Absent for kinds no service supports. */
  connect?(value: object, name: string, clock: Clock): RedisConnection;
  adopt?(value: object): RedisSubscription;
}

const fn = (value: Readonly<Record<string, unknown>>, ...names: string[]): boolean =>
  names.every((name) => typeof value[name] === 'function');

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
];
const NODE_REDIS_CLUSTER_METHODS = [
  'sendCommand',
  'duplicate',
  'connect',
  'sSubscribe',
  'sUnsubscribe',
  'on',
  'off',
  'close',
  'destroy',
  'getSlotMaster',
];
const IOREDIS_METHODS = [
  'call',
  'duplicate',
  'connect',
  'subscribe',
  'ssubscribe',
  'on',
  'off',
  'quit',
  'disconnect',
];

const nodeRedisClosed = (v: Readonly<Record<string, unknown>>): string | undefined =>
  v['isOpen'] === false ? 'it is not connected (call `await client.connect()` first)' : undefined;

function ioredisUnusable(v: Readonly<Record<string, unknown>>): string | undefined {
  const options = v['options'] as Readonly<Record<string, unknown>> | undefined;
  if (typeof options?.['keyPrefix'] === 'string' && options['keyPrefix'] !== '') {
    // ioredis would prefix the scripts' keys but not the channels derived from them: say so instead of misbehaving.
    return "its `keyPrefix` option is set (use the service's own `keyPrefix` option instead)";
  }
  const status = v['status'];
  if (status === 'wait') return 'it has not connected yet (lazyConnect: call `await client.connect()` first)';
  if (status === 'end') return 'it was closed (status "end")';
  return undefined;
}

const KINDS: readonly ClientKind[] = [
  {
    name: 'an ioredis Cluster client',
    family: 'ioredis',
    cluster: true,
    matches: (v) => typeof v['status'] === 'string' && v['isCluster'] === true && fn(v, ...IOREDIS_METHODS),
    unusable: ioredisUnusable,
    connect: (v, name) => new IORedisConnection(v as IORedisCluster, name),
    adopt: (v) => IORedisConnection.adopt(v as IORedisClient),
  },
  {
    name: 'an ioredis client',
    family: 'ioredis',
    cluster: false,
    matches: (v) => typeof v['status'] === 'string' && v['isCluster'] === false && fn(v, ...IOREDIS_METHODS),
    unusable: ioredisUnusable,
    connect: (v, name) => new IORedisConnection(v as IORedisStandalone, name),
    adopt: (v) => IORedisConnection.adopt(v as IORedisClient),
  },
  {
    name: 'a node-redis cluster client (createCluster)',
    family: 'node-redis',
    cluster: true,
    matches: (v) => fn(v, ...NODE_REDIS_CLUSTER_METHODS) && typeof v['isOpen'] === 'boolean',
    unusable: nodeRedisClosed,
    connect: (v, name, clock) => new NodeRedisClusterConnection(v as NodeRedisCluster, name, clock),
    adopt: (v) => NodeRedisClusterConnection.adopt(v as NodeRedisCluster),
  },
  {
    name: 'a node-redis sentinel client (createSentinel)',
    family: 'other',
    cluster: false,
    matches: (v) => fn(v, 'sendCommand', 'getMasterNode'),
  },
  {
    name: 'a node-redis client pool (createClientPool)',
    family: 'other',
    cluster: false,
    matches: (v) => fn(v, 'sendCommand', 'execute') && typeof v['totalClients'] === 'number',
  },
  {
    name: 'a node-redis 4 client',
    family: 'other',
    cluster: false,
    matches: (v) => fn(v, 'sendCommand', 'commandOptions'),
  },
  {
    name: 'a node-redis 3 (or older) client',
    family: 'other',
    cluster: false,
    matches: (v) => fn(v, 'send_command'),
  },
  {
    name: 'a node-redis 5 or 6 client',
    family: 'node-redis',
    cluster: false,
    matches: (v) =>
      fn(v, ...NODE_REDIS_METHODS) && typeof v['isOpen'] === 'boolean' && typeof v['isReady'] === 'boolean',
    unusable: nodeRedisClosed,
    connect: (v, name) => new NodeRedisConnection(v as NodeRedisClient, name),
    adopt: (v) => NodeRedisConnection.adopt(v as NodeRedisClient),
  },
];

/** What the errors say is supported, per service. */
export const SUPPORTED_CLIENTS =
  'a connected node-redis 5 or 6 client (`createClient`) or cluster (`createCluster`), or an ioredis 5 or 6 `Redis` or `Cluster`';
export const SUPPORTED_NODE_CLIENTS =
  'a connected node-redis 5 or 6 client (`createClient`) or an ioredis 5 or 6 `Redis` (one per independent node, not a cluster)';

/** The first kind `value` matches. A getter that throws (a Proxy, say) makes it no kind rather than a crash. */
function kindOf(value: unknown): ClientKind | undefined {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return undefined;
  try {
    const v = value as Readonly<Record<string, unknown>>;
    return KINDS.find((kind) => kind.matches(v));
  } catch {
    return undefined;
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value !== 'object' && typeof value !== 'function') return `a ${typeof value}`;
  const kind = kindOf(value);
  if (kind) return kind.name;
  try {
    const ctor = (Object.getPrototypeOf(value) as { constructor?: { name?: unknown } } | null)?.constructor
      ?.name;
    const what =
      typeof ctor === 'string' && ctor !== '' && ctor !== 'Object' ? `a ${ctor} object` : 'an object';
    return `${what} that is no Redis client this adapter knows`;
  } catch {
    return 'an object that could not be inspected';
  }
}

interface Checked {
  readonly kind: ClientKind;
  readonly value: object;
}

function check(value: unknown, field: string, allowCluster: boolean): Checked {
  const supported = allowCluster ? SUPPORTED_CLIENTS : SUPPORTED_NODE_CLIENTS;
  const kind = kindOf(value);
  if (kind?.connect === undefined || (kind.cluster && !allowCluster)) {
    throw new InvalidArgumentError(field, `must be ${supported}; got ${describe(value)}`);
  }
  let why: string | undefined;
  try {
    why = kind.unusable?.(value as Readonly<Record<string, unknown>>);
  } catch {
    why = 'it could not be inspected';
  }
  if (why !== undefined) throw new InvalidArgumentError(field, `got ${kind.name}, but ${why}`);
  return { kind, value: value as object };
}

/** The connection for a client a service is given; an `InvalidArgumentError` naming what was passed otherwise. */
export function connectionOf(
  value: unknown,
  field: string,
  options: { allowCluster: boolean; clock: Clock },
): RedisConnection {
  const { kind, value: client } = check(value, field, options.allowCluster);
  return (kind.connect as NonNullable<ClientKind['connect']>)(client, kind.name, options.clock);
}

/**
 * A subscriber connection the user passes next to `client`: it must come from the same family and topology, since
 * it carries the notices that client's scripts publish.
 */
export function subscriptionOf(value: unknown, field: string, client: RedisConnection): RedisSubscription {
  const { kind, value: sub } = check(value, field, client.cluster);
  if (kind.name !== client.description || kind.adopt === undefined) {
    throw new InvalidArgumentError(
      field,
      `must be the same kind of client as options.client (${client.description}); got ${kind.name}`,
    );
  }
  return kind.adopt(sub);
}
