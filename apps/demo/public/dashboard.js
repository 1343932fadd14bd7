// The dashboard: draws both runs of the scenario from the demo's event stream (server-sent events). Plain DOM and
// SVG, no build step. Everything is recomputed from the list of events on each frame: a run has a few hundred.

const SVG = 'http://www.w3.org/2000/svg';
const RUNS = ['unfenced', 'fenced'];
const LEFT = 124;
const RIGHT = 64;
const TOP = 34;
/** A plain lane is just the bar; a lane with a freeze gets a row above it (the freeze) and one below (the outcome). */
const LANE = 38;
const LANE_FROZEN = 70;
const BAR_H = 18;
const BALANCE = 72;
const MARK = 40;
const AXIS = 22;

const state = {
  info: null,
  events: [],
  results: null,
  failure: null,
  running: false,
  connected: false,
  /** Scenario time ≈ performance.now() + offset (events arrive just after they happen). */
  offset: Number.NEGATIVE_INFINITY,
  pauseRequests: [],
  frame: 0,
};

const $ = (id) => document.getElementById(id);
const fmt = (n) => Math.round(n).toLocaleString('en-US');
/** Inside a bar there is room for a few digits; Redis tokens are ~16 digits long (the full token is in the tooltip). */
const shortToken = (token) => (token.length > 6 ? `…${token.slice(-4)}` : token);
const secs = (ms) => `${(ms / 1000).toFixed(2)} s`;

