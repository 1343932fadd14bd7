/**
 * Formatting of results: padded markdown tables (readable in a terminal and in README.md) where every figure sits
 * beside its ratio to the baseline row of the same run, e.g. `5,120 (0.97×)`.
 *
 *   uncontendedTable(results)   (A) rows from runUncontended
 *   contendedTable(results)     (B) rows from runContended (one worker count per table)
 *   heldTable(results, labels?) (C) rows from runHeld
 *   subjectsTable(subjects)     name, exact version and configuration of each subject
 *   markdownTable(headers, rows), fmt(value, digits)
 *   updateReadme(backend, markdown)  replaces the backend's section of bench/README.md between
 *                                    `<!-- bench:<backend>:start -->` and `<!-- bench:<backend>:end -->`
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { ratio } from './stats.mjs';

const README = new URL('../../README.md', import.meta.url);

export function fmt(value, digits = 0) {
  if (typeof value !== 'number' || Number.isNaN(value)) return '—';
  if (!Number.isFinite(value)) return '∞';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function times(r) {
  if (Number.isNaN(r)) return '';
  if (!Number.isFinite(r)) return ' (∞×)';
  return ` (${fmt(r, r < 10 ? 2 : 0)}×)`;
}

/** `value` in its unit, then its ratio to the baseline's value. */
function cell(value, base, digits = 0, unit = '') {
  if (typeof value !== 'number' || Number.isNaN(value)) return '—';
  return `${fmt(value, digits)}${unit}${times(ratio(value, base))}`;
}

export function markdownTable(headers, rows) {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => `| ${cells.map((c, i) => String(c).padEnd(widths[i])).join(' | ')} |`;
  return [line(headers), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

const baselineOf = (results) => results.find((r) => r.baseline);

/** Columns for an optional figure appear only when some row has it. */
const has = (results, key) => results.some((r) => Number.isFinite(r[key]));

function label(r) {
  return r.baseline ? `${r.subject} (baseline)` : r.subject;
}

function problems(r) {
  const out = [];
  if (r.overlaps) out.push(`${r.overlaps} OVERLAPPING GRANTS`);
  if (r.failures) out.push(`${r.failures} not granted`);
  if (r.timeouts) out.push(`${r.timeouts} waits timed out`);
  if (r.errors) out.push(`${r.errors} errors`);
  if (r.acquireErrors) out.push(`${r.acquireErrors} acquires failed`);
  if (r.lost) out.push(`${r.lost} lost`);
  if (r.capped || r.unfinished) out.push('hit its time cap');
  if (r.firstError) out.push(`first error: ${r.firstError.replace(/\s+/g, ' ').slice(0, 80)}`);
  return out.join('; ') || 'ok';
}

export function uncontendedTable(results) {
  const b = baselineOf(results) ?? {};
  const bl = b.latencyMs ?? {};
  const commands = has(results, 'commandsPerOp');
  return markdownTable(
    [
      'Subject',
      'ops/s',
      'p50',
      'p99',
      'requests/op',
      ...(commands ? ['server commands/op'] : []),
      'client CPU/op',
      'notes',
    ],
    results.map((r) => [
      label(r),
      cell(r.opsPerSec, b.opsPerSec),
      cell(r.latencyMs.p50 * 1000, bl.p50 * 1000, 0, ' µs'),
      cell(r.latencyMs.p99 * 1000, bl.p99 * 1000, 0, ' µs'),
      cell(r.requestsPerOp, b.requestsPerOp, 2),
      ...(commands ? [cell(r.commandsPerOp, b.commandsPerOp, 2)] : []),
      cell(r.cpuUsPerOp, b.cpuUsPerOp, 0, ' µs'),
      problems(r),
    ]),
  );
}

export function contendedTable(results) {
  const b = baselineOf(results) ?? {};
  const bg = b.handoffGapMs ?? {};
  const commands = has(results, 'commandsPerAcquisition');
  return markdownTable(
    [
      'Subject',
      'acquisitions/s',
      'to another worker',
      'handoff gap p50',
      'handoff gap p99',
      'requests/acq',
      ...(commands ? ['server commands/acq'] : []),
      'per worker min..max',
      'client CPU',
      'notes',
    ],
    results.map((r) => [
      label(r),
      cell(r.acquisitionsPerSec, b.acquisitionsPerSec),
      `${fmt(r.handoffShare * 100, 1)} %`,
      cell(r.handoffGapMs.p50, bg.p50, 2, ' ms'),
      cell(r.handoffGapMs.p99, bg.p99, 2, ' ms'),
      cell(r.requestsPerAcquisition, b.requestsPerAcquisition, 2),
      ...(commands ? [cell(r.commandsPerAcquisition, b.commandsPerAcquisition, 2)] : []),
      `${fmt(r.perWorker.min)}..${fmt(r.perWorker.max)}${times(r.perWorker.spread)}`,
      cell(r.cpuSeconds, b.cpuSeconds, 2, ' s'),
      problems(r),
    ]),
  );
}

/** `labels` renames the two counted columns when a suite's counters measure something more specific. */
export function heldTable(results, labels = {}) {
  const b = baselineOf(results) ?? {};
  const commands = has(results, 'commandsPerSec');
  return markdownTable(
    [
      'Subject',
      'held',
      labels.requests ?? 'requests/s',
      ...(commands ? [labels.commands ?? 'server commands/s'] : []),
      'client CPU in window',
      'share of a core',
      'notes',
    ],
    results.map((r) => [
      label(r),
      `${fmt(r.held)} / ${fmt(r.locks)}`,
      cell(r.requestsPerSec, b.requestsPerSec, 1),
      ...(commands ? [cell(r.commandsPerSec, b.commandsPerSec, 1)] : []),
      cell(r.cpuSeconds, b.cpuSeconds, 3, ' s'),
      `${fmt(r.cpuShare * 100, 1)} %`,
      problems(r),
    ]),
  );
}

export function subjectsTable(subjects) {
  return markdownTable(
    ['Subject', 'Version', 'Configuration'],
    subjects.map((s) => [s.baseline ? `${s.name} (baseline)` : s.name, s.version, s.config ?? '']),
  );
}

export function updateReadme(backend, markdown) {
  const start = `<!-- bench:${backend}:start -->`;
  const end = `<!-- bench:${backend}:end -->`;
  let text;
  try {
    text = readFileSync(README, 'utf8');
  } catch {
    text = '# @dlock/bench\n';
  }
  const block = `${start}\n${markdown.trim()}\n${end}`;
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  text =
    i >= 0 && j > i
      ? text.slice(0, i) + block + text.slice(j + end.length)
      : `${text.trimEnd()}\n\n${block}\n`;
  writeFileSync(README, text);
}
