"""Pictures of a schedule: which rank holds whose data after every round (draw: matplotlib).

One panel per round, ranks as rows and chunks as columns. A cell is striped with the colour of
every rank whose data it holds (one colour: a copy of that rank's chunk; all colours: the full
reduction), grey if it holds nothing yet. Arrows are the round's transfers: solid for copies,
dashed for reductions.

:func:`html` writes the same states as one self-contained HTML page that steps through the rounds
(keys, buttons, slider, play) with each round's bytes (and time, where a calibration or topology
is named); no matplotlib.

Also pictures for the tutorials (:class:`Picture`, shown inline in a notebook): how the
primitives relate (:func:`relations`), predicted times over message size against the lower
bound (:func:`over_sizes`), and two runs compared step by step (:func:`step_by_step`).
"""

from __future__ import annotations

import io
import json
import math
import re
from collections import defaultdict
from dataclasses import replace
from html import escape
from pathlib import Path

import numpy as np

from jaxcoll.analysis.model import Calibration, cost
from jaxcoll.analysis.topology import chunk_bytes, simulate
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule
from jaxcoll.ir.symbolic import ScheduleError, promised, states, verify

EMPTY = "#e6e6e6"
ARROW = "#111111"


# Paul Tol's "muted" scheme (personal.sron.nl/~pault): nine colours told apart with every
# common colour-vision deficiency; beyond nine ranks matplotlib's tab20, which is not (the
# cells' titles name the ranks). Written out so that the HTML page needs no matplotlib.
MUTED = ("#cc6677 #332288 #ddcc77 #117733 #88ccee #882255 #44aa99 #999933 "
         "#aa4499").split()
_TAB20 = ("#1f77b4 #aec7e8 #ff7f0e #ffbb78 #2ca02c #98df8a #d62728 #ff9896 #9467bd #c5b0d5 "
          "#8c564b #c49c94 #e377c2 #f7b6d2 #7f7f7f #c7c7c7 #bcbd22 #dbdb8d #17becf "
          "#9edae5").split()


def _rank_colours(n: int) -> list[str]:
    """One colour per rank: Tol's colour-blind-safe muted scheme up to 9 ranks, tab20
    (repeating) beyond."""
    palette = MUTED if n <= len(MUTED) else _TAB20
    return [palette[i % len(palette)] for i in range(n)]


def chunk_labels(schedule: Schedule) -> list[str]:
    """Each of a rank's chunks as the pictures name it: the primitive's chunks by number, an
    out-of-place schedule's input chunks "in0", "in1", ..., other scratch chunks "s0", ..."""
    n, at = schedule.n_chunks, max(schedule.input_at, schedule.output_at)  # the other run
    other = "in" if schedule.input_at else "out"
    labels, scratch = [str(c) for c in range(n)], 0
    for c in range(n, schedule.buffer_chunks):
        if not schedule.in_place and at <= c < at + n:
            labels.append(f"{other}{c - at}")
        else:
            labels.append(f"s{scratch}")
            scratch += 1
    return labels