function el(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function html(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---------------------------------------------------------------------------------------------------- stream

function connect() {
  const source = new EventSource('/events');
  source.onopen = () => {
    state.connected = true;
    schedule();
  };
  source.onerror = () => {
    state.connected = false;
    schedule();
  };
  source.onmessage = (message) => {
    const update = JSON.parse(message.data);
    switch (update.type) {
      case 'scenario-start':
        state.info = update.info;
        state.events = [];
        state.results = null;
        state.failure = null;
        state.running = true;
        state.pauseRequests = [];
        state.offset = -performance.now();
        buildButtons();
        break;
      case 'event': {
        state.events.push(update.event);
        state.offset = Math.max(state.offset, update.event.t - performance.now());
        break;
      }
      case 'pause-requested':
        state.pauseRequests.push(update);
        break;
      case 'scenario-end':
        state.results = update.results;
        state.running = false;
        break;
      case 'scenario-failed':
        state.failure = update.message;
        state.running = false;
        break;
    }
    schedule();
  };
}

function schedule() {
  if (state.frame) return;
  state.frame = requestAnimationFrame(() => {
    state.frame = 0;
    render();
  });
}

// A running scenario's open intervals grow with time.
setInterval(() => {
  if (state.running) schedule();
}, 100);
window.addEventListener('resize', schedule);

// ---------------------------------------------------------------------------------------------------- controls

function buildButtons() {
  const box = $('pause-buttons');
  box.replaceChildren();
  for (let w = 1; w <= state.info.workers; w++) {
    const button = html('button', { type: 'button', 'data-worker': w, title: `Freeze worker ${w}` }, `${w}`);
    button.addEventListener('click', () => post(`/api/pause?worker=${w}`));
    box.append(button);
  }
}

$('rerun').addEventListener('click', () => post('/api/rerun'));

async function post(path) {
  try {
    const response = await fetch(path, { method: 'POST' });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      state.failure = body.error ?? `HTTP ${response.status}`;
      schedule();
    }
  } catch {
    state.connected = false;
    schedule();
  }
}

// ---------------------------------------------------------------------------------------------------- model

function now() {
  if (!state.running) return lastT();
  return Math.max(lastT(), performance.now() + state.offset);
}

function lastT() {
  let t = 0;
  for (const e of state.events) t = Math.max(t, e.t);
  return t;
}

/** Per worker: waits, holds (with the lease's end and renewals), freezes, losses, writes. */
function model(run) {
  const workers = state.info.workers;
  const t1 = now();
  const lanes = Array.from({ length: workers }, () => ({
    waits: [],
    holds: [],
    pauses: [],
    losts: [],
    writes: [],
    waitingSince: null,
    done: 0,
    state: 'starting',
    token: '',
  }));
  const balance = [];
  const marks = [];
  for (const e of state.events) {
    if (e.run !== run) continue;
    const lane = lanes[e.worker - 1];
    if (!lane) continue;
    switch (e.type) {
      case 'waiting':
        lane.waitingSince = e.t;
        lane.state = 'waiting';
        break;
      case 'acquired':
        if (lane.waitingSince !== null) lane.waits.push([lane.waitingSince, e.t]);
        lane.waitingSince = null;
        lane.holds.push({
          token: e.token,
          start: e.t,
          end: null,
          leaseEnd: e.expiresAt,
          renewals: [],
          lost: false,
        });
        lane.state = 'holding';
        lane.token = e.token;
        break;
      case 'renewed': {
        const hold = lane.holds.findLast((h) => h.token === e.token);
        if (hold) {
          hold.renewals.push(e.t);
          hold.leaseEnd = e.expiresAt;
        }
        break;
      }
      case 'released':
      case 'lost': {
        const hold = lane.holds.findLast((h) => h.token === e.token);
        if (hold && hold.end === null) {
          hold.end = e.t;
          hold.lost = e.type === 'lost';
        }
        if (e.type === 'lost') {
          lane.losts.push(e);
          lane.state = 'lost';
        } else if (lane.state !== 'lost') lane.state = 'waiting';
        break;
      }
      case 'pause-start':
        lane.pauses.push({ start: e.t, end: null, ms: e.ms, token: e.token });
        lane.state = 'frozen';
        break;
      case 'pause-end': {
        const pause = lane.pauses.at(-1);
        if (pause) pause.end = e.t;
        lane.state = 'holding';
        break;
      }
      case 'write':
        lane.writes.push(e);
        if (e.accepted) balance.push([e.t, e.to, e]);
        if (e.highWaterMark !== null) marks.push([e.t, Number(e.highWaterMark), e]);
        break;
      case 'read':
        if (e.highWaterMark !== null) marks.push([e.t, Number(e.highWaterMark), e]);
        break;
      case 'deposited':
        lane.done += 1;
        break;
      case 'worker-done':
        lane.state = 'done';
        break;
    }
  }
  for (const lane of lanes) {
    if (lane.waitingSince !== null) lane.waits.push([lane.waitingSince, t1]);
  }
  return { lanes, balance, marks, t1 };
}

// ---------------------------------------------------------------------------------------------------- render

function render() {
  renderStatus();
  if (!state.info) return;
  renderLede();
  const domain = Math.max(
    now() * (state.running ? 1.08 : 1.02),
    state.info.pauseMs + state.info.ttlMs + 1000,
  );
  for (const run of RUNS) {
    const m = model(run);
    renderTimeline(run, m, domain);
    renderVerdict(run, m);
    renderStory(run);
  }
  $('backends').textContent =
    `lock service: ${state.info.lock} · database: ${state.info.db} · seed ${state.info.seed}`;
}

function renderStatus() {
  const status = $('status');
  const dot = '<span class="dot"></span>';
  let text;
  if (!state.connected) {
    text = state.info
      ? 'disconnected — the demo process has ended; what it showed stays on screen'
      : 'connecting to the demo…';
  } else if (state.failure) text = `live · ${state.failure}`;
  else if (state.running) {
    const asked = state.pauseRequests.at(-1);
    text = `live · running, ${secs(now())}${asked ? ` · worker ${asked.worker} will freeze when it next holds the lock` : ''}`;
  } else if (state.results) text = `live · finished in ${secs(lastT())} · press Rerun or pause a worker`;
  else text = 'live';
  status.className = `status${state.connected ? '' : ' off'}`;
  status.innerHTML = dot;
  status.append(document.createTextNode(text));
  $('rerun').disabled = !state.connected || state.running;
}

function renderLede() {
  const i = state.info;
  const frozen =
    i.pauseWorker === null
      ? 'No worker is frozen automatically: press a “pause worker” button to freeze one while it holds the lock.'
      : `Worker ${i.pauseWorker} is frozen for ${fmt(i.pauseMs)} ms during its first deposit — a stop-the-world pause (like a long GC pause or a VM freeze) longer than the lock's TTL.`;
  $('lede').textContent =
    `${i.workers} workers each make ${i.iterations} deposits into one account: take the account's lock ` +
    `(TTL ${fmt(i.ttlMs)} ms), read the balance, work a little, write balance + amount, release. ${frozen} ` +
    'Both runs below happen at the same time, on the same lock service.';
}

function renderTimeline(run, m, domain) {
  const svg = $(`svg-${run}`);
  const width = Math.max(640, svg.parentElement.clientWidth - 28);
  const workers = state.info.workers;
  const tops = [];
  let lanesBottom = TOP;
  for (const lane of m.lanes) {
    tops.push(lanesBottom);
    lanesBottom += lane.pauses.length > 0 ? LANE_FROZEN : LANE;
  }
  const height = lanesBottom + BALANCE + MARK + AXIS;
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('height', String(height));
  const x = (t) => LEFT + (Math.max(0, Math.min(t, domain)) / domain) * (width - LEFT - RIGHT);
  const g = el('g');
  const labels = new Placer(width);

  // Lane backgrounds, labels and the time grid.
  for (let i = 0; i < workers; i++) {
    const top = tops[i];
    const lane = m.lanes[i];
    const barY = barTop(lane, top);
    if (i % 2 === 0)
      g.append(el('rect', { x: 0, y: top, width, height: laneHeight(lane), class: 'lane-bg' }));
    g.append(el('text', { x: 8, y: barY + 8, class: 'lane-label' }, `worker ${i + 1}`));
    g.append(el('text', { x: 8, y: barY + 21, class: 'lane-sub' }, laneState(lane)));
  }
  const balanceTop = lanesBottom;
  const markTop = balanceTop + BALANCE;
  g.append(el('rect', { x: 0, y: balanceTop, width, height: BALANCE + MARK, fill: '#fbfcfe' }));
  g.append(el('line', { x1: 0, x2: width, y1: balanceTop, y2: balanceTop, stroke: '#bcccdc' }));
  g.append(el('text', { x: 8, y: balanceTop + 24, class: 'lane-label' }, 'balance'));
  g.append(el('text', { x: 8, y: balanceTop + 38, class: 'lane-sub' }, 'of the account'));
  g.append(el('text', { x: 8, y: markTop + 17, class: 'lane-label' }, 'high-water mark'));
  g.append(
    el(
      'text',
      { x: 8, y: markTop + 31, class: 'lane-sub' },
      run === 'fenced' ? 'highest token seen' : 'none',
    ),
  );

  const step = domain > 8000 ? 2000 : domain > 3500 ? 1000 : 500;
  for (let t = 0; t <= domain; t += step) {
    g.append(el('line', { x1: x(t), x2: x(t), y1: TOP - 4, y2: markTop + MARK, class: 'grid' }));
    g.append(el('text', { x: x(t), y: height - 6, class: 'tick', 'text-anchor': 'middle' }, `${t / 1000} s`));
  }

  // Worker lanes.
  for (const [i, lane] of m.lanes.entries()) drawLane(g, labels, lane, tops[i], x, m.t1, run);

  // What connects the lanes: when the frozen worker's lease ran out, and when it wrote anyway.
  for (const [i, lane] of m.lanes.entries()) {
    for (const pause of lane.pauses) {
      const hold = lane.holds.find((h) => h.start <= pause.start && (h.end === null || h.end >= pause.start));
      if (!hold) continue;
      if (hold.leaseEnd < (pause.end ?? m.t1)) {
        const lx = x(hold.leaseEnd);
        g.append(el('line', { x1: lx, x2: lx, y1: TOP - 2, y2: lanesBottom, class: 'marker-line' }));
        labels.put(
          g,
          lx + 4,
          [TOP - 20, TOP - 6],
          `worker ${i + 1}'s lease runs out (${secs(hold.leaseEnd)}): others take the lock`,
          'bad',
          'start',
        );
      }
      const write = lane.writes.find((w) => w.t >= pause.start && w.token === pause.token);
      if (write) {
        const wx = x(write.sentAt);
        g.append(el('line', { x1: wx, x2: wx, y1: TOP - 2, y2: lanesBottom, class: 'marker-line' }));
        labels.put(
          g,
          wx - 4,
          [TOP - 20, TOP - 6],
          `worker ${i + 1} wakes up and writes with its old token #${write.token}`,
          'bad',
          'end',
        );
      }
    }
  }

  drawBalance(g, labels, m, balanceTop, x, width);
  drawMarks(g, labels, m, markTop, x, run);
  svg.replaceChildren(g);
}

function laneState(lane) {
  const total = state.info.iterations;
  switch (lane.state) {
    case 'holding':
      return `holds #${lane.token} · ${lane.done}/${total}`;
    case 'frozen':
      return `FROZEN · ${lane.done}/${total}`;
    case 'lost':
      return `lost #${lane.token} · ${lane.done}/${total}`;
    case 'done':
      return `done · ${lane.done}/${total}`;
    default:
      return `${lane.state} · ${lane.done}/${total}`;
  }
}

function laneHeight(lane) {
  return lane.pauses.length > 0 ? LANE_FROZEN : LANE;
}

function barTop(lane, top) {
  return top + (lane.pauses.length > 0 ? 24 : 10);
}

function drawLane(g, labels, lane, top, x, t1, run) {
  const y = barTop(lane, top);
  const mid = y + BAR_H / 2;
  const below = y + BAR_H + 14;
  for (const [a, b] of lane.waits) {
    if (x(b) - x(a) > 1) g.append(el('line', { x1: x(a), x2: x(b), y1: mid, y2: mid, class: 'wait' }));
  }
  for (const hold of lane.holds) {
    const end = hold.end ?? t1;
    const solidEnd = Math.min(end, hold.leaseEnd);
    const s = x(hold.start);
    const se = Math.max(s + 1.5, x(solidEnd));
    const rect = el('rect', { x: s, y, width: se - s, height: BAR_H, rx: 2, class: 'hold' });
    rect.append(el('title', {}, `token #${hold.token}: ${secs(hold.start)} – ${secs(end)}`));
    g.append(rect);
    if (end > hold.leaseEnd) {
      const z = el('rect', {
        x: se,
        y,
        width: Math.max(0, x(end) - se),
        height: BAR_H,
        rx: 2,
        class: 'zombie',
      });
      z.append(
        el(
          'title',
          {},
          `token #${hold.token}: the lease ran out at ${secs(hold.leaseEnd)}; the worker still believed it held the lock`,
        ),
      );
      g.append(z);
      if (x(end) - se > 260) {
        labels.put(
          g,
          (se + x(end)) / 2 - 110,
          [mid + 4],
          `lease gone, still believes it holds #${hold.token}`,
          'bad',
          'start',
        );
      }
    }
    const tokenLabel = `#${shortToken(hold.token)}`;
    if (se - s >= textWidth(tokenLabel, 'token') + 14) {
      g.append(el('text', { x: s + 4, y: y + 13, class: 'token' }, tokenLabel));
    }
    for (const r of hold.renewals) {
      if (r <= solidEnd)
        g.append(el('line', { x1: x(r), x2: x(r), y1: y + 3, y2: y + BAR_H - 3, class: 'renew' }));
    }
  }
  for (const pause of lane.pauses) {
    const a = x(pause.start);
    const b = x(pause.end ?? t1);
    const band = el('rect', {
      x: a,
      y: top + 5,
      width: Math.max(2, b - a),
      height: 14,
      rx: 2,
      class: 'frozen',
    });
    band.append(
      el(
        'title',
        {},
        `frozen with Atomics.wait: ${secs(pause.start)} – ${pause.end ? secs(pause.end) : 'now'}`,
      ),
    );
    g.append(band);
    g.append(el('line', { x1: a, x2: a, y1: top + 5, y2: y + BAR_H, class: 'frozen-edge' }));
    if (pause.end) g.append(el('line', { x1: b, x2: b, y1: top + 5, y2: y + BAR_H, class: 'frozen-edge' }));
    const label = pause.end
      ? `frozen for ${secs(pause.end - pause.start)}: no code runs, no lease renewals`
      : 'FROZEN: no code runs, no lease renewals';
    labels.put(g, a + 6, [top + 16], label, 'frozen-label', 'start');
  }
  for (const w of lane.writes) drawWrite(g, labels, w, x, mid, below, run);
  for (const lost of lane.losts) {
    const lx = x(lost.t);
    const flag = `M${lx} ${y + BAR_H + 1} V${y + BAR_H + 15} M${lx} ${y + BAR_H + 1} h9 l-3 3.5 l3 3.5 h-9`;
    g.append(el('path', { d: flag, class: 'lost' }));
    labels.put(g, lx + 13, [below], `onLost: lock lost (${lost.reason})`, 'bad', 'start');
  }
}

function drawWrite(g, labels, w, x, mid, below, run) {
  const wx = x(w.t);
  const lost = w.erased.reduce((sum, d) => sum + d.amount, 0);
  if (!w.accepted) {
    const ring = el('g');
    ring.append(el('circle', { cx: wx, cy: mid, r: 8, class: 'write-rejected' }));
    ring.append(
      el('path', {
        d: `M${wx - 3.8} ${mid - 3.8} L${wx + 3.8} ${mid + 3.8} M${wx + 3.8} ${mid - 3.8} L${wx - 3.8} ${mid + 3.8}`,
        class: 'x',
      }),
    );
    ring.append(
      el(
        'title',
        {},
        `write ${fmt(w.from)} → ${fmt(w.to)} with token #${w.token}: rejected, StaleFencingTokenError (high-water mark ${w.highWaterMark})`,
      ),
    );
    g.append(ring);
    labels.put(
      g,
      wx - 12,
      [below],
      `REJECTED by the gate: token #${w.token} < high-water mark ${w.highWaterMark}`,
      'good',
      'end',
    );
    return;
  }
  if (w.stale || lost > 0) {
    const tri = el('path', {
      d: `M${wx} ${mid - 9} L${wx + 8.5} ${mid + 6} L${wx - 8.5} ${mid + 6} Z`,
      class: 'write-stale',
    });
    tri.append(
      el(
        'title',
        {},
        `write ${fmt(w.from)} → ${fmt(w.to)} with token #${w.token}; the balance was ${fmt(w.before)}`,
      ),
    );
    g.append(tri);
    const text = w.stale
      ? `STALE WRITE LANDED: ${fmt(w.before)} → ${fmt(w.to)}, ${w.erased.length} deposit${w.erased.length === 1 ? '' : 's'} erased (−${fmt(lost)})`
      : `overwrote a stale write: −${fmt(lost)}`;
    labels.put(g, wx - 12, [below], text, 'bad', 'end');
    return;
  }
  const dot = el('circle', { cx: wx, cy: mid, r: 4, class: 'write-ok' });
  dot.append(
    el(
      'title',
      {},
      `write ${fmt(w.from)} → ${fmt(w.to)} with token #${w.token}: accepted${run === 'fenced' ? ` (mark ${w.highWaterMark})` : ''}`,
    ),
  );
  g.append(dot);
}

function drawBalance(g, labels, m, top, x, width) {
  const i = state.info;
  const expected = state.results ? state.results.unfenced.expectedBalance : null;
  const values = [i.initialBalance, ...m.balance.map((b) => b[1])];
  if (expected !== null) values.push(expected);
  const lo = Math.min(...values);
  const hi = Math.max(...values, lo + 1);
  const y = (v) => top + BALANCE - 10 - ((v - lo) / (hi - lo)) * (BALANCE - 22);
  let d = `M${x(0)} ${y(i.initialBalance)}`;
  let last = i.initialBalance;
  for (const [t, v] of m.balance) {
    d += ` H${x(t)} V${y(v)}`;
    last = v;
  }
  d += ` H${x(m.t1)}`;
  g.append(el('path', { d: `${d} V${top + BALANCE - 4} H${x(0)} Z`, class: 'balance-area' }));
  g.append(el('path', { d, class: 'balance-line' }));
  if (expected !== null) {
    g.append(
      el('line', { x1: LEFT, x2: width - RIGHT, y1: y(expected), y2: y(expected), class: 'expected-line' }),
    );
    labels.put(g, LEFT + 4, [y(expected) - 4], `expected at the end: ${fmt(expected)}`, 'good', 'start');
  }
  for (const [t, v, w] of m.balance) {
    if (v < w.before) {
      g.append(
        el('rect', {
          x: x(t) - 3,
          y: y(w.before),
          width: 6,
          height: Math.max(2, y(v) - y(w.before)),
          class: 'drop',
        }),
      );
      labels.put(g, x(t) + 8, [y(v) + 4], `falls from ${fmt(w.before)} to ${fmt(v)}`, 'bad', 'start');
    }
  }
  const cls = expected === null ? 'muted' : last === expected ? 'good' : 'bad';
  labels.put(g, x(m.t1) + 6, [y(last) + 4, y(last) - 10], fmt(last), `${cls} end`, 'start');
}

function drawMarks(g, labels, m, top, x, run) {
  if (run !== 'fenced') {
    labels.put(
      g,
      LEFT + 4,
      [top + 22],
      'no gate: nothing stores or checks the tokens, so every write lands',
      'muted',
      'start',
    );
    return;
  }
  // Tokens need not start at 1 (the service outlives a run): scale from the first mark of this run.
  const hi = Math.max(1, ...m.marks.map((p) => p[1]));
  const lo = Math.max(0, Math.min(hi - 1, ...m.marks.map((p) => p[1])) - 1);
  const y = (v) => top + MARK - 8 - ((Math.max(v, lo) - lo) / (hi - lo)) * (MARK - 16);
  let d = `M${x(0)} ${y(lo)}`;
  let last = 0;
  for (const [t, v] of m.marks) {
    d += ` H${x(t)} V${y(v)}`;
    last = v;
  }
  d += ` H${x(m.t1)}`;
  g.append(el('path', { d, class: 'mark-line' }));
  for (const [t, v, e] of m.marks) {
    if (e.type === 'write' && !e.accepted) {
      g.append(el('circle', { cx: x(t), cy: y(v), r: 3.5, fill: '#7b4fd6' }));
      labels.put(g, x(t) + 7, [y(v) + 13], `mark ${v} > token #${e.token}: rejected`, 'mark-label', 'start');
    }
  }
  if (last > 0) labels.put(g, x(m.t1) + 6, [y(last) + 4], String(last), 'mark-label end', 'start');
}

/**
 * Places text labels with a white backing, inside the drawing and clear of each other: each label takes the first
 * of its candidate rows where it overlaps no label placed before it.
 */
class Placer {
  constructor(width) {
    this.width = width;
    this.boxes = [];
  }

  put(g, x, rows, text, cls, anchor) {
    const w = textWidth(text, cls);
    let left = anchor === 'end' ? x - w : x;
    left = Math.max(LEFT - 6, Math.min(left, this.width - w - 2));
    const free = (row) =>
      !this.boxes.some((b) => Math.abs(b.y - row) < 13 && left < b.right + 4 && left + w + 4 > b.left);
    const y = rows.find(free) ?? rows[0];
    this.boxes.push({ y, left, right: left + w });
    g.append(el('rect', { x: left - 2, y: y - 10, width: w + 4, height: 13, rx: 2, class: 'callout-bg' }));
    g.append(el('text', { x: left, y, class: `callout ${cls}` }, text));
  }
}

const measurer = document.createElement('canvas').getContext('2d');
const FONT = getComputedStyle(document.documentElement).fontFamily;

/** Width of a label in px, in the weight its class gives it (see .callout in dashboard.css). */
function textWidth(text, cls) {
  const weight = cls.includes('muted') ? 400 : cls.includes('end') ? 700 : 600;
  const size = cls.includes('mark-label') || cls === 'token' ? 10.5 : 11.5;
  measurer.font = `${weight} ${size}px ${FONT}`;
  return measurer.measureText(text).width;
}

function renderVerdict(run, m) {
  const box = $(`verdict-${run}`);
  const r = state.results?.[run];
  if (!r) {
    const last = m.balance.at(-1)?.[1] ?? state.info.initialBalance;
    box.className = 'verdict pending';
    box.textContent = state.failure ? 'did not finish' : `running… balance ${fmt(last)}`;
    return;
  }
  if (r.finalBalance === r.expectedBalance) {
    box.className = 'verdict good';
    const rejected = r.writesRejected + r.readsRejected;
    box.textContent = `✓ balance exact: ${fmt(r.finalBalance)}${rejected > 0 ? ` — ${rejected} stale write${rejected === 1 ? '' : 's'} rejected, ${r.redone} deposit${r.redone === 1 ? '' : 's'} redone` : ''}`;
  } else {
    box.className = 'verdict bad';
    box.textContent = `✗ ${r.lostDeposits.length} deposit${r.lostDeposits.length === 1 ? '' : 's'} lost: balance ${fmt(r.finalBalance)}, should be ${fmt(r.expectedBalance)} (−${fmt(r.lostAmount)})`;
  }
}

/** The same story, told in sentences with the run's own times and numbers. */
function renderStory(run) {
  const list = $(`story-${run}`);
  const items = [];
  const events = state.events.filter((e) => e.run === run);
  const add = (t, text, cls) => items.push({ t, text, cls });
  for (const start of events.filter((e) => e.type === 'pause-start')) {
    const w = start.worker;
    const acquired = events.findLast(
      (e) => e.type === 'acquired' && e.worker === w && e.token === start.token,
    );
    const read = events.findLast((e) => e.type === 'read' && e.worker === w && e.token === start.token);
    if (acquired && read) {
      add(
        acquired.t,
        `Worker ${w} takes the lock with fencing token #${start.token} and reads the balance: ${fmt(read.balance)}.`,
      );
    }
    add(
      start.t,
      `Worker ${w} is frozen (stop-the-world) while it holds the lock: it cannot run, so it cannot renew its lease.`,
    );
    const end = events.find((e) => e.type === 'pause-end' && e.worker === w && e.t >= start.t);
    const takeovers = events.filter(
      (e) => e.type === 'acquired' && e.worker !== w && e.t >= start.t && (!end || e.t <= end.t),
    );
    const first = takeovers[0];
    if (first) {
      const deposits = events.filter(
        (e) => e.type === 'write' && e.accepted && e.worker !== w && e.t >= first.t && (!end || e.t <= end.t),
      );
      const sum = deposits.reduce((s, e) => s + e.deposit.amount, 0);
      add(
        first.t,
        `Its lease runs out. Worker ${first.worker} takes over with token #${first.token}; ${takeovers.length} grant${takeovers.length === 1 ? '' : 's'} (up to #${takeovers.at(-1).token}) make ${deposits.length} deposit${deposits.length === 1 ? '' : 's'} (+${fmt(sum)}) while worker ${w} is frozen.`,
      );
    }
    const write = events.find(
      (e) => e.type === 'write' && e.worker === w && e.token === start.token && e.t >= start.t,
    );
    if (end) {
      add(
        end.t,
        write
          ? `Worker ${w} wakes up still believing it holds the lock and writes ${fmt(write.from)} + ${write.deposit.amount} = ${fmt(write.to)} with token #${write.token}.`
          : `Worker ${w} wakes up.`,
      );
    }
    const lost = events.find((e) => e.type === 'lost' && e.worker === w && e.token === start.token);
    if (write && !write.accepted) {
      add(
        write.t,
        `The gate rejects it: token #${write.token} is below the high-water mark ${write.highWaterMark} (StaleFencingTokenError). Nothing is written.`,
        'good',
      );
    } else if (write?.stale) {
      add(
        write.t,
        `The database accepts it: the balance falls from ${fmt(write.before)} to ${fmt(write.to)}, erasing ${write.erased.length} deposit${write.erased.length === 1 ? '' : 's'} (−${fmt(write.erased.reduce((s, d) => s + d.amount, 0))}).`,
        'bad',
      );
    } else if (write) {
      add(write.t, 'Nobody else touched the account meanwhile, so this write is harmless.');
    }
    if (lost) {
      add(
        lost.t,
        `Its lock client declares the lock lost (onLost, “${lost.reason}”) — right after waking, too late to stop a write already sent.`,
      );
    }
    const redo = events.find(
      (e) => e.type === 'deposited' && e.worker === w && e.tries > 1 && e.t >= start.t,
    );
    if (redo) {
      const again = events.findLast(
        (e) => e.type === 'write' && e.worker === w && e.accepted && e.t <= redo.t,
      );
      add(
        redo.t,
        `Worker ${w} takes the lock again (token #${again?.token}), reads ${fmt(again?.from ?? 0)} and redoes its deposit: ${fmt(again?.to ?? 0)}.`,
        'good',
      );
    }
  }
  const r = state.results?.[run];
  if (r && items.length > 0) {
    add(
      lastT(),
      r.finalBalance === r.expectedBalance
        ? `Final balance ${fmt(r.finalBalance)}: exact.`
        : `Final balance ${fmt(r.finalBalance)} instead of ${fmt(r.expectedBalance)}: ${r.lostDeposits.length} deposits (${fmt(r.lostAmount)}) are gone, and no worker knows.`,
      r.finalBalance === r.expectedBalance ? 'good' : 'bad',
    );
  }
  if (items.length === 0) {
    add(
      0,
      state.info.pauseWorker === null ? 'No worker has been frozen yet.' : 'Waiting for the frozen worker…',
    );
  }
  list.replaceChildren(
    ...items.map((item) => {
      const li = html('li', item.cls ? { class: item.cls } : {});
      li.append(html('span', { class: 't' }, `${secs(item.t)} `), document.createTextNode(item.text));
      return li;
    }),
  );
}

connect();
