"use strict";
// One panel per schedule (a second one where the page compares two), one time axis and one set
// of controls for both. Steps: 0 is the start; each later step is a time on the axis where some
// panel's round ends (a single schedule: step k is after its round k - 1), each panel showing
// the state after the rounds it has finished by then, with its last round's transfers.
const data = JSON.parse(document.getElementById("schedule-data").textContent);
const $ = id => document.getElementById(id);
const LEFT = 86, TOP = 24, AXIS_LEFT = 110, AXIS_W = 760, LANE = 22;
const plural = (k, word) => `${k} ${word}${k === 1 ? "" : "s"}`;
const priced = data.total_text !== null;  // a calibration or topology was named
let step = 0, playing = null;

// ----------------------------------------------------------------------------- panels

function makePanel(d, index) {
  const sfx = index ? `-${index}` : "";
  if (index) {  // a copy of the first panel's markup, every id suffixed
    const copy = $("panel").cloneNode(true);
    copy.querySelectorAll("[id]").forEach(e => { e.id += sfx; });
    copy.id += sfx;
    $("panels").append(copy);
  }
  const lengths = d.rounds.map(r => (priced ? r.seconds : 1));
  let sum = 0;
  const ends = lengths.map(x => (sum += x));
  return {d, index, sfx, view: d.view, ends, total: sum, done: 0,
          el: id => $(id + sfx), W: d.cell_w, H: d.cell_h};
}

const panels = [data, data.compare].filter(Boolean).map(makePanel);
if (panels.length > 1) $("panels").classList.add("two");

// The steps: times where rounds end, merged over the panels (ends at one time are one step,
// but a panel's own rounds always take a step each).
function makeSteps() {
  const ends = panels.flatMap((p, i) => p.ends.map((t, k) => ({t, i, k})));
  ends.sort((a, b) => a.t - b.t || a.i - b.i || a.k - b.k);
  const out = [{t: 0, done: panels.map(() => 0), moved: new Set()}];
  for (const e of ends) {
    const prev = out[out.length - 1];
    const same = out.length > 1 && Math.abs(prev.t - e.t) <= 1e-9 * Math.max(e.t, 1e-30)
      && !prev.moved.has(e.i);
    const now = same ? prev : {t: e.t, done: [...prev.done], moved: new Set()};
    now.done[e.i] = e.k + 1;
    now.moved.add(e.i);
    if (!same) out.push(now);
  }
  return out;
}

const steps = makeSteps(), last = steps.length - 1;
const longest = Math.max(...panels.map(p => p.total), 1e-30);
const scale = AXIS_W / longest;  // px per second (per round where unpriced): one for both
// Play runs the axis in scaled time: the longest schedule in 0.6 s a step, 2.5 to 12 s.
const PLAY_MS = Math.min(12000, Math.max(2500, 600 * last));

// ----------------------------------------------------------------------------- the grid

function headings(p) {
  const out = [], d = p.d;
  for (let c = 0; c < d.n_chunks; c++)
    out.push(`<text x="${LEFT + c * p.W + p.W / 2}" y="${TOP - 8}" text-anchor="middle">` +
             `${d.labels[c]}</text>`);
  for (let r = 0; r < d.n_ranks; r++)
    out.push(`<text x="${LEFT - 8}" y="${TOP + r * p.H + p.H / 2 + 4}" text-anchor="end">`
             + `${r === d.root ? "root " : ""}rank ${r}</text>`);
  return out.join("");
}

// A label as it fits a cell (10 px monospace: 6 px a glyph); too wide, each chunk's count of
// ranks ("n×3+o×1"), or all of them ("×12"): never a cut label.
function fitted(text, width) {
  const room = Math.floor((width - 4) / 6);
  if (text.length <= room) return text;
  let total = 0;
  const counts = text.split("+").map(group => {
    const [, letter, ranks] = group.match(/^([a-z]|\[\d+\])(.*)$/);
    const count = ranks.split(",").reduce((k, run) => {
      const [a, b] = run.split("–").map(Number);
      return k + (b === undefined ? 1 : b - a + 1);
    }, 0);
    total += count;
    return `${letter}×${count}`;
  }).join("+");
  return counts.length <= room ? counts : `×${total}`;
}

