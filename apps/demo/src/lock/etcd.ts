import { EtcdLockService } from '@dlock/etcd';
import { Etcd3 } from 'etcd3';
import { oneLine } from '../errors.js';
import type { ConnectedService } from './connected-service.js';
import { CONNECT_MS, within } from './deadline.js';

/** gRPC wraps the socket error in a paragraph ("14 UNAVAILABLE: … Last error: Error: connect ECONNREFUSED …"). */
function grpcReason(error: unknown): string {
  const message = oneLine(error);
  const last = /Last error: (?:Error: )?(.+?)\.?(?: Resolution note:.*)?$/.exec(message);
  return last?.[1] ?? message;
}

/** An etcd3 client and the adapter on it (a lease per lock, so one frozen worker loses only its own). */
export async function connectEtcd(hosts: readonly string[]): Promise<ConnectedService> {
  const client = new Etcd3({ hosts: [...hosts], dialTimeout: CONNECT_MS });
  await within(
    client.get('dlock-demo/probe').string(),
    CONNECT_MS,
    `--lock: cannot reach etcd at ${hosts.join(',')}`,
    () => client.close(),
    grpcReason,
  );
  const service = new EtcdLockService({ client });
  return {
    service,
    close: async () => {
      await service.close();
      client.close();
    },
  };
}
