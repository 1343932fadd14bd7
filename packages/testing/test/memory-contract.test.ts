import { MemoryLockService } from '@dlock/core';
import { FakeClock, FaultyLockService } from '@dlock/testing';
import { lockServiceContract } from '@dlock/testing/contract';

// The in-memory service on real time, as a remote adapter would be tested.
// 500 ms leaves renewals (every ~170 ms) plenty of slack on a busy CI machine.
lockServiceContract('MemoryLockService (system clock)', () => ({ service: new MemoryLockService() }), {
  ttlMs: 500,
});

// The same contract with time driven by a FakeClock: the whole suite runs without real sleeps.
{
  const clock = new FakeClock();
  lockServiceContract(
    'MemoryLockService (FakeClock)',
    () => ({ service: new MemoryLockService({ clock }) }),
    {
      ttlMs: 200,
      sleep: (ms) => clock.advance(ms),
      clock,
    },
  );
}

// Through the fault wrapper: tokens keep increasing across a partition that heals.
{
  let faulty: FaultyLockService;
  lockServiceContract(
    'MemoryLockService behind FaultyLockService',
    () => {
      faulty = new FaultyLockService(new MemoryLockService());
      return { service: faulty };
    },
    {
      ttlMs: 500,
      faults: [
        {
          name: 'partition (fail) then heal',
          inject: async () => faulty.partition('fail'),
          recover: async () => faulty.heal(),
        },
        {
          name: 'partition (hang) then heal',
          inject: async () => faulty.partition('hang'),
          recover: async () => faulty.heal(),
        },
        { name: 'three failed calls', inject: async () => faulty.failNext(3), recover: async () => {} },
      ],
    },
  );
}