function hatch(p) {  // the pattern a partial sum is hatched with
  return `<defs><pattern id="hatch${p.sfx}" width="5" height="5" patternUnits="userSpaceOnUse" `
    + `patternTransform="rotate(45)"><rect width="5" height="5" fill="#fff" opacity="0.35"/>`
    + `<line x1="0" y1="0" x2="0" y2="5" stroke="#111" stroke-width="1.3" opacity="0.55"/>`
    + `</pattern></defs>`;
}

function cell(p, rank, chunk, held, label, marks) {  // held: [[rank, chunk], ...] summed
  const x = LEFT + chunk * p.W, y = TOP + rank * p.H, w = p.W - 2, h = p.H - 2;
  const holders = [...new Set(held.map(([r]) => r))].join(",");
  const contributions = held.map(pair => pair.join(":")).join(" ");
  const k = h / Math.max(held.length, 1);
  const pale = marks.partial ? ' opacity="0.5"' : "";
  const stripes = held.length
    ? held.map(([r], i) => `<rect x="${x}" y="${y + i * k}" width="${w}" height="${k}" `
                           + `fill="${p.d.colours[r]}"${pale}/>`).join("")
    : `<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="${p.d.empty}"/>`;
  const hatched = marks.partial  // a partial sum: pale and hatched
    ? `<rect class="hatch" x="${x}" y="${y}" width="${w}" height="${h}" `
      + `fill="url(#hatch${p.sfx})"/>` : "";
  const text = label ? `<text class="label" x="${x + 3}" y="${y + h / 2 + 3.5}">`
                       + `${fitted(label, w)}</text>` : "";
  const sent = marks.sent  // sent from this round: a dotted outline
    ? `<rect class="sent" x="${x + 1}" y="${y + 1}" width="${w - 2}" height="${h - 2}"/>` : "";
  const outline = marks.changed  // written this round: a thick outline
    ? `<rect class="changed" x="${x + 3}" y="${y + 3}" width="${w - 6}" height="${h - 6}"/>`
    : "";
  const r = Math.min(6, h / 3);
  const done = marks.done  // holds its result: a green border and a tick
    ? `<rect class="done" x="${x + 1.5}" y="${y + 1.5}" width="${w - 3}" height="${h - 3}"/>`
      + `<circle class="tick-mark" cx="${x + w - r}" cy="${y + r}" r="${r}"/>`
      + `<path d="M${x + w - 1.6 * r},${y + r} l${0.5 * r},${0.5 * r} l${0.9 * r},${-1 * r}" `
      + `fill="none" stroke="#fff" stroke-width="1.4"/>` : "";
  const classes = ["cell", marks.changed && "changed-cell", marks.sent && "sent-cell",
                   marks.done && "complete", marks.partial && "partial"]
    .filter(Boolean).join(" ");
  const notes = [marks.changed && "written this round", marks.sent && "sent this round",
                 marks.done && "complete: holds its result",
                 marks.partial && "a partial sum"].filter(Boolean).join(", ");
  return `<g class="${classes}" data-rank="${rank}" data-chunk="${chunk}" `
    + `data-holders="${holders}" data-contributions="${contributions}" data-label="${label}">`
    + `<title>rank ${rank}, chunk ${p.d.labels[chunk]}: ${label || "nothing yet"}`
    + `${notes ? " (" + notes + ")" : ""}</title>${stripes}${hatched}${text}${sent}${outline}`
    + `${done}</g>`;
}

