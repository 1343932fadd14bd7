/**
 * etcd clients for the bench, each counting the gRPC messages it sends: a client interceptor (given to etcd3
 * through `defaultCallOptions`) sees every unary request and every message written on a stream (keep-alives,
 * watch creates), whoever sends them. So "requests" here are the same unit for every subject, etcd3's own
 * `Lease` keep-alive loop included.
 */
import { createRequire } from 'node:module';
import { Etcd3 } from 'etcd3';
import { ENDPOINTS } from '../lib/index.mjs';

export const ETCD_ENDPOINT = ENDPOINTS.etcd;

// The interceptor must come from the same @grpc/grpc-js copy etcd3 runs on (not a dependency of the bench).
const require = createRequire(import.meta.url);
const { InterceptingCall } = createRequire(require.resolve('etcd3'))('@grpc/grpc-js');

/** A new etcd3 client plus `countRequests()` of the messages it has sent. */
export function connectEtcd() {
  let requests = 0;
  const interceptor = (options, nextCall) =>
    new InterceptingCall(nextCall(options), {
      sendMessage(message, next) {
        requests += 1;
        next(message);
      },
    });
  const client = new Etcd3({
    hosts: ETCD_ENDPOINT,
    defaultCallOptions: () => ({ interceptors: [interceptor] }),
  });
  return { client, countRequests: async () => requests };
}

/** The server's version, from the maintenance API (one request, on a client of its own). */
export async function serverVersion() {
  const client = new Etcd3({ hosts: ETCD_ENDPOINT });
  try {
    const status = await client.maintenance.status({ deadline: Date.now() + 5000 });
    return status.version;
  } finally {
    client.close();
  }
}
