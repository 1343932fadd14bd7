/** Elections on ZooKeeper (issue 14): run by `node src/run.mjs zookeeper:elections`; see suite.mjs. */
import { runElectionSuite } from './suite.mjs';

await runElectionSuite('zookeeper');