function drawGrid(p, round) {
  const parts = [hatch(p), headings(p)], d = p.d, at = p.done;
  const key = (r, c) => `${r}:${c}`;
  const written = new Set(round ? round.transfers.flatMap(([, dst, , into]) =>
    into.map(c => key(dst, c))) : []);  // each transfer's destination chunks
  const sent = new Set(round ? round.transfers.flatMap(([src, , chunks]) =>
    chunks.map(c => key(src, c))) : []);
  const done = new Set(d.complete[at].map(([r, c]) => key(r, c)));
  const partial = new Set(d.partial[at].map(([r, c]) => key(r, c)));
  d.states[at].forEach((row, r) => row.forEach((held, c) => parts.push(cell(
    p, r, c, held, d.texts[at][r][c],
    {changed: written.has(key(r, c)), sent: sent.has(key(r, c)), done: done.has(key(r, c)),
     partial: partial.has(key(r, c))}))));
  const grid = p.el("grid");
  grid.setAttribute("width", LEFT + d.n_chunks * p.W + 8);
  grid.setAttribute("height", TOP + d.n_ranks * p.H + 8);
  grid.innerHTML = parts.join("");
}

// ----------------------------------------------------------------------------- the view

function sector(p, ranks, node) {  // a node's ranks round the circle: a band behind them
  const n = p.d.n_ranks, c = p.view.size / 2, angle = r => 2 * Math.PI * r / n;
  const [a0, a1] = [angle(ranks[0]) - 0.35 / n * 2 * Math.PI,
                    angle(ranks[ranks.length - 1]) + 0.35 / n * 2 * Math.PI];
  const R = c - 30, at = a => [c + R * Math.sin(a), c - R * Math.cos(a)];
  const [[x0, y0], [x1, y1]] = [at(a0), at(a1)], big = a1 - a0 > Math.PI ? 1 : 0;
  const mid = (a0 + a1) / 2;
  const [tx, ty] = [c + (R - 34) * Math.sin(mid), c - (R - 34) * Math.cos(mid)];
  return `<path class="sector" stroke="${node % 2 ? "#f5ead8" : "#e3eaf3"}" `
    + `stroke-width="${2 * p.view.radius + 10}" `
    + `d="M${x0},${y0} A${R},${R} 0 ${big} 1 ${x1},${y1}"/>`
    + `<text x="${tx}" y="${ty + 4}" text-anchor="middle">node ${node}</text>`;
}

function backdrop(p) {  // what the layout draws behind the ranks: bands, tree or cube edges
  const v = p.view, at = r => v.places[r], out = [];
  v.bands.forEach(b => out.push(
    `<rect class="band${b.node % 2 ? " odd" : ""}" data-node="${b.node}" x="${b.x}" `
    + `y="${b.y}" width="${b.w}" height="${b.h}" rx="6"/>`
    + `<text x="${b.x + b.w - 6}" y="${b.y + 12}" text-anchor="end">node ${b.node}</text>`));
  (v.parents || []).forEach((parent, r) => {
    if (parent !== null) out.push(`<line class="tree-edge" data-parent="${parent}" `
      + `data-child="${r}" x1="${at(parent)[0]}" y1="${at(parent)[1]}" x2="${at(r)[0]}" `
      + `y2="${at(r)[1]}"/>`);
  });
  (v.axes || []).forEach((_, k) => v.places.forEach((_, r) => {
    const s = r ^ (1 << k);
    if (r < s) out.push(`<line class="cube-edge" data-bit="${k}" x1="${at(r)[0]}" `
      + `y1="${at(r)[1]}" x2="${at(s)[0]}" y2="${at(s)[1]}"/>`);
  }));
  v.nodes.forEach(({node, ranks}) => out.push(sector(p, ranks, node)));
  v.links.forEach(l => out.push(`<path class="link" d="${l.d}"><title>${l.name}</title></path>`));
  return out.join("");
}

