import type { Etcd3 } from 'etcd3';
import { escapeName } from '../src/keys.js';

/** Every key of a semaphore in etcd right now (holders and waiters, under any limit), by key name. */
export async function semaphoreKeys(
  etcd: Etcd3,
  prefix: string,
  name: string,
): Promise<Record<string, string>> {
  return etcd
    .getAll()
    .prefix(`${prefix}%sem/${escapeName(name)}/`)
    .strings();
}

/** The keys of a semaphore's waiters (queue keys). */
export async function queuedKeys(etcd: Etcd3, prefix: string, name: string): Promise<string[]> {
  return Object.keys(await semaphoreKeys(etcd, prefix, name)).filter((key) => /\/q\/[^/]+$/.test(key));
}
