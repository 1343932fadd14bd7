export { acquireInQueue, type QueueTools } from './acquire-in-queue.js';
export { BackgroundRetries } from './background-retries.js';
export type { QueueDriver, Standing } from './queue-driver.js';
