/**
 * The public type of the clients the services take. It is deliberately loose: the adapter imports no client
 * library (each is a peer dependency the user brings), and one structural type cannot spell out four libraries'
 * generics. What a client really is — node-redis 5 or 6 `createClient`/`createCluster`, ioredis 5 or 6
 * `Redis`/`Cluster` — is checked at construction (`clients/detect.ts`), with an `InvalidArgumentError` that names
 * what was passed and what is supported.
 */
export interface RedisClientLike {
  /** Every supported client has it: the service derives its pub/sub connection from the client with it. */
  duplicate(...args: never[]): unknown;
}

/** A pub/sub connection you pass yourself: a connected client of the same kind as `client`. */
export type RedisSubscriberLike = RedisClientLike;

/** A Redlock node's client: a connected node-redis 5 or 6 client or an ioredis 5 or 6 `Redis` (not a cluster). */
export type RedlockClientLike = RedisClientLike;