function arrow(p, a, shown) {  // a transfer: its arc and the chunks it carries
  const [x, y] = a.at, chunks = a.chunks.join(",");
  return `<g class="transfer" data-src="${a.src}" data-dst="${a.dst}" data-chunks="${chunks}">`
    + `<path class="arrow${a.reduce ? " reduce" : ""}${a.slow ? " slow" : ""}" `
    + `data-src="${a.src}" data-dst="${a.dst}" data-chunks="${chunks}" `
    + `d="${a.d}" marker-end="url(#head${p.sfx})"><title>${a.text}</title></path>`
    + `<text class="chunk-label${shown ? "" : " hover-only"}" x="${x}" y="${y + 3}" `
    + `text-anchor="middle" data-src="${a.src}" data-dst="${a.dst}">${a.label}</text></g>`;
}

function drawTopology(p, round) {
  const v = p.view;
  const parts = [`<defs><marker id="head${p.sfx}" viewBox="0 0 10 10" refX="9" refY="5" `
    + `markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" `
    + `fill="#111"/></marker></defs>`, backdrop(p)];
  const drawn = round ? v.rounds[p.done - 1] : null;
  if (drawn) drawn.arcs.forEach(a => parts.push(arrow(p, a, drawn.labels_shown)));
  v.places.forEach(([x, y], r) => parts.push(
    `<g class="rank" data-rank="${r}"><circle cx="${x}" cy="${y}" r="${v.radius}" `
    + `fill="${p.d.colours[r]}" stroke="#111" stroke-width="0.8"/>`
    + `<text class="rank" x="${x}" y="${y + 3.5}" text-anchor="middle">${r}</text></g>`));
  const svg = p.el("topology");
  svg.setAttribute("width", v.width);
  svg.setAttribute("height", v.height);
  svg.dataset.layout = v.layout;
  svg.innerHTML = parts.join("");
  const loads = drawn ? drawn.loads : [];
  const most = loads.length ? loads[0][3] : 0, shown = loads.slice(0, 12);
  const rows = shown.map(([name, bytes, text, busy], i) => `<tr class="load${i ? "" : " busiest"}" `
    + `data-link="${name}" data-bytes="${bytes}"><td>${name}</td><td>${text}</td>`
    + `<td><i class="bar" style="width:${Math.max(1, 120 * busy / (most || 1))}px"></i>`
    + `</td></tr>`);
  p.el("loads").innerHTML = !round ? "before the first round: no link is busy"
    : `links busy in round ${p.done - 1} (jaxcoll.simulate): ${plural(loads.length, "link")}, `
      + `the one busy longest (bytes x its β) first${loads.length > shown.length
        ? ` (${loads.length - shown.length} more not shown)` : ""}<table>${rows.join("")}</table>`;
}

// ----------------------------------------------------------------------------- the counter

function drawCounter(p) {
  const d = p.d, sent = p.done ? d.rounds[p.done - 1].sent_so_far : 0;
  const most = Math.max(d.bound.bytes, ...d.rounds.map(r => r.sent_so_far), 1);
  const width = 240, x = b => 4 + width * b / most;
  const over = sent > d.bound.bytes;
  const text = p.done ? d.rounds[p.done - 1].sent_so_far_text : "0 B";
  const box = p.el("counter");
  box.className = "counter";
  box.dataset.bytes = sent;
  box.dataset.bound = d.bound.bytes;
  box.innerHTML = `<svg width="${width + 12}" height="16"><rect x="4" y="3" width="${width}" `
    + `height="10" fill="#eef1f5"/><rect class="done-bar${over ? " over" : ""}" x="4" y="3" `
    + `width="${x(sent) - 4}" height="10"/><line class="bound" x1="${x(d.bound.bytes)}" y1="0" `
    + `x2="${x(d.bound.bytes)}" y2="16"/></svg> the busiest rank has sent <b>${text}</b> so far; `
    + `no algorithm can send less than ${d.bound.text} from some rank (${d.bound.rule}, `
    + `jaxcoll.bounds; the green line)`;
}

// ----------------------------------------------------------------------------- the axis

