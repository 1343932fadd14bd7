import { REDIS_URL } from '@dlock/test-utils';
import { type ContractSubject, lockServiceContract } from '@dlock/testing/contract';
import { afterAll, beforeAll } from 'vitest';
import { type RedisClientLike, RedisLockService } from '../src/index.js';
import { FAMILIES } from './clients.js';
import { connect, disconnect, type Redis, SideRedis } from './helpers.js';

// Against the shared server, with a fresh client and service per test, as an application would use them; once
// with each supported client family, major and protocol.
// Waiters queue in Redis, so the suite checks arrival order too; calls after close() must say CLIENT_CLOSED.
const closeService = async (subject: ContractSubject): Promise<void> => {
  await (subject.service as RedisLockService).close();
};
for (const family of FAMILIES) {
  lockServiceContract(
    `RedisLockService (${family.label})`,
    async () => {
      const connected = await family.connect(REDIS_URL);
      const service = new RedisLockService({
        client: connected.client as RedisClientLike,
        keyPrefix: 'dlock-test:',
        fenceRetentionMs: 60_000,
      });
      return {
        service,
        close: async () => {
          await service.close();
          await connected.close();
        },
      };
    },
    { fifo: true, closeService },
  );
}

// On a private server the suite may kill: tokens must keep increasing when Redis comes back empty.
{
  let side: SideRedis;
  let client: Redis;
  beforeAll(async () => {
    side = await SideRedis.start();
  });
  afterAll(async () => {
    await side.stop();
  });
  lockServiceContract(
    'RedisLockService on a server that restarts empty',
    async () => {
      client = await connect(side.url);
      const service = new RedisLockService({ client, commandTimeoutMs: 1_000 });
      return {
        service,
        close: async () => {
          await service.close();
          await disconnect(client);
        },
      };
    },
    {
      fifo: true,
      closeService,
      faults: [
        {
          name: 'SIGKILL and restart with no data',
          inject: async () => {
            await side.restartEmpty();
          },
          recover: async () => {},
        },
        {
          name: 'SCRIPT FLUSH and FLUSHALL (scripts and counters gone, connection kept)',
          inject: async () => {
            await client.sendCommand(['SCRIPT', 'FLUSH']);
            await client.sendCommand(['FLUSHALL']);
          },
          recover: async () => {},
        },
      ],
    },
  );
}
