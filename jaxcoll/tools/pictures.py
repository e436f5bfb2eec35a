"""Pictures of a schedule: which rank holds whose data after every round (draw: matplotlib).

One panel per round, ranks as rows and chunks as columns. A cell is striped with the colour of
every rank whose data it holds (one colour: a copy of that rank's chunk; all colours: the full
reduction), grey if it holds nothing yet. Arrows are the round's transfers: solid for copies,
dashed for reductions.

:func:`html` writes the same states as one self-contained HTML page that steps through the rounds
(keys, buttons, slider, play): each cell labelled with what it holds (:func:`holding_text`), the
cells a round writes and sends marked, its phases named (:func:`phases`), beside it the ranks on
their topology with the round's transfers along their links and each link's bytes
(:func:`jaxcoll.simulate`), and each round's bytes (and time, where a calibration or topology is
named); no matplotlib.

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
from jaxcoll.analysis.topology import Topology, chunk_bytes, simulate, switch
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule, Transfer
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

    Each rank's buffer is a row of chunks coloured and labelled by whose data they hold
    (:func:`jaxcoll.ir.symbolic.states`), the cells each round writes outlined, those holding
    their result marked, the rounds grouped in named phases; beside it the ranks on
    ``topology`` (a circle where none is named) with the round's transfers as arrows along
    their links and each busy link's bytes (:func:`jaxcoll.simulate`); each round's bytes for a
    buffer of ``nbytes`` per rank come from :func:`jaxcoll.cost`. Times only where named:
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
    fields = {"TITLE": escape(schedule.name), "DATA": json_text,  # one pass: a name may
              "VIEW": str(VIEW)}  # say DATA
    text = re.sub(r"__(TITLE|DATA|VIEW)__", lambda found: fields[found.group(1)], _PAGE)
    if path is None:
        return Page(text, height=400 + max(data["cell_h"] * schedule.n_ranks, VIEW + 200)
                    + 22 * min(schedule.n_rounds + 1, 12))
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
               "text": [transfer_text(t) for t in round_], **row}
              for round_, row in zip(schedule.rounds, costs)]
    rooted = schedule.primitive in RECORDS and RECORDS[schedule.primitive].rooted
    n, chunks = schedule.n_ranks, schedule.buffer_chunks
    links = topology or (calibration_.topology(n) if calibration_ is not None else None)
    return {"name": schedule.name, "primitive": schedule.primitive,
            "root": schedule.root if rooted else None,
            "n_ranks": n, "n_chunks": chunks,
            "labels": [_letter(int(label)) if label.isdigit() else label
                       for label in chunk_labels(schedule)],
            "cell_w": int(np.clip(640 // chunks, 26, 64)),
            "cell_h": int(np.clip(420 // n, 18, 30)),
            "colours": _rank_colours(n), "empty": EMPTY,
            "sources": sorted({r for state in history for row in state for cell in row
                               for r, _ in cell or ()}),  # the ranks whose data it shows
            "verdict": verdict, "verdict_text": verdict_text,
            "nbytes_text": size_label(nbytes), "model": model,
            "total_text": total_text,
            "states": [[[sorted(cell or ()) for cell in row] for row in state]
                       for state in history],
            "texts": [[[holding_text(cell) for cell in row] for row in state]
                      for state in history],
            "complete": _complete(shown, history) if verdict != "unverified" else
            [[] for _ in history],
            "phases": phases(shown, history) if schedule.rounds else [],
            "view": _topology_view(schedule, nbytes, links or switch(n, alpha=0.0, beta=1e-9),
                                   named=links is not None),
            "rounds": rounds}


def _complete(schedule: Schedule, history) -> list[list[list[int]]]:
    """Per step, the [rank, chunk] cells that hold exactly what they must end with."""
    want = promised(schedule)
    return [[[r, c] for (r, c), needed in want.items() if set(state[r][c] or ()) == needed]
            for state in history]


def holding_text(held) -> str:
    """What a cell holds, as the page labels it: each chunk's letter (a = chunk 0, b = 1, ...)
    and the ranks whose copies of it are summed there, "a0–2,5" for a0+a1+a2+a5 ("+" between
    chunks); "" when it holds nothing."""
    by_chunk = defaultdict(list)
    for rank, chunk in sorted(held or ()):
        by_chunk[chunk].append(rank)
    return "+".join(_letter(chunk) + _ranges(ranks) for chunk, ranks in sorted(by_chunk.items()))


def transfer_text(t: Transfer) -> str:
    """A transfer as the page writes it, chunks by letter: "0->1 d+" (rank 0's chunk d added
    into rank 1's), "2->3 a,b=" (copied), "0->0 a>e+" (added into chunk e)."""
    moved = ",".join(map(_letter, t.chunks))
    if t.into != t.chunks:
        moved += ">" + ",".join(map(_letter, t.into))
    return f"{t.src}->{t.dst} {moved}{'+' if t.reduce else '='}"


def _letter(chunk: int) -> str:
    return chr(ord("a") + chunk) if chunk < 26 else f"[{chunk}]"


def _ranges(ranks: list[int]) -> str:
    """Sorted ranks as runs: [0, 1, 2, 5] -> "0–2,5" (a run of two stays "0,1")."""
    runs, start = [], 0
    for k in range(1, len(ranks) + 1):
        if k == len(ranks) or ranks[k] != ranks[k - 1] + 1:
            run = ranks[start:k]
            runs.append(f"{run[0]}–{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
            start = k
    return ",".join(runs)


def phases(schedule: Schedule, history) -> list[dict]:
    """The rounds in phases, runs of reducing rounds and of copying ones, each named by what it
    leaves behind (``history``: :func:`~jaxcoll.ir.symbolic.states`): a reduce_scatter (each sum
    whole on ranks of its own), a reduce to one rank, an allreduce; then an allgather or a
    broadcast of those sums. One phase is named by the primitive."""
    kinds = ["reduce" if all(t.reduce for t in r) else "copy" if not any(t.reduce for t in r)
             else "reduce and copy" for r in schedule.rounds]
    runs = []  # [first, last, kind]
    for index, kind in enumerate(kinds):
        if runs and runs[-1][2] == kind:
            runs[-1][1] = index
        else:
            runs.append([index, index, kind])
    if len(runs) == 1:
        return [{"first": 0, "last": runs[0][1], "name": schedule.primitive or runs[0][2]}]
    return [{"first": first, "last": last,
             "name": _phase_name(kind, _sums(schedule, history[first]),
                                 _sums(schedule, history[last + 1]), schedule.n_ranks)}
            for first, last, kind in runs]


def _sums(schedule: Schedule, state) -> list[set[int]]:
    """Per chunk, the ranks holding its sum over every rank."""
    n = schedule.n_ranks
    return [{rank for rank in range(n)
             if any(set(cell or ()) == {(r, chunk) for r in range(n)} for cell in state[rank])}
            for chunk in range(schedule.n_chunks)]


def _phase_name(kind: str, before: list[set[int]], after: list[set[int]], n: int) -> str:
    def one_rank(sums):
        return len(set(map(frozenset, sums))) == 1 and len(sums[0]) == 1

    def apart(sums):  # each sum whole somewhere, no rank holding two
        return all(sums) and sum(map(len, sums)) == len(set().union(*sums))

    if kind == "reduce" and all(after):
        if all(len(s) == n for s in after) and n > 1:
            return "allreduce"
        if one_rank(after):
            return f"reduce to rank {min(after[0])}"
        return "reduce_scatter" if apart(after) else "reduce"
    if kind == "copy" and all(before) and after != before:
        if one_rank(before):
            return f"broadcast from rank {min(before[0])}"
        return "allgather" if apart(before) else "copy"
    return kind


# The topology view: ranks placed on their links (a circle, a ring's or nodes' ranks in order
# round it; a torus's as its grid), each round's transfers as arcs along their routes, the
# links' bytes from simulate. Geometry in px, worked out here so that it is tested here.
VIEW = 360  # the view's width and height
NODE = 11  # a rank's circle's radius


def _positions(topology: Topology, n: int) -> tuple[str, np.ndarray]:
    """("circle" or "grid", (n, 2) centres): a torus of two or more dimensions as its rows x
    its innermost dimension, everything else round a circle from the top, clockwise."""
    if len(topology.levels) >= 2 and topology.node_of is None:  # a torus
        cols = topology.levels[-1]
        rows = n // cols
        step = min((VIEW - 80) / max(cols - 1, 1), (VIEW - 80) / max(rows - 1, 1))
        r, c = np.divmod(np.arange(n), cols)
        return "grid", np.stack([VIEW / 2 + (c - (cols - 1) / 2) * step,
                                 VIEW / 2 + (r - (rows - 1) / 2) * step], axis=1)
    angle = 2 * np.pi * np.arange(n) / max(n, 1)
    radius = 0.0 if n == 1 else VIEW / 2 - 30
    return "circle", np.stack([VIEW / 2 + radius * np.sin(angle),
                               VIEW / 2 - radius * np.cos(angle)], axis=1)


def _link_ends(topology: Topology) -> dict[int, tuple[int, int]]:
    """The links that join two ranks directly (a ring's, a torus's): link -> (from, to)."""
    n = topology.n
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    routes = topology.routes(src, dst)  # (pairs, hops)
    single = (routes >= 0).sum(axis=1) == 1
    return {int(routes[k, 0]): (int(src[k]), int(dst[k])) for k in np.flatnonzero(single)}


def _curve(p0, p1, bend: float) -> str:
    """An SVG quadratic arc from circle p0 to circle p1 (leaving and reaching their edges),
    bent by ``bend`` x its length to the left of its direction."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    d = p1 - p0
    if not np.hypot(*d):
        return ""
    control = (p0 + p1) / 2 + bend * np.array([d[1], -d[0]])  # left of the way, y downwards
    start = p0 + NODE * (control - p0) / np.hypot(*(control - p0))
    end = p1 + (NODE + 3) * (control - p1) / np.hypot(*(control - p1))  # room for the head
    return (f"M{start[0]:.1f},{start[1]:.1f} Q{control[0]:.1f},{control[1]:.1f} "
            f"{end[0]:.1f},{end[1]:.1f}")


def _chord(places: np.ndarray, src: int, dst: int) -> str:
    """A direct arc between two ranks of the circle, bowed inwards (so it misses the ranks
    between them), one way bowed more than the other (so an exchange's two arcs part)."""
    p0, p1 = places[src], places[dst]
    d, middle = p1 - p0, (p0 + p1) / 2
    inwards = np.dot([d[1], -d[0]], np.full(2, VIEW / 2) - middle)
    side = 1.0 if inwards >= -1e-9 else -1.0
    return _curve(p0, p1, side * (0.25 if src < dst else 0.42))


def _hop(places: np.ndarray, a: int, b: int, layout: str) -> str:
    """One link's arc between neighbours: a little to the left of its way (its way back on
    the other side); a torus's wrap-around bowed out of its row or column."""
    far = layout == "grid" and np.hypot(*(places[b] - places[a])) > 1.5 * _spacing(places)
    return _curve(places[a], places[b], 0.22 if far else 0.12)


def _spacing(places: np.ndarray) -> float:
    gaps = np.hypot(*(places[:, None] - places[None]).transpose(2, 0, 1))
    return float(np.min(gaps[gaps > 0])) if (gaps > 0).any() else 1.0


def _loads(ran, topology: Topology, timed: bool) -> list[list]:
    """A round's busy links, the busiest (longest busy: bytes x its β) first: [name, bytes,
    text, seconds busy] each (the text with the seconds only where hardware was named)."""
    if not len(ran.round_seconds):
        return []
    index = {name: k for k, name in enumerate(topology.link_names)}
    rows = []
    for name, nbytes in ran.round_links(0).items():
        busy = nbytes * float(topology.beta[index[name]])
        text = size_label(nbytes) + (f", {_duration(busy)}" if timed else "")
        rows.append([name, nbytes, text, busy])
    return sorted(rows, key=lambda row: (-row[3], index[row[0]]))


def _topology_view(schedule: Schedule, nbytes: float, topology: Topology, named: bool) -> dict:
    """The ranks on ``topology``, the drawn links, and per round each transfer's arc(s) and the
    bytes on every busy link (simulate's)."""
    n = schedule.n_ranks
    layout, places = _positions(topology, n)
    ends = _link_ends(topology)
    drawn = ends if len(ends) <= 4 * n else {}  # a ring's or torus's links, not n·(n-1)
    fastest = float(np.min(topology.beta))  # s/B of the fastest link; 1.5x that is "slow"
    rounds = []
    for round_ in schedule.rounds:
        arcs = []
        for t in round_:
            hops = topology.routes(np.array([t.src]), np.array([t.dst]))[0]
            hops = [int(k) for k in hops if k >= 0]
            if drawn and all(k in drawn for k in hops):
                path = " ".join(_hop(places, *drawn[k], layout) for k in hops)
            else:
                path = _chord(places, t.src, t.dst)
            slowest = max(float(topology.beta[k]) for k in hops) if hops else 0.0
            arcs.append({"d": path, "src": t.src, "dst": t.dst, "reduce": t.reduce,
                         "text": transfer_text(t),
                         "slow": slowest > 1.5 * fastest})
        ran = simulate(replace(schedule, rounds=(round_,)), nbytes, topology)
        rounds.append({"arcs": arcs, "loads": _loads(ran, topology, named)})
    nodes = [] if topology.node_of is None else [
        {"node": int(m), "ranks": [int(r) for r in np.flatnonzero(topology.node_of == m)]}
        for m in np.unique(topology.node_of)]
    return {"layout": layout, "size": VIEW, "radius": NODE,
            "places": np.round(places, 1).tolist(), "nodes": nodes,
            "links": [{"d": _hop(places, a, b, layout), "name": topology.link_names[k]}
                      for k, (a, b) in sorted(drawn.items())],
            "name": topology.name if named else "each rank's port on a switch (no topology "
                                                "named: the bytes each rank sends and receives)",
            "rounds": rounds}


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
  #phases { display: flex; gap: 2px; margin: 6px 0; max-width: 1100px; }
  .phase { padding: 2px 6px; background: #eef1f5; border-radius: 3px; font-size: 12px;
           overflow: hidden; white-space: nowrap; text-overflow: ellipsis; cursor: pointer; }
  .phase.current { background: #fff3c4; outline: 1px solid #c9a400; font-weight: 600; }
  #now { font-size: 13px; min-height: 2.8em; }
  #now code { font-size: 12px; }
  .views { display: flex; flex-wrap: wrap; gap: 28px; align-items: flex-start; }
  svg { display: block; margin: 6px 0; }
  svg text { font-size: 11px; fill: #444; }
  svg text.label { font: 10px ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace;
                   fill: #111; stroke: #fff; stroke-width: 2.5; paint-order: stroke; }
  .changed { fill: none; stroke: #111; stroke-width: 2.5; }
  .sent { fill: none; stroke: #111; stroke-width: 1.2; stroke-dasharray: 2 2; }
  .arrow { fill: none; stroke: #111; stroke-width: 1.6; }
  .arrow.reduce { stroke-dasharray: 5 3; }
  .arrow.slow { stroke: #b42318; stroke-width: 2.6; }
  .link { fill: none; stroke: #c8c8c8; stroke-width: 1; }
  .sector { fill: none; stroke-linecap: butt; }
  svg text.rank { font-size: 10px; font-weight: 700; fill: #fff; stroke: #111;
                  stroke-width: 0.7; paint-order: stroke; }
  .legend { max-width: 760px; }
  .legend span { display: inline-flex; align-items: center; gap: 4px; margin-right: 12px;
                 font-size: 12px; }
  .swatch { width: 12px; height: 12px; display: inline-block; }
  #topology-name, #loads { font-size: 12px; max-width: 360px; }
  #loads table td { text-align: left; }
  .bar { display: inline-block; height: 9px; background: #6b7f99; }
  tr.busiest td { font-weight: 600; }
  .table { max-height: 280px; overflow: auto; margin-top: 8px; display: inline-block; }
  table { border-collapse: collapse; font-size: 12px; }
  th, td { padding: 2px 10px; text-align: right; border-bottom: 1px solid #eee; }
  th { position: sticky; top: 0; background: #fafafa; }
  #rounds tr { cursor: pointer; }
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
<div id="phases"></div>
<div id="now"></div>
<div class="views">
  <div>
    <svg id="grid" role="img" aria-label="each rank's chunks: what each holds"></svg>
    <div class="legend" id="legend"></div>
    <div class="table"><table>
      <thead><tr><th>round</th><th>phase</th><th>transfers</th><th>bytes moved</th>
        <th>busiest rank sends</th><th>time</th><th>total</th></tr></thead>
      <tbody id="rounds"></tbody>
    </table></div>
  </div>
  <div>
    <svg id="topology" role="img" aria-label="the ranks on their links and this round's transfers"
         width="__VIEW__" height="__VIEW__"></svg>
    <div id="topology-name"></div>
    <div id="loads"></div>
  </div>
</div>
<script type="application/json" id="schedule-data">__DATA__</script>
<script>
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
    const [, letter, ranks] = group.match(/^([a-z]|\\[\\d+\\])(.*)$/);
    const count = ranks.split(",").reduce((k, run) => {
      const [a, b] = run.split("\u2013").map(Number);
      return k + (b === undefined ? 1 : b - a + 1);
    }, 0);
    total += count;
    return `${letter}\u00d7${count}`;
  }).join("+");
  return counts.length <= room ? counts : `\u00d7${total}`;
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
  const what = data.primitive ? data.primitive + root : "no primitive";
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
                                                       : `rounds ${p.first}\u2013${p.last}`}`;
    span.title = span.textContent;
    span.addEventListener("click", () => go(p.first + 1));
    $("phases").append(span);
  });
  const legend = data.sources.map(r => `<span><i class="swatch" `
    + `style="background:${data.colours[r]}"></i>data of rank ${r}</span>`);
  legend.push(`<span><i class="swatch" style="background:${data.empty}"></i>nothing yet</span>`,
              "<span>a0\u20132: chunk a of ranks 0 to 2, summed (a0+a1+a2); "
              + "a\u00d73 where that does not fit: three ranks' a</span>",
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