function drawAxis() {
  const parts = [];
  panels.forEach((p, i) => {
    const y = 18 + i * (LANE + 10);
    parts.push(`<text x="${AXIS_LEFT - 6}" y="${y + LANE / 2 + 4}" text-anchor="end">`
               + `${panels.length > 1 ? p.d.name.split(" ")[0] : "rounds"}`
               + `<title>${p.d.name}</title></text>`);
    let t = 0;
    p.d.rounds.forEach((r, k) => {
      const x = AXIS_LEFT + t * scale, w = (p.ends[k] - t) * scale;
      const a = priced ? r.alpha_seconds * scale : 0;
      const fill = priced
        ? `<rect class="alpha" x="${x}" y="${y}" width="${a}" height="${LANE}"/>`
          + `<rect class="rest" x="${x + a}" y="${y}" width="${w - a}" height="${LANE}"/>`
        : `<rect class="unpriced" x="${x}" y="${y}" width="${w}" height="${LANE}"/>`;
      const title = priced ? `round ${k}: ${r.time_text} = α ${r.alpha_text} + β + γ `
                             + `${r.rest_text}` : `round ${k} (not priced: equal lengths)`;
      parts.push(`<g class="round-bar" data-panel="${i}" data-round="${k}" `
        + `data-seconds="${r.seconds}" data-alpha="${r.alpha_seconds}">${fill}`
        + `<rect class="span" x="${x}" y="${y}" width="${w}" height="${LANE}"/>`
        + `<title>${title}</title></g>`);
      t = p.ends[k];
    });
  });
  const bottom = 18 + panels.length * (LANE + 10);
  parts.push(`<line x1="${AXIS_LEFT}" y1="${bottom}" x2="${AXIS_LEFT + AXIS_W}" `
             + `y2="${bottom}" stroke="#888"/>`,
             `<text x="${AXIS_LEFT}" y="${bottom + 13}">0</text>`,
             `<text x="${AXIS_LEFT + AXIS_W}" y="${bottom + 13}" text-anchor="end">`
             + `${priced ? longestText() : plural(Math.round(longest), "round")}</text>`,
             `<line id="playhead" x1="${AXIS_LEFT}" y1="8" x2="${AXIS_LEFT}" y2="${bottom}"/>`);
  const axis = $("axis");
  axis.setAttribute("width", AXIS_LEFT + AXIS_W + 20);
  axis.setAttribute("height", bottom + 18);
  axis.dataset.priced = String(priced);
  axis.dataset.scale = scale;  // px per second (per round unpriced), both lanes alike
  axis.dataset.playMsPerUnit = PLAY_MS / longest;
  axis.innerHTML = parts.join("");
  axis.querySelectorAll("g.round-bar").forEach(g => g.addEventListener("click", () => {
    const i = Number(g.dataset.panel), k = Number(g.dataset.round);
    go(steps.findIndex(s => s.done[i] > k));
  }));
  $("axis-note").textContent = priced
    ? `time axis: each round at its priced length (${data.model}); dark: its α (latency), `
      + `light: its β + γ (bytes); Play runs in this time, the longest in `
      + `${(PLAY_MS / 1000).toFixed(1)} s`
    : "time axis: not priced, so every round is drawn the same length (name a calibration "
      + "or topology to price them)";
}

function longestText() {  // the longest schedule's whole time
  const p = panels.reduce((a, b) => (b.total > a.total ? b : a));
  return p.d.total_text;
}

function placeHead(t) {
  const x = AXIS_LEFT + t * scale, head = $("playhead");
  head.setAttribute("x1", x);
  head.setAttribute("x2", x);
}

// ----------------------------------------------------------------------------- the state

function roundText(p) {
  const round = p.done ? p.d.rounds[p.done - 1] : null, k = p.done - 1;
  if (!round) return null;
  const phase = p.d.phases[phaseOf(p, k)];
  const time = round.seconds === null ? ": "
    : `, ${round.time_text} (α ${round.alpha_text} + β + γ ${round.rest_text}; `
      + `${round.total_text} so far): `;
  return `round ${k}, ${phase.name}: ${round.bytes_text} moved, the busiest rank sends `
    + `${round.busiest_text}${time}`;
}

