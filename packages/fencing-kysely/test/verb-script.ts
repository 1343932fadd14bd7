import type { Kysely, Transaction } from 'kysely';
import { checkFence, type FencedOptions, fenced, highWaterMark, runFenced } from '../src/index.js';
import { type protectedTable, type TestDb, uniqueName } from './databases.js';

export type VerbSet = 'runFenced/checkFence' | 'fenced (deprecated)';

export interface StepResult {
  readonly outcome: unknown;
  readonly sql: readonly string[];
}

export interface ScriptContext {
  readonly t: TestDb;
  readonly options: { readonly table: string };
  readonly writes: ReturnType<typeof protectedTable>;
}

/**
 * One script of calls through one verb set, on a fresh resource: every step's outcome (errors reduced to their
 * fields, the resource name blanked out) and the SQL text it sent. Two verb sets that fence alike give equal lists.
 */
export async function verbScript(ctx: ScriptContext, verbs: VerbSet): Promise<StepResult[]> {
  const { t, options, writes } = ctx;
  const db = t.db;
  const r = `verbs/${uniqueName(verbs.slice(0, 3))}`;
  const modern = verbs === 'runFenced/checkFence';
  const run = <T>(
    token: bigint | string,
    fn: (trx: Transaction<unknown>) => Promise<T>,
    o: object = options,
  ) => (modern ? runFenced(db, r, token, fn, o) : fenced(db, r, token, fn, o));
  // In a transaction of the caller's: the new verbs check, then the caller writes; `fenced` did both.
  const inOwn = <T>(
    trx: Transaction<unknown>,
    token: bigint,
    fn: (t: Transaction<unknown>) => Promise<T>,
    o: object = {},
  ) =>
    modern
      ? checkFence(trx, r, token, { ...options, ...o }).then(() => fn(trx))
      : fenced(trx, r, token, fn, { ...options, ...o });
  const write = (token: bigint) => (trx: Kysely<unknown>) => writes.insert(trx, r, token).then(() => 'wrote');
  const serializable: FencedOptions = {
    ...options,
    isolationLevel: 'serializable',
    ...(t.dialect === 'postgres' ? { lockTimeoutMs: 1000 } : {}),
  };

  const steps: Array<() => Promise<unknown>> = [
    () => run(5n, write(5n)),
    () => run('5', write(5n)),
    () => run(4n, write(4n)),
    () =>
      run(6n, async (trx) => {
        await write(6n)(trx);
        throw new Error('app failure');
      }),
    () => run(7n, write(7n), serializable),
    () => run(8n, write(8n), { ...options, lockTimeoutMS: 5 }),
    () => run(8n, 'not a function' as never),
    () => db.transaction().execute((trx) => inOwn(trx, 9n, write(9n))),
    () =>
      db.transaction().execute(async (trx) => {
        await writes.insert(trx, r, 1n); // before the gate: must vanish with the rollback
        return inOwn(trx, 8n, write(8n));
      }),
    () => db.transaction().execute((trx) => inOwn(trx, 10n, write(10n), { isolationLevel: 'serializable' })),
    () => highWaterMark(db, r, options),
    () => writes.tokens(db, r),
  ];

  const results: StepResult[] = [];
  for (const step of steps) {
    t.resetQueryCount();
    const outcome = await step().then(
      (value) => ({ value }),
      (
        error: { name?: string; code?: string; field?: string; message?: string } & Record<string, unknown>,
      ) => ({
        error: error.name,
        code: error.code,
        field: error.field,
        token: error['token'],
        highWaterMark: error['highWaterMark'],
        message: error.message?.replaceAll(r, 'R'),
      }),
    );
    results.push({ outcome, sql: [...t.queries()] });
  }
  return results;
}
