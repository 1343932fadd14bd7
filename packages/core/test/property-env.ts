/**
 * The property tests' settings from the environment. A value is read as a whole decimal number or refused: `Number()`
 * turned `DLOCK_PROPERTY_SEED=abc` into NaN, which fast-check ran without a word as seed 0, so the schedules explored
 * were not the ones asked for (and `''` was a silent 0 too).
 */

/** fast-check folds a seed into 32 bits (NaN into 0): outside them, the run is not the one set. */
const SEED_MIN = -(2 ** 31);
const SEED_MAX = 2 ** 31 - 1;

/** `DLOCK_PROPERTY_SEED`, or `fallback` when unset. */
export function propertySeed(fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  return integerFrom(env, 'DLOCK_PROPERTY_SEED', fallback, SEED_MIN, SEED_MAX);
}

/** `DLOCK_PROPERTY_RUNS`, or `fallback` when unset. */
export function propertyRuns(fallback: number, env: NodeJS.ProcessEnv = process.env): number {
  return integerFrom(env, 'DLOCK_PROPERTY_RUNS', fallback, 1, Number.MAX_SAFE_INTEGER);
}

function integerFrom(
  env: NodeJS.ProcessEnv,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const text = env[name];
  if (text === undefined) return fallback;
  const value = /^\s*-?\d+\s*$/.test(text) ? Number(text) : Number.NaN;
  if (!(value >= min && value <= max)) {
    throw new Error(`${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(text)}`);
  }
  return value;
}