const phaseOf = (p, index) => p.d.phases.findIndex(q => q.first <= index && index <= q.last);

function renderPanel(p) {
  const round = p.done ? p.d.rounds[p.done - 1] : null;
  drawGrid(p, round);
  drawTopology(p, round);
  drawCounter(p);
  const phase = round ? phaseOf(p, p.done - 1) : -1;
  p.el("phases").querySelectorAll(".phase").forEach((q, k) => q.classList.toggle("current",
                                                                               k === phase));
  const now = p.el("now");
  now.innerHTML = "";
  now.append(round ? roundText(p) : "before the first round: what each rank starts with");
  if (round) {
    const code = document.createElement("code");
    code.textContent = round.text.join("   ");
    now.append(code);
  }
  p.el("rounds").querySelectorAll("tr").forEach((tr, k) => tr.classList.toggle("current",
                                                                             k === p.done));
}

function render() {
  panels.forEach((p, i) => { p.done = steps[step].done[i]; renderPanel(p); });
  $("round").textContent = panels.length > 1
    ? (step ? `t = ${timeText(steps[step].t)}: ` + panels.map(p => `${p.d.name} `
        + (p.done ? `after round ${p.done - 1}` : "not started")).join(", ")
      : `start (${plural(last, "step")})`)
    : (step ? `after round ${step - 1} (${step} of ${last} done)`
            : `start (${plural(last, "round")})`);
  $("round").dataset.step = step;
  $("round").dataset.done = panels.map(p => p.done).join(",");
  $("slider").value = step;
  document.querySelectorAll("#axis g.round-bar").forEach(g => g.classList.toggle("current",
    Number(g.dataset.round) === panels[Number(g.dataset.panel)].done - 1));
  if (!playing) placeHead(steps[step].t);
  $("prev").disabled = step === 0;
  $("next").disabled = step === last;
}

function timeText(t) {  // as page.py's _duration writes it: '40 µs', '1.2 ms', '3.5 s'
  if (!priced) return plural(t, "round");
  for (const [unit, size] of [["s", 1], ["ms", 1e-3]])
    if (t >= size) return `${Number((t / size).toPrecision(3))} ${unit}`;
  return `${Number((t * 1e6).toPrecision(3))} µs`;
}

function go(k) { step = Math.max(0, Math.min(last, k)); render(); }

// Play: the playhead runs along the axis in scaled time; a step is shown when it passes it.
function play() {
  if (playing) {
    cancelAnimationFrame(playing.frame);
    playing = null;
  } else {
    if (step === last) go(0);
    const t0 = steps[step].t, started = performance.now();
    playing = {frame: 0};
    const tick = now => {
      if (!playing) return;
      const t = t0 + (now - started) * longest / PLAY_MS;
      let k = step;
      while (k < last && steps[k + 1].t <= t) k++;
      if (k !== step) go(k);
      placeHead(Math.min(t, steps[last].t));
      if (step === last) { play(); return; }
      playing.frame = requestAnimationFrame(tick);
    };
    playing.frame = requestAnimationFrame(tick);
  }
  $("play").innerHTML = playing ? "&#10074;&#10074; Pause" : "&#9654; Play";
  $("play").dataset.playing = String(Boolean(playing));
  if (!playing) placeHead(steps[step].t);
}

// ----------------------------------------------------------------------------- setting up

function row(cells, onClick) {
  const tr = document.createElement("tr");
  for (const text of cells) tr.insertCell().textContent = text;
  tr.addEventListener("click", onClick);
  return tr;
}

const stepAfter = (p, k) => steps.findIndex(s => s.done[p.index] >= k);  // k rounds done

