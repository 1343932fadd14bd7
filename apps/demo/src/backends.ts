import { UsageError } from './errors.js';

/** Which lock service the workers share. Plain data: it is sent to every worker thread. */
export type LockSpec =
  | { readonly kind: 'memory' }
  | { readonly kind: 'redis'; readonly url: string }
  | { readonly kind: 'etcd'; readonly hosts: readonly string[] }
  | { readonly kind: 'zookeeper'; readonly connectionString: string }
  | { readonly kind: 'postgres'; readonly url: string };

/** Which database holds the ledger and the fencing marks. */
export type DbSpec = { readonly kind: 'pglite' } | { readonly kind: 'postgres'; readonly url: string };

const LOCK_SCHEMES =
  'memory, redis://host:port, etcd://host:port, zk://host:port, postgres://user@host:port/db';
const DB_SCHEMES = 'pglite, postgres://user@host:port/db';

/**
 * Parses `--lock`: `memory` (the default), `redis://…`, `rediss://…`, `etcd://h:p[,h:p]`, `zk://h:p[,h:p][/chroot]`,
 * `postgres://…` / `postgresql://…`.
 */
export function parseLockUrl(text: string): LockSpec {
  const value = text.trim();
  if (value === '' || value === 'memory' || value === 'memory:' || value === 'memory://')
    return { kind: 'memory' };
  const scheme = schemeOf(value, '--lock', LOCK_SCHEMES);
  switch (scheme) {
    case 'redis':
    case 'rediss': {
      const url = parseUrl(value, '--lock');
      requireHost(url, '--lock', value);
      if (url.pathname !== '' && url.pathname !== '/' && !/^\/\d{1,2}$/.test(url.pathname)) {
        throw new UsageError(`--lock: a redis URL's path must be a database number, got "${url.pathname}"`);
      }
      return { kind: 'redis', url: value };
    }
    case 'etcd':
      return { kind: 'etcd', hosts: hostList(value, 'etcd', 2379).map((h) => `http://${h}`) };
    case 'zk':
    case 'zookeeper': {
      const rest = value.slice(value.indexOf('://') + 3);
      const slash = rest.indexOf('/');
      const chroot = slash === -1 ? '' : rest.slice(slash);
      if (chroot !== '' && !/^(\/[A-Za-z0-9._-]+)+$/.test(chroot)) {
        throw new UsageError(`--lock: bad ZooKeeper chroot "${chroot}" (expected e.g. /dlock)`);
      }
      return { kind: 'zookeeper', connectionString: hostList(value, scheme, 2181).join(',') + chroot };
    }
    case 'postgres':
    case 'postgresql': {
      const url = parseUrl(value, '--lock');
      requireHost(url, '--lock', value);
      return { kind: 'postgres', url: value };
    }
    default:
      throw new UsageError(`--lock: unsupported scheme "${scheme}:" (use ${LOCK_SCHEMES})`);
  }
}

/** Parses `--db`: `pglite` (the default, in-process) or `postgres://…` / `postgresql://…`. */
export function parseDbUrl(text: string): DbSpec {
  const value = text.trim();
  if (value === '' || value === 'pglite' || value === 'pglite:' || value === 'pglite://')
    return { kind: 'pglite' };
  const scheme = schemeOf(value, '--db', DB_SCHEMES);
  if (scheme !== 'postgres' && scheme !== 'postgresql') {
    throw new UsageError(`--db: unsupported scheme "${scheme}:" (use ${DB_SCHEMES})`);
  }
  const url = parseUrl(value, '--db');
  requireHost(url, '--db', value);
  return { kind: 'postgres', url: value };
}

/** How a spec is shown to people: never with a password. */
export function describeLock(spec: LockSpec): string {
  switch (spec.kind) {
    case 'memory':
      return 'in-memory (MemoryLockService, served to the worker threads over MessagePorts)';
    case 'redis':
      return `Redis ${redact(spec.url)}`;
    case 'etcd':
      return `etcd ${spec.hosts.join(',')}`;
    case 'zookeeper':
      return `ZooKeeper ${spec.connectionString}`;
    case 'postgres':
      return `PostgreSQL ${redact(spec.url)}`;
  }
}

export function describeDb(spec: DbSpec): string {
  return spec.kind === 'pglite' ? 'PGlite (in-process PostgreSQL)' : `PostgreSQL ${redact(spec.url)}`;
}

/** A short tag naming the lock service, to namespace fencing resources (tokens of two services never compare). */
export function lockTag(spec: LockSpec): string {
  return spec.kind === 'memory' ? 'memory' : spec.kind;
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

function schemeOf(value: string, flag: string, expected: string): string {
  const match = /^([A-Za-z][A-Za-z0-9+.-]*):\/\//.exec(value);
  if (!match?.[1]) throw new UsageError(`${flag}: "${value}" is not a URL (use ${expected})`);
  return match[1].toLowerCase();
}

function parseUrl(value: string, flag: string): URL {
  try {
    return new URL(value);
  } catch {
    throw new UsageError(`${flag}: "${value}" is not a valid URL`);
  }
}

function requireHost(url: URL, flag: string, value: string): void {
  if (url.hostname === '') throw new UsageError(`${flag}: "${value}" has no host`);
  if (url.port !== '' && !isPort(url.port)) throw new UsageError(`${flag}: bad port in "${value}"`);
}

/** `scheme://h1:p1,h2:p2[/…]` → `['h1:p1', 'h2:p2']`, the port defaulting to `defaultPort`. */
function hostList(value: string, scheme: string, defaultPort: number): string[] {
  const rest = value.slice(value.indexOf('://') + 3);
  const hostsPart = rest.split('/')[0] ?? '';
  if (hostsPart === '') throw new UsageError(`--lock: "${value}" has no host`);
  return hostsPart.split(',').map((entry) => {
    const match = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([^:]*))?$/.exec(entry);
    if (!match?.[1]) throw new UsageError(`--lock: bad host "${entry}" in ${scheme} URL "${value}"`);
    const port = match[2] ?? String(defaultPort);
    if (!isPort(port)) throw new UsageError(`--lock: bad port "${port}" in ${scheme} URL "${value}"`);
    return `${match[1]}:${port}`;
  });
}

function isPort(text: string): boolean {
  return /^\d{1,5}$/.test(text) && Number(text) >= 1 && Number(text) <= 65535;
}
