// One racer process-thread with its own better-sqlite3 connection. Plain JS on the built package, because worker
// threads load files with Node itself, not through vitest's transform.
import { parentPort, workerData } from 'node:worker_threads';
import { fenced } from '@dlock/fencing-kysely';
import SqliteDatabase from 'better-sqlite3';
import { CompiledQuery, Kysely, SqliteDialect } from 'kysely';

const { file, table, data } = workerData;
const database = new SqliteDatabase(file, { timeout: 10_000 });
const db = new Kysely({ dialect: new SqliteDialect({ database }) });

parentPort.on('message', async (message) => {
  if (message.type === 'close') {
    await db.destroy();
    parentPort.close();
    return;
  }
  const { resource, tokens } = message;
  const results = await Promise.all(
    tokens.map((token) =>
      fenced(
        db,
        resource,
        token,
        (trx) =>
          trx.executeQuery(
            CompiledQuery.raw(`INSERT INTO "${data}" (resource, token) VALUES (?, CAST(? AS INTEGER))`, [
              resource,
              token,
            ]),
          ),
        { table },
      ).then(
        () => ({ token, outcome: 'accepted' }),
        (error) => ({ token, outcome: error.code ?? String(error), mark: error.highWaterMark?.toString() }),
      ),
    ),
  );
  parentPort.postMessage(results);
});
parentPort.postMessage('ready');
