/**
 * A leader that can die for real: the elections suite forks this file, asks it to lead one election per subject,
 * and SIGKILLs it. It never exits by itself while the suite runs.
 *
 *   node leader-child.mjs <backend> <ttlMs>      (forked with an IPC channel)
 *
 * Messages: → { type: 'ready' } once every subject's instance is connected; ← { type: 'lead', names, value } with
 * one election name per subject key → { type: 'leading', keys } once it leads all of them (or { type: 'error' });
 * ← { type: 'close' } closes everything and exits. If the suite's process goes away, so does this one.
 */
import { withTimeout } from '../lib/index.mjs';
import { BACKENDS } from './backends.mjs';

const [backend, ttlArg] = process.argv.slice(2);
const subjects = BACKENDS[backend].subjects(Number(ttlArg));
const instances = new Map();

const send = (message) => process.send?.(message);
const describe = (error) => (error instanceof Error ? error.message : String(error));

process.on('disconnect', () => process.exit(0));

async function closeAll() {
  for (const instance of instances.values()) {
    await withTimeout(instance.close(), 5000, 'close').catch(() => {});
  }
}

try {
  for (const subject of subjects) instances.set(subject.key, await subject.open());
} catch (error) {
  send({ type: 'error', message: `leader process setup: ${describe(error)}` });
  await closeAll();
  process.exit(1);
}

process.on('message', async (message) => {
  if (message?.type === 'close') {
    await closeAll();
    process.exit(0);
  }
  if (message?.type !== 'lead') return;
  try {
    const keys = {};
    await Promise.all(
      subjects.map(async (subject) => {
        const candidate = instances.get(subject.key).campaign(message.names[subject.key], message.value);
        keys[subject.key] = (await withTimeout(candidate.elected, 10_000, `${subject.name} campaign`)).key;
      }),
    );
    send({ type: 'leading', keys });
  } catch (error) {
    send({ type: 'error', message: describe(error) });
  }
});

send({ type: 'ready' });