def _panel(ax, schedule: Schedule, state, round_index: int | None, colours) -> None:
    """One panel: the state after round ``round_index`` (None: before the first round)."""
    from matplotlib.patches import FancyArrowPatch, Rectangle  # optional: jaxcoll[viz]

    n, chunks = schedule.n_ranks, schedule.buffer_chunks
    for rank in range(n):
        for chunk in range(chunks):
            held = sorted(state[rank][chunk] or ())
            x, y = chunk, n - 1 - rank  # rank 0 on top
            if not held:
                ax.add_patch(Rectangle((x, y), 0.92, 0.92, color=EMPTY))
            for k, (owner, _) in enumerate(held):  # one horizontal stripe per contributor
                height = 0.92 / len(held)
                ax.add_patch(Rectangle((x, y + k * height), 0.92, height, color=colours[owner]))
    if round_index is not None:
        for t in schedule.rounds[round_index]:
            for chunk, into in zip(t.chunks, t.into):
                start = (chunk + 0.46, n - 1 - t.src + 0.46)
                end = (into + 0.46, n - 1 - t.dst + 0.46)
                ax.add_patch(FancyArrowPatch(
                    start, end, arrowstyle="-|>", mutation_scale=10, linewidth=1.4, color=ARROW,
                    linestyle="--" if t.reduce else "-", connectionstyle="arc3,rad=0.35",
                    clip_on=False))  # a long arc (e.g. the ring's wrap-around) may bulge out
    ax.set_xlim(-0.1, chunks)
    ax.set_ylim(-0.1, n)
    ax.set_xticks([c + 0.46 for c in range(chunks)], chunk_labels(schedule), fontsize=7)
    ax.set_yticks([n - 1 - r + 0.46 for r in range(n)], [f"rank {r}" for r in range(n)],
                  fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title("start" if round_index is None else f"round {round_index}", fontsize=9)


def _legend(schedule: Schedule, panels: list[int | None], history, colours) -> list:
    """Legend entries for what the panels show: the ranks whose data appears, empty cells,
    copies and reductions (only those that occur)."""
    from matplotlib.lines import Line2D  # optional: jaxcoll[viz]
    from matplotlib.patches import Patch  # optional: jaxcoll[viz]

    shown = [history[0 if index is None else index + 1] for index in panels]
    cells = [held for state in shown for rank in state for held in rank]
    owners = sorted({owner for held in cells for owner, _ in (held or ())})
    kinds = {t.reduce for index in panels if index is not None
             for t in schedule.rounds[index]}
    entries = [Patch(color=colours[r], label=f"data of rank {r}") for r in owners]
    if any(not held for held in cells):
        entries.append(Patch(color=EMPTY, label="nothing yet"))
    if False in kinds:
        entries.append(Line2D([], [], color=ARROW, label="copy"))
    if True in kinds:
        entries.append(Line2D([], [], color=ARROW, linestyle="--", label="reduce (add into)"))
    return entries


def _figure(schedule: Schedule, panels: list[int | None], history):
    from matplotlib.figure import Figure  # not pyplot: a notebook's backend stays as it is

    colours = _rank_colours(schedule.n_ranks)
    columns = min(len(panels), 4)
    rows = math.ceil(len(panels) / columns)
    size = 0.45 * max(schedule.buffer_chunks, 3) + 1.2, 0.45 * schedule.n_ranks + 0.9
    fig = Figure(figsize=(size[0] * columns, size[1] * rows + 1.0))
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, index in zip(axes.flat, panels):
        _panel(ax, schedule, history[0 if index is None else index + 1], index, colours)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.legend(handles=_legend(schedule, panels, history, colours), loc="lower center",
               ncol=6, fontsize=7, frameon=False)
    fig.suptitle(f"{schedule.name}: {schedule.n_ranks} ranks x {schedule.n_chunks} chunks, "
                 f"{schedule.n_rounds} rounds  (rows: ranks, columns: chunks)", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return fig


def draw(schedule: Schedule, path, *, gif: bool = False) -> Path:
    """Write a PNG (or, ``gif=True``, an animated GIF: one frame a round) of ``schedule``."""
    history = states(schedule)
    path = Path(path)
    panels = [None, *range(schedule.n_rounds)]
    if not gif:
        fig = _figure(schedule, panels, history)
        fig.savefig(path, dpi=110)
        return path

    from PIL import Image  # optional: jaxcoll[viz]

    frames = []
    for index in panels:
        fig = _figure(schedule, [index], history)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        frames.append(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=900, loop=0)
    return path


# ----------------------------------------------------------------------------- the page
# One self-contained HTML file (inline style, script and JSON; nothing fetched) that steps
# through a schedule's rounds: the states are symbolic.states' (what verify proves), the bytes
# and times the cost model's. Its script only draws what the JSON says.

class Page:
    """An HTML page that a notebook shows inline, in an iframe (its script runs apart)."""
    def __init__(self, text: str, height: int):
        self.text, self.height = text, height

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{escape(self.text, quote=True)}" sandbox="allow-scripts" '
                f'style="width: 100%; height: {self.height}px; border: 0"></iframe>')


def html(schedule: Schedule, path=None, *, nbytes: float = 1 << 20, calibration=None,
         topology=None) -> Path | Page:
    """Write a page that steps through ``schedule``'s rounds to ``path`` (.html) and return the
    path; without ``path``, return a :class:`Page` that a notebook shows inline.

    Each rank's buffer is a row of chunks coloured by whose data they hold
    (:func:`jaxcoll.ir.symbolic.states`), the round's transfers are arrows, and each round's bytes
    for a buffer of ``nbytes`` per rank come from :func:`jaxcoll.cost`. Times only where named:
    with ``calibration`` (e.g. ``jaxcoll.calibration()``, what ``auto`` uses here) from the
    α-β-γ model, with ``topology`` from :func:`jaxcoll.simulate` (a calibration's shared medium
    too); without either the page says it shows no times. Raises ScheduleError if a transfer is
    not possible; a schedule that breaks its primitive's promise is drawn, with verify's
    message; one without a primitive from allreduce's start, marked not verified.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"html: schedule must be a jaxcoll.Schedule (jaxcoll.schedule(...) or "
                        f"Schedule.build(...)), got {type(schedule).__name__}: {schedule!r:.80}")
    if path is not None and Path(path).suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"html: path={str(path)!r} must end in .html (or .htm)")
    if not nbytes > 0:
        raise ValueError(f"html: nbytes={nbytes!r} must be > 0 (bytes per rank)")
    data = _page_data(schedule, nbytes, calibration, topology)
    json_text = json.dumps(data).replace("<", "\\u003c")  # no "</script>" inside the script
    fields = {"TITLE": escape(schedule.name), "DATA": json_text}  # one pass: a name may say DATA
    text = re.sub(r"__(TITLE|DATA)__", lambda found: fields[found.group(1)], _PAGE)
    if path is None:
        return Page(text, height=330 + data["cell"] * schedule.n_ranks + 22 * min(
            schedule.n_rounds + 1, 12))
    path = Path(path)
    path.write_text(text, encoding="utf-8")
    return path


def _verified(schedule: Schedule) -> tuple[Schedule, str, str]:
    """The schedule whose states the page shows, verify's verdict ("ok", "bad" or
    "unverified") and a line saying it."""
    if not schedule.primitive:  # shown from allreduce's start: every rank holds all its data
        return (replace(schedule, primitive="allreduce"), "unverified",
                "not verified: the schedule names no primitive (give Schedule one, e.g. "
                "Schedule(name, n, n_chunks, rounds, 'allreduce')); shown from a start where "
                "every rank holds its own data in every chunk")
    try:
        verify(schedule)
    except ScheduleError as error:
        return schedule, "bad", f"verify fails: {error}"
    return schedule, "ok", (f"verified: after the last round every rank holds what "
                            f"{schedule.primitive} promises, each contribution once")


def _round_costs(schedule: Schedule, nbytes: float, calibration_, topology
                 ) -> tuple[list[dict], str, str | None]:
    """Per round: bytes its transfers move, bytes the busiest rank sends and (where a
    calibration or topology is named) seconds; a line naming the model; the whole time's text
    (None: no times)."""
    timed = calibration_ is not None or topology is not None
    cal = calibration_ or Calibration(0.0, 0.0, 0.0, "none")  # no times: bytes only
    links = topology or (cal.topology(schedule.n_ranks) if timed else None)
    chunk = chunk_bytes(schedule, nbytes)
    rows, total = [], 0.0
    for round_ in schedule.rounds:
        alone = replace(schedule, rounds=(round_,))
        priced = cost(alone, nbytes, alpha=cal.alpha, beta=cal.beta, gamma=cal.gamma)
        seconds = priced.seconds if links is None else simulate(alone, nbytes, links).seconds
        total += seconds
        moved = sum(len(t.chunks) for t in round_) * chunk
        rows.append({"bytes": moved, "busiest": priced.bytes_sent,
                     "seconds": seconds if timed else None,
                     "bytes_text": size_label(moved), "busiest_text": size_label(priced.bytes_sent),
                     "time_text": _duration(seconds) if timed else "—",
                     "total_text": _duration(total) if timed else "—"})
    if not timed:
        return rows, ("no times: rounds and bytes only (no hardware was named: pass "
                      "calibration=jaxcoll.calibration() or a topology; on the command line "
                      "--calibration cpu, gloo or gpu)"), None
    if links is not None:
        return rows, f"simulated on {links.name} (jaxcoll.simulate)", _duration(total)
    return rows, (f"α-β-γ model (jaxcoll.cost), {cal.backend} calibration: α = "
                  f"{_duration(cal.alpha)}, β = {cal.beta * 1e12:.3g} ps/B, "
                  f"γ = {cal.gamma * 1e12:.3g} ps/B"), _duration(total)


def _duration(seconds: float) -> str:
    """'40 µs', '1.2 ms', '3.5 s': three digits in the largest unit that keeps it >= 1."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e6:.3g} µs"


