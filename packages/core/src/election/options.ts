import { InvalidArgumentError } from '../errors.js';
import { rejectUnknownKeys, unreadableOptions } from '../option-keys.js';
import { MAX_TIMER_MS, MIN_TTL_MS, validateMetadata } from '../options.js';
import type { CampaignOptions, ElectionOptions, ObserveOptions, RunWhileLeaderOptions } from './election.js';

const ELECTION_KEYS = ['ttlMs'] as const;
const CAMPAIGN_KEYS = ['value', 'waitMs', 'signal', 'onLost'] as const;
const OBSERVE_KEYS = ['signal'] as const;
const RUN_KEYS = ['value', 'signal'] as const;

function plainObject(value: unknown, field: string): Readonly<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(field, 'must be an object');
  }
  return value as Readonly<Record<string, unknown>>;
}

function signalOf(value: unknown, field: string): AbortSignal | undefined {
  if (value !== undefined && !(value instanceof AbortSignal))
    throw new InvalidArgumentError(field, 'must be an AbortSignal');
  return value;
}

function readElectionOptions(options: unknown): ElectionOptions {
  const o = plainObject(options, 'options');
  rejectUnknownKeys(o, 'options', ELECTION_KEYS);
  const ttlMs = o['ttlMs'];
  if (typeof ttlMs !== 'number' || !Number.isInteger(ttlMs) || ttlMs < MIN_TTL_MS || ttlMs > MAX_TIMER_MS) {
    throw new InvalidArgumentError(
      'options.ttlMs',
      `must be an integer from ${MIN_TTL_MS} to ${MAX_TIMER_MS}`,
    );
  }
  return { ttlMs };
}

export function resolveElectionOptions(options: unknown): ElectionOptions {
  try {
    return readElectionOptions(options);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

export interface ResolvedCampaign {
  readonly value: string;
  readonly waitMs: number;
  readonly signal: AbortSignal | undefined;
  readonly onLost: CampaignOptions['onLost'];
}

function readCampaignOptions(options: unknown, defaultValue: string): ResolvedCampaign {
  const o = options === undefined ? {} : plainObject(options, 'options');
  rejectUnknownKeys(o, 'options', CAMPAIGN_KEYS);
  const waitMs = o['waitMs'] ?? 0;
  if (
    typeof waitMs !== 'number' ||
    Number.isNaN(waitMs) ||
    waitMs < 0 ||
    (waitMs > MAX_TIMER_MS && waitMs !== Number.POSITIVE_INFINITY)
  ) {
    throw new InvalidArgumentError(
      'options.waitMs',
      `must be a number from 0 to ${MAX_TIMER_MS}, or Infinity`,
    );
  }
  const onLost = o['onLost'];
  if (onLost !== undefined && typeof onLost !== 'function') {
    throw new InvalidArgumentError('options.onLost', 'must be a function');
  }
  return {
    value: o['value'] === undefined ? defaultValue : validateMetadata(o['value'], 'options.value'),
    waitMs,
    signal: signalOf(o['signal'], 'options.signal'),
    onLost: onLost as CampaignOptions['onLost'],
  };
}

export function resolveCampaignOptions(options: unknown, defaultValue: string): ResolvedCampaign {
  try {
    return readCampaignOptions(options, defaultValue);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

function readObserveOptions(options: unknown): { signal: AbortSignal | undefined } {
  const o = options === undefined ? {} : plainObject(options, 'options');
  rejectUnknownKeys(o, 'options', OBSERVE_KEYS);
  return { signal: signalOf(o['signal'], 'options.signal') };
}

export function resolveObserveOptions(options: unknown): { signal: AbortSignal | undefined } {
  try {
    return readObserveOptions(options);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

function readRunOptions(
  fn: unknown,
  options: unknown,
  defaultValue: string,
): { value: string; signal: AbortSignal | undefined } {
  if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'must be a function');
  const o = options === undefined ? {} : plainObject(options, 'options');
  rejectUnknownKeys(o, 'options', RUN_KEYS);
  return {
    value: o['value'] === undefined ? defaultValue : validateMetadata(o['value'], 'options.value'),
    signal: signalOf(o['signal'], 'options.signal'),
  };
}

export function resolveRunOptions(
  fn: unknown,
  options: unknown,
  defaultValue: string,
): { value: string; signal: AbortSignal | undefined } {
  try {
    return readRunOptions(fn, options, defaultValue);
  } catch (error) {
    throw unreadableOptions(error, 'options');
  }
}

export type { ObserveOptions, RunWhileLeaderOptions };
