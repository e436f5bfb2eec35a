"""The step-through page of a schedule (:func:`html`): one self-contained HTML file (inline
style, script and JSON; nothing fetched, so it works offline from ``file://``) with keys,
buttons, a slider and play. Each cell is labelled with what it holds (:func:`holding_text`),
the cells a round writes and sends are marked, its phases named (:func:`phases`); beside it the
ranks on their topology with the round's transfers along their links (:func:`transfer_text`)
and each link's bytes (:func:`jaxcoll.simulate`), and each round's bytes (and time, where a
calibration or topology is named). No matplotlib.

The states are :func:`jaxcoll.ir.symbolic.states`' (what verify proves), the bytes and times
the cost model's: this module works them out as JSON-ready data. The page itself, its HTML,
CSS and JavaScript, is package data in ``page_template/`` (``page.html``, ``page.css``,
``page.js``): the script only draws what the JSON says. :func:`html` inlines the style and the
script into the template and fills in the title, the data and the view's size.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import replace
from functools import cache
from html import escape
from importlib import resources
from pathlib import Path

import numpy as np

from jaxcoll.analysis.model import Calibration, cost
from jaxcoll.analysis.topology import Topology, chunk_bytes, simulate, switch
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule, Transfer
from jaxcoll.ir.symbolic import ScheduleError, promised, states, verify
from jaxcoll.tools.palette import EMPTY, chunk_labels, rank_colours, size_label

# The template's two lines that name its style sheet and its script, and what replaces them:
# the files' text inline (the page stays one file).
_INLINE = {'<link rel="stylesheet" href="page.css">': ("page.css", "<style>\n{}</style>"),
           '<script src="page.js"></script>': ("page.js", "<script>\n{}</script>")}


@cache
def _template() -> str:
    """page_template/page.html with page.css and page.js inlined; its ``__TITLE__``,
    ``__DATA__`` and ``__VIEW__`` still to fill in."""
    folder = resources.files("jaxcoll.tools").joinpath("page_template")
    text = folder.joinpath("page.html").read_text(encoding="utf-8")
    for line, (name, wrapped) in _INLINE.items():
        assert text.count(line) == 1, f"page_template/page.html must name {name} once"
        inline = wrapped.format(folder.joinpath(name).read_text(encoding="utf-8"))
        text = text.replace(line, inline)
    return text


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
    text = re.sub(r"__(TITLE|DATA|VIEW)__", lambda found: fields[found.group(1)], _template())
    if path is None:
        return Page(text, height=400 + max(data["cell_h"] * schedule.n_ranks, VIEW + 200)
                    + 22 * min(schedule.n_rounds + 1, 12))
    path = Path(path)
    path.write_text(text, encoding="utf-8")
    return path


def _verified(schedule: Schedule) -> tuple[Schedule, str, str]:
    """The schedule whose states the page shows, verify's verdict ("ok", "bad" or
    "unverified") and a line saying it."""
    if not schedule.collective:  # shown from allreduce's start: every rank holds all its data
        return (replace(schedule, collective="allreduce"), "unverified",
                "not verified: the schedule names no primitive (give Schedule one, e.g. "
                "Schedule(name, n, n_chunks, rounds, 'allreduce')); shown from a start where "
                "every rank holds its own data in every chunk")
    try:
        verify(schedule)
    except ScheduleError as error:
        return schedule, "bad", f"verify fails: {error}"
    return schedule, "ok", (f"verified: after the last round every rank holds what "
                            f"{schedule.collective} promises, each contribution once")


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
    rooted = schedule.collective in RECORDS and RECORDS[schedule.collective].rooted
    n, chunks = schedule.n_ranks, schedule.buffer_chunks
    links = topology or (calibration_.topology(n) if calibration_ is not None else None)
    return {"name": schedule.name, "collective": schedule.collective,
            "root": schedule.root if rooted else None,
            "n_ranks": n, "n_chunks": chunks,
            "labels": [_letter(int(label)) if label.isdigit() else label
                       for label in chunk_labels(schedule)],
            "cell_w": int(np.clip(640 // chunks, 26, 64)),
            "cell_h": int(np.clip(420 // n, 18, 30)),
            "colours": rank_colours(n), "empty": EMPTY,
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
        return [{"first": 0, "last": runs[0][1], "name": schedule.collective or runs[0][2]}]
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

