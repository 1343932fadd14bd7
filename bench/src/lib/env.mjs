/**
 * What a result depends on, recorded next to it: server addresses, installed versions and the machine.
 *
 *   ENDPOINTS                    { redis, etcd, zookeeper, postgres } from DLOCK_BENCH_REDIS_URL / _ETCD_ENDPOINT /
 *                                _ZK_CONNECT / _PG_URL
 *                                (defaults: the servers scripts/services.sh starts on 127.0.0.1)
 *   packageVersion(name)         exact version from the installed package.json under bench/node_modules
 *                                (works for packages whose `exports` hide ./package.json)
 *   machineInfo()                { date, cpus, cpuModel, node, os, memoryGiB, loadavg, commit }
 *   describeMachine(info, extra) one line for a report, e.g. "2 × Xeon …, Node v20…, Linux …, load 0.3"
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';

export const ENDPOINTS = {
  redis: process.env['DLOCK_BENCH_REDIS_URL'] ?? 'redis://127.0.0.1:6379',
  etcd: process.env['DLOCK_BENCH_ETCD_ENDPOINT'] ?? 'http://127.0.0.1:2379',
  zookeeper: process.env['DLOCK_BENCH_ZK_CONNECT'] ?? '127.0.0.1:2181',
  postgres: process.env['DLOCK_BENCH_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test',
};

const BENCH_ROOT = new URL('../../', import.meta.url);

export function packageVersion(name) {
  const file = new URL(`node_modules/${name}/package.json`, BENCH_ROOT);
  return JSON.parse(readFileSync(file, 'utf8')).version;
}

function gitCommit() {
  try {
    const opts = { cwd: BENCH_ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 };
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], opts).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', '..'], opts).trim() !== '';
    return dirty ? `${sha} + uncommitted changes` : sha;
  } catch {
    return 'unknown';
  }
}

export function machineInfo() {
  const cpus = os.cpus();
  return {
    date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    cpus: cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    node: process.version,
    os: `${os.type()} ${os.release()}`,
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    loadavg: os.loadavg().map((l) => Math.round(l * 100) / 100),
    commit: gitCommit(),
  };
}

export function describeMachine(info, extra = []) {
  return [
    `${info.cpus} × ${info.cpuModel}`,
    `${info.memoryGiB} GiB`,
    `Node ${info.node}`,
    info.os,
    ...extra,
    `load average ${info.loadavg.join(' / ')} at start`,
    `commit ${info.commit}`,
  ].join(', ');
}
