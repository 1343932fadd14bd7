/** Elections on etcd (issue 14): run by `node src/run.mjs etcd:elections`; see suite.mjs. */
import { runElectionSuite } from './suite.mjs';

await runElectionSuite('etcd');
