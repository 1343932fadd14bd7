// Draws the benchmark charts of the docs site from the bench's raw results (bench/results/<suite>.json, written by
// a full `pnpm bench` run beside its README tables): one SVG per scenario under docs/public/bench/, and the
// markdown that shows them, docs/.generated/bench-charts.md, which docs/benchmarks.md includes. Run before
// VitePress (`pnpm docs:build` does); nothing here is drawn by hand.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const RESULTS = fileURLToPath(new URL('../../bench/results/', import.meta.url));
const SVG_DIR = fileURLToPath(new URL('../public/bench/', import.meta.url));
const MD_FILE = fileURLToPath(new URL('../.generated/bench-charts.md', import.meta.url));

const COLORS = { baseline: '#8a8f98', dlock: '#3451b2', peer: '#d97706' };
const WIDTH = 900;
const LABEL_W = 220;
const VALUE_W = 300;
const ROW_H = 24;
const TOP = 58;

const xml = (s) =>
  String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
const kind = (row) => (row.baseline ? 'baseline' : row.subject.startsWith('@dlock') ? 'dlock' : 'peer');
const fmt = (n, digits = 0) =>
  Number.isFinite(n)
    ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : '—';

/**
 * A horizontal bar chart: one row per bar, `rows` of `{ label, value, kind, note }`; `log` draws the bars on a
 * log10 scale (for figures that span orders of magnitude, like requests per second to hold 1,000 locks).
 */
function barChart({ title, subtitle, rows, unit, log = false, digits = 0 }) {
  const plotW = WIDTH - LABEL_W - VALUE_W;
  const finite = rows.map((r) => r.value).filter((v) => Number.isFinite(v) && v > 0);
  const max = Math.max(...finite, 1);
  const min = log ? Math.min(...finite, 1) / 2 : 0;
  const scale = (v) => {
    if (!Number.isFinite(v) || v <= 0) return 0;
    if (!log) return (v / max) * plotW;
    return ((Math.log10(v) - Math.log10(min)) / (Math.log10(max) - Math.log10(min))) * plotW;
  };
  const height = TOP + rows.length * ROW_H + 34;
  const bars = rows.map((r, i) => {
    const y = TOP + i * ROW_H;
    const w = Math.max(scale(r.value), 1);
    return [
      `<text x="${LABEL_W - 8}" y="${y + 16}" text-anchor="end">${xml(r.label)}</text>`,
      `<rect x="${LABEL_W}" y="${y + 4}" width="${w.toFixed(1)}" height="${ROW_H - 8}" fill="${COLORS[r.kind]}" rx="2"/>`,
      `<text x="${LABEL_W + w + 6}" y="${y + 16}">${xml(`${fmt(r.value, digits)}${r.note ? ` ${r.note}` : ''}`)}</text>`,
    ].join('');
  });
  const legend = Object.entries({ baseline: 'raw baseline', dlock: 'dlock', peer: 'peer library' })
    .filter(([k]) => rows.some((r) => r.kind === k))
    .map(([k, text], i) => {
      const x = LABEL_W + i * 130;
      const y = height - 14;
      return `<rect x="${x}" y="${y - 9}" width="10" height="10" fill="${COLORS[k]}"/><text x="${x + 14}" y="${y}">${text}</text>`;
    });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${WIDTH} ${height}" width="${WIDTH}" height="${height}" role="img" aria-label="${xml(title)}">`,
    '<style>text{font:12px system-ui,sans-serif;fill:#3c3c43}.t{font-size:14px;font-weight:600}.s{fill:#67676c}</style>',
    '<rect width="100%" height="100%" fill="#fff"/>',
    `<text class="t" x="12" y="22">${xml(title)}</text>`,
    `<text class="s" x="12" y="42">${xml(subtitle)}${log ? ' (log scale)' : ''}; unit: ${xml(unit)}</text>`,
    ...bars,
    ...legend,
    '</svg>',
  ].join('\n');
}

