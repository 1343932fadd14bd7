/** The servers `scripts/services.sh` starts. Override per run with env vars. */
export const PG_URL = process.env['DLOCK_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
export const MYSQL_URL = process.env['DLOCK_TEST_MYSQL_URL'] ?? 'mysql://root@127.0.0.1:3306/test';
export const REDIS_URL = process.env['DLOCK_TEST_REDIS_URL'] ?? 'redis://127.0.0.1:6379';
export const ETCD_ENDPOINT = process.env['DLOCK_TEST_ETCD_ENDPOINT'] ?? 'http://127.0.0.1:2379';
export const ZK_CONNECT = process.env['DLOCK_TEST_ZK_CONNECT'] ?? '127.0.0.1:2181';
