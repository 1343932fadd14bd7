/**
 * The bench library every backend suite uses (bench/src/<backend>/index.mjs calls runSuite with its subjects).
 * See subject.mjs for the Subject interface and scenarios.mjs for what each scenario measures and returns.
 */
export { describeMachine, ENDPOINTS, machineInfo, packageVersion } from './env.mjs';
export { lockClientSubject } from './lock-client-subject.mjs';
export {
  contendedTable,
  fmt,
  heldTable,
  markdownTable,
  subjectsTable,
  uncontendedTable,
  updateReadme,
} from './report.mjs';
export { runContended, runHeld, runUncontended } from './scenarios.mjs';
export { cpuSeconds, percentile, ratio, summarize } from './stats.mjs';
export { checkSubject } from './subject.mjs';
export { parseFlags, runSuite } from './suite.mjs';
export { BenchTimeoutError, now, sleep, uniqueName, withTimeout } from './time.mjs';