function machineLine(result) {
  const m = result.machine;
  return `${m.date.slice(0, 10)}, ${m.cpus} × ${m.cpuModel}, Node ${m.node}, load ${m.loadavg[0]}`;
}

function chartsFor(name, result) {
  const charts = [];
  const sub = machineLine(result);
  if (result.uncontended.length > 0) {
    charts.push({
      file: `${name}-uncontended.svg`,
      caption: 'Uncontended acquire + release (higher is better)',
      svg: barChart({
        title: `${result.title}: uncontended acquire + release`,
        subtitle: sub,
        unit: 'operations per second',
        rows: result.uncontended.map((r) => ({
          label: r.subject,
          value: r.opsPerSec,
          kind: kind(r),
          note: `(p50 ${fmt(r.latencyMs.p50 * 1000)} µs)`,
        })),
      }),
    });
  }
  for (const workers of [...new Set(result.contended.map((r) => r.workers))]) {
    const rows = result.contended.filter((r) => r.workers === workers);
    charts.push({
      file: `${name}-contended-${workers}.svg`,
      caption: `${workers} workers on one lock: grants per second, and the busiest worker's grants over the least busy one's (1.00× is fair)`,
      svg: barChart({
        title: `${result.title}: ${workers} workers on one lock`,
        subtitle: sub,
        unit: 'grants per second',
        rows: rows.map((r) => ({
          label: r.subject,
          value: r.acquisitionsPerSec,
          kind: kind(r),
          note: `(fairness ${r.perWorker.spread == null ? '∞' : fmt(r.perWorker.spread, 2)}×, ${fmt(r.requestsPerAcquisition, 2)} req/grant)`,
        })),
      }),
    });
  }
  if (result.held.length > 0) {
    const locks = result.held[0].locks;
    charts.push({
      file: `${name}-held.svg`,
      caption: `Requests per second to keep ${fmt(locks)} locks held (lower is better)`,
      svg: barChart({
        title: `${result.title}: keeping ${fmt(locks)} locks held`,
        subtitle: sub,
        unit: 'requests per second',
        log: true,
        digits: 1,
        rows: result.held.map((r) => ({ label: r.subject, value: r.requestsPerSec, kind: kind(r) })),
      }),
    });
  }
  return charts;
}

rmSync(SVG_DIR, { recursive: true, force: true });
mkdirSync(SVG_DIR, { recursive: true });
mkdirSync(fileURLToPath(new URL('../.generated/', import.meta.url)), { recursive: true });
const files = existsSync(RESULTS)
  ? readdirSync(RESULTS)
      .filter((f) => f.endsWith('.json'))
      .sort()
  : [];
const sections = [];
for (const file of files) {
  const result = JSON.parse(readFileSync(`${RESULTS}${file}`, 'utf8'));
  const name = file.replace(/\.json$/, '');
  const charts = chartsFor(name, result);
  if (charts.length === 0) continue;
  for (const chart of charts) writeFileSync(`${SVG_DIR}${chart.file}`, `${chart.svg}\n`);
  const m = result.machine;
  sections.push(
    [
      `### ${result.title}`,
      '',
      `Run of ${m.date.slice(0, 16).replace('T', ' ')} UTC at commit ${m.commit}: ${m.cpus} × ${m.cpuModel}, ` +
        `${m.memoryGiB} GiB, Node ${m.node}, ${result.server.name} ${result.server.version}, load average ` +
        `${m.loadavg.join(' / ')} at start${m.loadavg[0] > m.cpus / 2 ? ' (a busy machine: compare ratios, not absolute figures)' : ''}. ` +
        `Raw figures: \`bench/results/${file}\`.`,
      '',
      ...charts.flatMap((c) => [`![${c.caption}](/bench/${c.file})`, '', `*${c.caption}.*`, '']),
    ].join('\n'),
  );
}
writeFileSync(
  MD_FILE,
  sections.length > 0
    ? sections.join('\n')
    : 'No results yet: run `pnpm bench` to write `bench/results/*.json`.\n',
);
console.log(
  `[bench-charts] ${files.length} result files, ${sections.length} sections, charts in docs/public/bench/`,
);
