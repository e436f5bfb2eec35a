"use strict";
// Steps: 0 is the start, step k the state after round k - 1 with that round's transfers.
const data = JSON.parse(document.getElementById("schedule-data").textContent);
const view = data.view;
const $ = id => document.getElementById(id);
const last = data.rounds.length, W = data.cell_w, H = data.cell_h, LEFT = 86, TOP = 24;
const DEFS = '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
  + 'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#111"/></marker></defs>';
let step = 0, timer = null;
const plural = (k, word) => `${k} ${word}${k === 1 ? "" : "s"}`;
const phaseOf = index => data.phases.findIndex(p => p.first <= index && index <= p.last);

function headings() {
  const out = [];
  for (let c = 0; c < data.n_chunks; c++)
    out.push(`<text x="${LEFT + c * W + W / 2}" y="${TOP - 8}" text-anchor="middle">` +
             `${data.labels[c]}</text>`);
  for (let r = 0; r < data.n_ranks; r++)
    out.push(`<text x="${LEFT - 8}" y="${TOP + r * H + H / 2 + 4}" text-anchor="end">`
             + `${r === data.root ? "root " : ""}rank ${r}</text>`);
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

function cell(rank, chunk, held, label, marks) {  // held: [[rank, chunk], ...] summed
  const x = LEFT + chunk * W, y = TOP + rank * H, w = W - 2, h = H - 2;
  const holders = [...new Set(held.map(([r]) => r))].join(",");
  const contributions = held.map(pair => pair.join(":")).join(" ");
  const k = h / Math.max(held.length, 1);
  const stripes = held.length
    ? held.map(([r], i) => `<rect x="${x}" y="${y + i * k}" width="${w}" height="${k}" `
                           + `fill="${data.colours[r]}"/>`).join("")
    : `<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="${data.empty}"/>`;
  const text = label ? `<text class="label" x="${x + 3}" y="${y + h / 2 + 3.5}">`
                       + `${fitted(label, w)}</text>` : "";
  const sent = marks.sent  // sent from this round: a dotted outline
    ? `<rect class="sent" x="${x + 1}" y="${y + 1}" width="${w - 2}" height="${h - 2}"/>` : "";
  const outline = marks.changed  // written this round: a thick outline
    ? `<rect class="changed" x="${x + 1}" y="${y + 1}" width="${w - 2}" height="${h - 2}"/>` : "";
  const corner = marks.done  // holds its result: what the primitive promises this cell
    ? `<path d="M${x + w - 8},${y} h8 v8 z" fill="#111"/>` : "";
  const classes = ["cell", marks.changed && "changed-cell", marks.sent && "sent-cell",
                   marks.done && "complete"].filter(Boolean).join(" ");
  const notes = [marks.changed && "written this round", marks.sent && "sent this round",
                 marks.done && "complete"].filter(Boolean).join(", ");
  return `<g class="${classes}" data-rank="${rank}" data-chunk="${chunk}" `
    + `data-holders="${holders}" data-contributions="${contributions}" data-label="${label}">`
    + `<title>rank ${rank}, chunk ${data.labels[chunk]}: ${label || "nothing yet"}`
    + `${notes ? " (" + notes + ")" : ""}</title>${stripes}${text}${sent}${outline}${corner}</g>`;
}

function drawGrid(round) {
  const parts = [headings()];
  const key = (r, c) => `${r}:${c}`;
  const written = new Set(round ? round.transfers.flatMap(([, dst, , into]) =>
    into.map(c => key(dst, c))) : []);  // each transfer's destination chunks
  const sent = new Set(round ? round.transfers.flatMap(([src, , chunks]) =>
    chunks.map(c => key(src, c))) : []);
  const done = new Set(data.complete[step].map(([r, c]) => key(r, c)));
  data.states[step].forEach((row, r) => row.forEach((held, c) => parts.push(cell(
    r, c, held, data.texts[step][r][c],
    {changed: written.has(key(r, c)), sent: sent.has(key(r, c)), done: done.has(key(r, c))}))));
  const grid = $("grid");
  grid.setAttribute("width", LEFT + data.n_chunks * W + 8);
  grid.setAttribute("height", TOP + data.n_ranks * H + 8);
  grid.innerHTML = parts.join("");
}

function sector(ranks, node) {  // a node's ranks round the circle: a band behind them, named
  const c = view.size / 2, angle = r => 2 * Math.PI * r / data.n_ranks;
  const [a0, a1] = [angle(ranks[0]) - 0.35 / data.n_ranks * 2 * Math.PI,
                    angle(ranks[ranks.length - 1]) + 0.35 / data.n_ranks * 2 * Math.PI];
  const R = c - 30, at = a => [c + R * Math.sin(a), c - R * Math.cos(a)];
  const [[x0, y0], [x1, y1]] = [at(a0), at(a1)], big = a1 - a0 > Math.PI ? 1 : 0;
  const mid = (a0 + a1) / 2;
  const [tx, ty] = [c + (R - 34) * Math.sin(mid), c - (R - 34) * Math.cos(mid)];
  return `<path class="sector" stroke="${node % 2 ? "#f5ead8" : "#e3eaf3"}" `
    + `stroke-width="${2 * view.radius + 10}" `
    + `d="M${x0},${y0} A${R},${R} 0 ${big} 1 ${x1},${y1}"/>`
    + `<text x="${tx}" y="${ty + 4}" text-anchor="middle">node ${node}</text>`;
}

function drawTopology(round) {
  const parts = [DEFS];
  view.nodes.forEach(({node, ranks}) => parts.push(sector(ranks, node)));
  view.links.forEach(l => parts.push(
    `<path class="link" d="${l.d}"><title>${l.name}</title></path>`));
  if (round) view.rounds[step - 1].arcs.forEach(a => parts.push(
    `<path class="arrow${a.reduce ? " reduce" : ""}${a.slow ? " slow" : ""}" `
    + `data-src="${a.src}" data-dst="${a.dst}" `
    + `d="${a.d}" marker-end="url(#head)"><title>${a.text}</title></path>`));
  view.places.forEach(([x, y], r) => parts.push(
    `<g class="rank" data-rank="${r}"><circle cx="${x}" cy="${y}" r="${view.radius}" `
    + `fill="${data.colours[r]}" stroke="#111" stroke-width="0.8"/>`
    + `<text class="rank" x="${x}" y="${y + 3.5}" text-anchor="middle">${r}</text></g>`));
  $("topology").innerHTML = parts.join("");
  const loads = round ? view.rounds[step - 1].loads : [];
  const most = loads.length ? loads[0][3] : 0, shown = loads.slice(0, 12);
  const rows = shown.map(([name, bytes, text, busy], i) => `<tr class="load${i ? "" : " busiest"}" `
    + `data-link="${name}" data-bytes="${bytes}"><td>${name}</td><td>${text}</td>`
    + `<td><i class="bar" style="width:${Math.max(1, 120 * busy / (most || 1))}px"></i>`
    + `</td></tr>`);
  $("loads").innerHTML = !round ? "before the first round: no link is busy"
    : `links busy this round (jaxcoll.simulate): ${plural(loads.length, "link")}, the one `
      + `busy longest (bytes x its β) first${loads.length > shown.length ? ` (${loads.length - shown.length} more not shown)` : ""}`
      + `<table>${rows.join("")}</table>`;
}

function render() {
  const round = step ? data.rounds[step - 1] : null;
  drawGrid(round);
  drawTopology(round);
  $("round").textContent = step ? `after round ${step - 1} (${step} of ${last} done)`
                                : `start (${plural(last, "round")})`;
  $("round").dataset.step = step;
  $("slider").value = step;
  const phase = round ? phaseOf(step - 1) : -1;
  document.querySelectorAll("#phases .phase").forEach((p, k) => p.classList.toggle("current",
                                                                                 k === phase));
  $("now").innerHTML = "";
  $("now").append(round
    ? `round ${step - 1}, ${data.phases[phase].name}: ${round.bytes_text} moved, the busiest `
      + `rank sends ${round.busiest_text}`
      + (round.seconds === null ? ": " : `, ${round.time_text} (${round.total_text} so far): `)
    : "before the first round: what each rank starts with");
  if (round) {
    const code = document.createElement("code");
    code.textContent = round.text.join("   ");
    $("now").append(code);
  }
  document.querySelectorAll("#rounds tr").forEach((tr, k) => tr.classList.toggle("current",
                                                                               k === step));
  $("prev").disabled = step === 0;
  $("next").disabled = step === last;
}

function go(k) { step = Math.max(0, Math.min(last, k)); render(); }

function play() {
  if (timer) {
    clearInterval(timer);
    timer = null;
  } else {
    if (step === last) go(0);
    timer = setInterval(() => (step < last ? go(step + 1) : play()), 800);
  }
  $("play").innerHTML = timer ? "&#10074;&#10074; Pause" : "&#9654; Play";
  $("play").dataset.playing = String(Boolean(timer));
}

function row(cells, k) {
  const tr = document.createElement("tr");
  for (const text of cells) tr.insertCell().textContent = text;
  tr.addEventListener("click", () => go(k));
  return tr;
}

function setUp() {
  $("title").textContent = data.name;
  const root = data.root === null ? "" : ` from root ${data.root}`;
  const what = data.collective ? data.collective + root : "no primitive";
  const taking = data.total_text === null ? "" : ` takes ${data.total_text}`;
  $("summary").textContent = `${what}: ${plural(data.n_ranks, "rank")} (rows) x `
    + `${plural(data.n_chunks, "chunk")} (columns), ${plural(last, "round")}; `
    + `${data.nbytes_text} per rank${taking}, ${data.model}.`;
  $("verdict").textContent = data.verdict_text;
  $("verdict").className = data.verdict;
  data.phases.forEach((p, k) => {
    const span = document.createElement("span");
    span.className = "phase";
    span.style.flex = String(p.last - p.first + 1);
    span.dataset.first = p.first;
    span.dataset.last = p.last;
    span.textContent = `${p.name}: ${p.first === p.last ? "round " + p.first
                                                       : `rounds ${p.first}–${p.last}`}`;
    span.title = span.textContent;
    span.addEventListener("click", () => go(p.first + 1));
    $("phases").append(span);
  });
  const legend = data.sources.map(r => `<span><i class="swatch" `
    + `style="background:${data.colours[r]}"></i>data of rank ${r}</span>`);
  legend.push(`<span><i class="swatch" style="background:${data.empty}"></i>nothing yet</span>`,
              "<span>a0–2: chunk a of ranks 0 to 2, summed (a0+a1+a2); "
              + "a×3 where that does not fit: three ranks' a</span>",
              "<span>&#8212; copy</span>", "<span>- - reduce (add into)</span>",
              "<span>0->1 d+: rank 0's chunk d added into rank 1's (= copied; d>f: "
              + "into chunk f)</span>",
              "<span>&#9633; thick: written this round, dotted: sent</span>",
              "<span>&#9698; holds its result</span>",
              "<span>keys: &#8592; &#8594; step, space play</span>");
  $("legend").innerHTML = legend.join("");
  $("topology-name").textContent = `links: ${view.name}`
    + (view.rounds.some(r => r.arcs.some(a => a.slow))
       ? "; red arrows cross a link slower than the fastest (a NIC between nodes)" : "");
  const body = $("rounds");
  body.append(row(["start", "", "", "", "", "", ""], 0));
  data.rounds.forEach((r, i) => body.append(row(
    [i, data.phases[phaseOf(i)].name, r.transfers.length, r.bytes_text, r.busiest_text,
     r.time_text, r.total_text], i + 1)));
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