def _page_data(schedule: Schedule, nbytes: float, calibration_, topology) -> dict:
    """Everything the page's script draws, as JSON-ready data."""
    shown, verdict, verdict_text = _verified(schedule)
    history = states(shown)
    costs, model, total_text = _round_costs(schedule, nbytes, calibration_, topology)
    rounds = [{"transfers": [[t.src, t.dst, t.chunks, t.into, t.reduce] for t in round_],
               "text": [str(t) for t in round_], **row}
              for round_, row in zip(schedule.rounds, costs)]
    rooted = schedule.primitive in RECORDS and RECORDS[schedule.primitive].rooted
    return {"name": schedule.name, "primitive": schedule.primitive,
            "root": schedule.root if rooted else None,
            "n_ranks": schedule.n_ranks, "n_chunks": schedule.buffer_chunks,
            "labels": chunk_labels(schedule),
            "cell": int(np.clip(480 // max(schedule.n_ranks, schedule.buffer_chunks), 10, 40)),
            "colours": _rank_colours(schedule.n_ranks), "empty": EMPTY,
            "sources": sorted({r for state in history for row in state for cell in row
                               for r, _ in cell or ()}),  # the ranks whose data it shows
            "verdict": verdict, "verdict_text": verdict_text,
            "nbytes_text": size_label(nbytes), "model": model,
            "total_text": total_text,
            "states": [[[sorted(cell or ()) for cell in row] for row in state]
                       for state in history],
            "complete": _complete(shown, history) if verdict != "unverified" else
            [[] for _ in history],
            "rounds": rounds}


def _complete(schedule: Schedule, history) -> list[list[list[int]]]:
    """Per step, the [rank, chunk] cells that hold exactly what they must end with."""
    want = promised(schedule)
    return [[[r, c] for (r, c), needed in want.items() if set(state[r][c] or ()) == needed]
            for state in history]


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
         margin: 16px; color: #222; }
  h1 { font-size: 17px; margin: 0 0 2px; }
  #verdict.ok { color: #1a7f37; }
  #verdict.bad { color: #b42318; }
  #verdict.unverified { color: #8a6100; }
  .controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 10px 0 4px; }
  #round { font-weight: 600; min-width: 13em; }
  #now { font-size: 13px; min-height: 2.8em; }
  #now code { font-size: 12px; }
  svg { display: block; margin: 6px 0; }
  svg text { font-size: 11px; fill: #444; }
  .arrow { fill: none; stroke: #111; stroke-width: 1.6; }
  .arrow.reduce { stroke-dasharray: 5 3; }
  .changed { fill: none; stroke: #111; stroke-width: 2.5; }
  svg text.done { font-size: 12px; font-weight: 700; fill: #fff; stroke: #111;
                  stroke-width: 0.6; paint-order: stroke; }
  .legend span { display: inline-flex; align-items: center; gap: 4px; margin-right: 12px;
                 font-size: 12px; }
  .swatch { width: 12px; height: 12px; display: inline-block; }
  .table { max-height: 280px; overflow: auto; margin-top: 8px; display: inline-block; }
  table { border-collapse: collapse; font-size: 12px; }
  th, td { padding: 2px 10px; text-align: right; border-bottom: 1px solid #eee; }
  th { position: sticky; top: 0; background: #fafafa; }
  tbody tr { cursor: pointer; }
  tr.current { background: #fff3c4; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div id="summary"></div>
<div id="verdict"></div>
<div class="controls">
  <button id="prev" title="previous round (left arrow)">&#9664; Prev</button>
  <button id="play" title="play / pause (space)" data-playing="false">&#9654; Play</button>
  <button id="next" title="next round (right arrow)">Next &#9654;</button>
  <input id="slider" type="range" min="0" value="0" step="1" aria-label="round">
  <output id="round" data-step="0"></output>
</div>
<div id="now"></div>
<svg id="grid" role="img" aria-label="each rank's chunks, coloured by whose data they hold"></svg>
<div class="legend" id="legend"></div>
<div class="table"><table>
  <thead><tr><th>round</th><th>transfers</th><th>bytes moved</th><th>busiest rank sends</th>
    <th>time</th><th>total</th></tr></thead>
  <tbody id="rounds"></tbody>
</table></div>
<script type="application/json" id="schedule-data">__DATA__</script>
<script>
"use strict";
// Steps: 0 is the start, step k the state after round k - 1 with that round's transfers.
const data = JSON.parse(document.getElementById("schedule-data").textContent);
const $ = id => document.getElementById(id);
const last = data.rounds.length, S = data.cell;
const BULGE = Math.ceil(0.18 * Math.max(data.n_ranks, data.n_chunks) * S);  // arcs' room
const LEFT = 86 + BULGE, TOP = 24;
const DEFS = '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
  + 'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#111"/></marker></defs>';
let step = 0, timer = null;

function centre(rank, chunk) { return [LEFT + chunk * S + S / 2 - 1, TOP + rank * S + S / 2 - 1]; }

function labels() {
  const out = [];
  for (let c = 0; c < data.n_chunks; c++)
    out.push(`<text x="${LEFT + c * S + S / 2}" y="${TOP - 8}" text-anchor="middle">` +
             `${data.labels[c]}</text>`);
  for (let r = 0; r < data.n_ranks; r++)
    out.push(`<text x="${LEFT - 8}" y="${TOP + r * S + S / 2 + 4}" text-anchor="end">`
             + `${r === data.root ? "root " : ""}rank ${r}</text>`);
  return out.join("");
}

function cell(rank, chunk, held, changed, done) {  // held: [[rank, chunk], ...] summed
  const x = LEFT + chunk * S, y = TOP + rank * S, w = S - 2, h = w / Math.max(held.length, 1);
  const holders = [...new Set(held.map(([r]) => r))].join(",");
  const contributions = held.map(pair => pair.join(":")).join(" ");
  const what = held.length ? "data of " + held.map(([r, c]) => `rank ${r}'s chunk ${c}`).join(", ")
                           : "nothing yet";
  const stripes = held.length
    ? held.map(([r], k) => `<rect x="${x}" y="${y + k * h}" width="${w}" height="${h}" `
                           + `fill="${data.colours[r]}"/>`).join("")
    : `<rect x="${x}" y="${y}" width="${w}" height="${w}" fill="${data.empty}"/>`;
  const outline = changed  // written this round: an outline inside the cell
    ? `<rect class="changed" x="${x + 1}" y="${y + 1}" width="${w - 2}" height="${w - 2}"/>` : "";
  const tick = done  // holds its result: what the primitive promises this cell
    ? `<text class="done" x="${x + w - 2}" y="${y + 11}" text-anchor="end">&#10003;</text>` : "";
  const classes = `cell${changed ? " changed-cell" : ""}${done ? " complete" : ""}`;
  return `<g class="${classes}" data-rank="${rank}" `
    + `data-chunk="${chunk}" data-holders="${holders}" data-contributions="${contributions}">`
    + `<title>rank ${rank}, chunk ${chunk}: ${what}${changed ? " (written this round)" : ""}`
    + `${done ? " (complete)" : ""}</title>${stripes}${outline}${tick}</g>`;
}

function arrows([src, dst, chunks, into, reduce]) {  // one arc per chunk moved, as draw()'s
  return chunks.map((c, i) => {
    const [x0, y0] = centre(src, c), [x1, y1] = centre(dst, into[i]);
    const cx = (x0 + x1) / 2 + 0.35 * (y1 - y0), cy = (y0 + y1) / 2 - 0.35 * (x1 - x0);
    return `<path class="arrow${reduce ? " reduce" : ""}" data-src="${src}" data-dst="${dst}" `
      + `d="M${x0},${y0} Q${cx},${cy} ${x1},${y1}" marker-end="url(#head)"/>`;
  }).join("");
}

function render() {
  const round = step ? data.rounds[step - 1] : null, parts = [DEFS, labels()];
  const written = new Set(round ? round.transfers.flatMap(([, dst, , into]) =>
    into.map(c => `${dst}:${c}`)) : []);  // each transfer's destination chunks
  const done = new Set(data.complete[step].map(([r, c]) => `${r}:${c}`));
  data.states[step].forEach((row, r) => row.forEach((held, c) =>
    parts.push(cell(r, c, held, written.has(`${r}:${c}`), done.has(`${r}:${c}`)))));
  if (round) parts.push(round.transfers.map(arrows).join(""));
  const grid = $("grid");
  grid.setAttribute("width", LEFT + data.n_chunks * S + BULGE);
  grid.setAttribute("height", TOP + data.n_ranks * S + 8);
  grid.innerHTML = parts.join("");
  $("round").textContent = step ? `after round ${step - 1} (${step} of ${last})`
                                : `start (${last} rounds)`;
  $("round").dataset.step = step;
  $("slider").value = step;
  $("now").innerHTML = "";
  $("now").append(round
    ? `round ${step - 1}: ${round.bytes_text} moved, the busiest rank sends `
      + `${round.busiest_text}`
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
  const what = data.primitive ? data.primitive + root : "no primitive";
  const plural = (k, word) => `${k} ${word}${k === 1 ? "" : "s"}`;
  const taking = data.total_text === null ? "" : ` takes ${data.total_text}`;
  $("summary").textContent = `${what}: ${plural(data.n_ranks, "rank")} (rows) x `
    + `${plural(data.n_chunks, "chunk")} (columns), ${plural(last, "round")}; `
    + `${data.nbytes_text} per rank${taking}, ${data.model}.`;
  $("verdict").textContent = data.verdict_text;
  $("verdict").className = data.verdict;
  const legend = data.sources.map(r => `<span><i class="swatch" `
    + `style="background:${data.colours[r]}"></i>data of rank ${r}</span>`);
  legend.push(`<span><i class="swatch" style="background:${data.empty}"></i>nothing yet</span>`,
              "<span>&#8212; copy</span>", "<span>- - reduce (add into)</span>",
              "<span>&#9633; outlined: written this round</span>",
              "<span>&#10003; holds its result</span>",
              "<span>keys: &#8592; &#8594; step, space play</span>");
  $("legend").innerHTML = legend.join("");
  const body = $("rounds");
  body.append(row(["start", "", "", "", "", ""], 0));
  data.rounds.forEach((r, i) => body.append(row(
    [i, r.transfers.length, r.bytes_text, r.busiest_text, r.time_text, r.total_text], i + 1)));
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
</script>
</body>
</html>
"""


# ----------------------------------------------------------------------------- other pictures
# Used by the tutorials instead of plotting code of their own. Each returns a Picture, which a
# notebook shows (as PNG) and which saves itself; none touches pyplot or the backend.

class Picture:
    """A matplotlib Figure that shows itself in a notebook and saves itself."""
    def __init__(self, figure):
        self.figure = figure

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=90)
        return buffer.getvalue()

    def save(self, path) -> Path:
        self.figure.savefig(path, dpi=110)
        return Path(path)


# The relations pictures: primitives whose result is reduced or collected on the left, those
# that fan data out on the right, AllReduce in the middle.
_BUILT_FROM = {"reduce_scatter": (-4.2, 5.0), "allreduce": (0.0, 5.0), "allgather": (4.2, 5.0),
               "reduce": (-2.2, 2.8), "broadcast": (2.2, 2.8), "gather": (-4.2, 0.6),
               "scatter": (4.2, 0.6), "alltoall": (0.0, -0.3)}
_BEND_INTO = {"alltoall": -0.15}  # "n of them" arrows into the lowest box curve under the rest
_MIRRORS = {"allreduce": (0.0, 3.2), "reduce_scatter": (-2.6, 2.0), "allgather": (2.6, 2.0),
            "reduce": (-2.6, 0.6), "broadcast": (2.6, 0.6), "gather": (-2.6, -0.8),
            "scatter": (2.6, -0.8), "alltoall": (0.0, -2.2)}
_PLUS = {(("reduce_scatter", "allgather"), "allreduce"): (0.0, 6.4),  # where a + sits
         (("reduce", "broadcast"), "allreduce"): (0.0, 3.6),
         (("scatter", "allgather"), "broadcast"): (4.2, 2.8),
         (("reduce_scatter", "gather"), "reduce"): (-4.2, 2.8)}
_COLOURS = {"concatenation": "#1f5fa8", "n of them": "#7b3fa0", "reversed": "#d9730d",
            "transpose": "#2e8b3a"}


def _arc_point(p0, p1, bend, at):
    """The point at fraction ``at`` along matplotlib's arc3 curve of ``bend`` from p0 to p1."""
    (x0, y0), (x1, y1) = p0, p1
    cx, cy = (x0 + x1) / 2 + bend * (y1 - y0), (y0 + y1) / 2 - bend * (x1 - x0)
    return tuple((1 - at) ** 2 * a + 2 * at * (1 - at) * c + at ** 2 * b
                 for a, c, b in ((x0, cx, x1), (y0, cy, y1)))


def _tag(ax, xy, text, colour, **kw):
    ax.text(*xy, text, ha="center", va="center", color=colour, zorder=5, fontsize=9,
            bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=colour, lw=0.6), **kw)


def _arrow(ax, a, b, colour, bend=0.0, label="", at=0.5, style="-|>", **kw):
    """An arrow from shape a to shape b (each a (patch, (x, y)) pair), labelled on the curve."""
    from matplotlib.patches import FancyArrowPatch  # optional: jaxcoll[viz]

    ax.add_patch(FancyArrowPatch(a[1], b[1], patchA=a[0], patchB=b[0], arrowstyle=style,
                                 mutation_scale=16, lw=1.7, color=colour, zorder=2,
                                 connectionstyle=f"arc3,rad={bend}", **kw))
    if label:
        _tag(ax, _arc_point(a[1], b[1], bend, at), label, colour)


def _boxes(ax, places, notes):
    """A rounded box per primitive; returns {name: (box, (x, y))} for arrows to attach to."""
    from matplotlib.patches import FancyBboxPatch  # optional: jaxcoll[viz]

    shapes = {}
    for name, (x, y) in places.items():
        text = name + (f"\n{notes[name]}" if name in notes else "")
        width = 0.085 * max(map(len, text.split("\n"))) + 0.25
        height = 0.3 * text.count("\n") + 0.42
        box = FancyBboxPatch((x - width / 2, y - height / 2), width, height, zorder=3,
                             boxstyle="round,pad=0.02,rounding_size=0.08", facecolor="#f4f4f4",
                             edgecolor="#333333")
        ax.add_patch(box)
        ax.text(x, y, text, ha="center", va="center", fontsize=11, fontweight="bold", zorder=4)
        shapes[name] = (box, (x, y))
    return shapes


def relations(edges, transposes=()) -> Picture:
    """How the primitives are built from each other, in two panels. ``edges``: (kind, parts,
    target, label) with kind "concatenation" (target = parts[0] + parts[1]), "n of them"
    (target = n of parts[0], one per root) or "reversed" (parts[0] run backwards is a target),
    label the algorithms it holds for; ``transposes``: (a, b) pairs, (a, a) for self-transposes.
    """
    from matplotlib.figure import Figure  # optional: jaxcoll[viz]
    from matplotlib.lines import Line2D  # optional: jaxcoll[viz]

    labels = defaultdict(list)  # (kind, parts, target) -> the algorithms it holds for
    for kind, parts, target, label in edges:
        labels[kind, tuple(parts), target].append(label)
    fig = Figure(figsize=(11, 17))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [8.4, 6.4]})
    for ax, (xs, ys), title in [
            (top, ((-5.3, 5.3), (-0.9, 7.5)), "Built from (every arrow checked)"),
            (bottom, ((-3.6, 3.6), (-2.7, 3.7)), "Mirror images: run backwards, and transposes")]:
        ax.set(xlim=xs, ylim=ys, aspect="equal", title=title)
        ax.axis("off")
    _built_from_panel(top, labels)
    _mirrors_panel(bottom, labels, transposes)
    legend = [("1st + 2nd: concatenation a + b", "concatenation", "-"),
              ("×n: n of them, one per root (rank r's on chunk r)", "n of them", ":"),
              ("A → B: A's schedule run backwards is a B", "reversed", "-"),
              ("A ↔ B: transposes (jax.vjp of one runs the other)", "transpose", "-")]
    fig.legend(handles=[Line2D([], [], color=_COLOURS[k], ls=ls, lw=1.7, label=text)
                        for text, k, ls in legend], loc="lower center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return Picture(fig)


def _built_from_panel(ax, labels) -> None:
    """Concatenations (a + sign between the parts and the whole) and "n of them" arrows."""
    from matplotlib.patches import Circle  # optional: jaxcoll[viz]

    shape = _boxes(ax, _BUILT_FROM, {})
    for (kind, parts, target), algorithms in labels.items():
        colour = _COLOURS[kind]
        if kind == "concatenation":
            x, y = _PLUS.get((parts, target),
                             np.mean([_BUILT_FROM[p] for p in (*parts, target)], axis=0))
            plus = Circle((x, y), 0.24, facecolor="white", edgecolor=colour, lw=1.7, zorder=3)
            ax.add_patch(plus)
            ax.text(x, y, "+", ha="center", va="center", fontsize=16, color=colour, zorder=4)
            for part, which in zip(parts, ("1st", "2nd")):
                _arrow(ax, shape[part], (plus, (x, y)), colour, label=which, at=0.6)
            _arrow(ax, (plus, (x, y)), shape[target], colour)
            side = 0.45 if x == 0 else -0.45 * np.sign(x)  # the algorithms, beside the +
            ax.text(x + side, y + (0.55 if x == 0 and y > 5 else -0.35 if x else 0),
                    ",\n".join(algorithms), fontsize=9, color=colour, va="center",
                    ha="center" if x else "left" if side > 0 else "right",
                    bbox=dict(boxstyle="round,pad=0.3", facecolor="#eef3fa", edgecolor="none"))
        elif kind == "n of them":
            bend = _BEND_INTO.get(target, 0.0)
            _arrow(ax, shape[parts[0]], shape[target], colour, bend, "×n", at=0.72, linestyle=":")
            _tag(ax, _arc_point(_BUILT_FROM[parts[0]], _BUILT_FROM[target], bend, 0.38),
                 "\n".join(algorithms), colour)


def _mirrors_panel(ax, labels, transposes) -> None:
    """Schedules run backwards (one-way arrows) and transposes (two-way arrows)."""
    shape = _boxes(ax, _MIRRORS, {a: "its own transpose" for a, b in transposes if a == b})
    for (kind, parts, target), algorithms in labels.items():
        if kind == "reversed":
            _arrow(ax, shape[parts[0]], shape[target], _COLOURS[kind], -0.22,
                   "reversed: " + "\n".join(algorithms))
    for a, b in transposes:
        if a != b:
            _arrow(ax, shape[a], shape[b], _COLOURS["transpose"], label="transposes",
                   style="<|-|>")


def over_sizes(sizes, seconds: dict, *, bound=None, picks=(), title: str = "") -> Picture:
    """Predicted seconds {algorithm: (len(sizes),)} over message size ``sizes`` (bytes per rank),
    in two panels: the times, log-log, with ``bound`` (the lower bound at each size) dashed;
    and each time over the bound (over the fastest, without one). ``picks``: [(first size,
    name)] where the choice changes, drawn dotted."""
    from matplotlib.figure import Figure  # optional: jaxcoll[viz]

    sizes = np.asarray(sizes, float)
    floor = np.asarray(bound, float) if bound is not None else np.min(list(seconds.values()), 0)
    fig = Figure(figsize=(13, 5))
    left, right = fig.subplots(1, 2)
    for k, (name, t) in enumerate(seconds.items()):
        colour = f"C{k}"
        left.loglog(sizes, np.asarray(t) * 1e6, color=colour, label=name)
        right.semilogx(sizes, np.asarray(t) / floor, color=colour)
    if bound is not None:
        left.loglog(sizes, floor * 1e6, "k--", label="lower bound")
    for k, (start, name) in enumerate(picks):
        if k:
            right.axvline(start, color="k", ls=":", lw=1)
        right.text(start * 1.1, 0.97, name, transform=right.get_xaxis_transform(), rotation=90,
                   va="top", fontsize=8)
    ticks = [4.0 ** k for k in range(20) if sizes[0] <= 4.0 ** k <= sizes[-1]]
    for ax in (left, right):
        ax.set_xticks(ticks, [size_label(t) for t in ticks], rotation=45)
        ax.minorticks_off()
        ax.set_xlabel("N, bytes per rank")
        ax.grid(alpha=0.3)
    left.set_ylabel("µs")
    right.set_ylabel("time / lower bound" if bound is not None else "time / fastest")
    right.set_ylim(0.9, 8)
    right.set_title("dotted: where the cheapest changes (to the one named)", fontsize=9)
    left.set_title(title, fontsize=10)
    fig.legend(*left.get_legend_handles_labels(), loc="lower center", ncol=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return Picture(fig)


def size_label(nbytes: float) -> str:
    """'64 B', '1 KiB', '1.5 MiB': three digits in the largest binary unit that keeps it >= 1."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:g} B"


def step_by_step(first, second, labels=("first", "second"), title: str = "") -> Picture:
    """Two runs' values (e.g. losses) step by step, and below, their relative difference on a
    log scale (steps where they agree bit for bit drawn as open circles at the bottom)."""
    from matplotlib.figure import Figure  # optional: jaxcoll[viz]

    first, second = np.asarray(first, float), np.asarray(second, float)
    scale = np.maximum(np.abs(first), np.finfo(float).tiny)  # a zero value: no inf, no NaN
    steps, relative = np.arange(len(first)), np.abs(second - first) / scale
    fig = Figure(figsize=(9, 6))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    top.plot(steps, first, lw=4, alpha=0.45, label=labels[0])
    top.plot(steps, second, "o-", ms=3, lw=1.2, label=labels[1])
    top.legend()
    top.set_title(title, fontsize=10)
    floor, same = 1e-10, relative == 0
    bottom.semilogy(steps[~same], relative[~same], "ko", ms=4, label="relative difference")
    bottom.semilogy(steps[same], np.full(same.sum(), floor), "o", mfc="none", mec="green",
                    label="bit for bit the same")
    bottom.axhline(np.finfo(np.float32).eps, color="grey", ls="--", lw=1, label="float32 eps")
    bottom.set_ylim(floor / 3, 1e-3)
    bottom.set_yticks([floor, 1e-8, 1e-6, 1e-4], ["same bits", "1e-8", "1e-6", "1e-4"])
    bottom.set_xlabel("step")
    bottom.legend(fontsize=8, ncol=3, loc="upper left")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return Picture(fig)