function setUpPanel(p) {
  const d = p.d, n = d.rounds.length;
  p.el("panel-name").textContent = panels.length > 1 ? d.name : "";
  const root = d.root === null ? "" : ` from root ${d.root}`;
  const what = d.collective ? d.collective + root : "no primitive";
  const taking = d.total_text === null ? "" : ` takes ${d.total_text}`;
  p.el("summary").textContent = `${what}: ${plural(d.n_ranks, "rank")} (rows) x `
    + `${plural(d.n_chunks, "chunk")} (columns), ${plural(n, "round")}; `
    + `${d.nbytes_text} per rank${taking}, ${d.model}.`;
  p.el("verdict").textContent = d.verdict_text;
  p.el("verdict").className = d.verdict;
  d.phases.forEach(q => {
    const span = document.createElement("span");
    span.className = "phase";
    span.style.flex = String(q.last - q.first + 1);
    span.dataset.first = q.first;
    span.dataset.last = q.last;
    span.textContent = `${q.name}: ${q.first === q.last ? "round " + q.first
                                                       : `rounds ${q.first}–${q.last}`}`;
    span.title = span.textContent;
    span.addEventListener("click", () => go(stepAfter(p, q.first + 1)));
    p.el("phases").append(span);
  });
  const legend = d.sources.map(r => `<span><i class="swatch" `
    + `style="background:${d.colours[r]}"></i>data of rank ${r}</span>`);
  legend.push(`<span><i class="swatch" style="background:${d.empty}"></i>nothing yet</span>`,
              "<span>a0–2: chunk a of ranks 0 to 2, summed (a0+a1+a2); "
              + "a×3 where that does not fit: three ranks' a</span>",
              "<span>&#8212; copy</span>", "<span>- - reduce (add into)</span>",
              "<span>an arrow's label: the chunks it carries</span>",
              "<span>0->1 d+: rank 0's chunk d added into rank 1's (= copied; d>f: "
              + "into chunk f)</span>",
              "<span>&#9633; thick: written this round, dotted: sent</span>",
              "<span><i class=\"swatch\" style=\"background: repeating-linear-gradient(45deg, "
              + "#bbb 0 2px, #fff 2px 4px)\"></i>pale, hatched: a partial sum (summed over some "
              + "ranks, not yet all)</span>",
              "<span><i class=\"swatch\" style=\"border: 2px solid #1a7f37; "
              + "box-sizing: border-box\"></i>&#10003; green: holds its result</span>",
              "<span>keys: &#8592; &#8594; step, space play</span>");
  p.el("legend").innerHTML = legend.join("");
  p.el("topology-name").textContent = `${p.view.name}`
    + (p.view.rounds.some(r => r.arcs.some(a => a.slow))
       ? "; red arrows cross a link slower than the fastest (a NIC between nodes)" : "")
    + (p.view.rounds.some(r => !r.labels_shown)
       ? "; rounds of many transfers show an arrow's chunks on hover" : "");
  const body = p.el("rounds");
  body.append(row(["start", "", "", "", "", "", "", "", ""], () => go(0)));
  d.rounds.forEach((r, i) => body.append(row(
    [i, d.phases[phaseOf(p, i)].name, r.transfers.length, r.bytes_text, r.busiest_text,
     r.time_text, r.alpha_text, r.rest_text, r.total_text], () => go(stepAfter(p, i + 1)))));
}

function setUp() {
  $("title").textContent = panels.map(p => p.d.name).join(" vs ");
  panels.forEach(setUpPanel);
  drawAxis();
  $("slider").max = last;
  $("slider").addEventListener("input", e => go(Number(e.target.value)));
  $("prev").addEventListener("click", () => go(step - 1));
  $("next").addEventListener("click", () => go(step + 1));
  $("play").addEventListener("click", play);
  document.addEventListener("keydown", e => {
    const move = {ArrowRight: 1, ArrowLeft: -1}[e.key];
    if (move) go(step + move);
    else if (e.key === " " && e.target.tagName !== "BUTTON") play();
    else return;
    e.preventDefault();  // a focused slider would move a second time
  });
  render();
}

setUp();
