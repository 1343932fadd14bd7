export type { InstrumentableClient } from './client-like.js';
export { instrument, type Uninstrument } from './instrument.js';
export { ATTRIBUTES, METRICS, SPANS } from './names.js';
export type { InstrumentOptions } from './options.js';
