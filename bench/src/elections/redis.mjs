/** Elections on Redis (issue 14): run by `node src/run.mjs redis:elections`; see suite.mjs. */
import { runElectionSuite } from './suite.mjs';

await runElectionSuite('redis');
