"""The step-through page of a schedule (:func:`html`): one self-contained HTML file (inline
style, script and JSON; nothing fetched, so it works offline from ``file://``) with keys,
buttons, a slider and play on a time axis. Each cell is labelled with what it holds
(:func:`holding_text`), partial sums hatched and results ticked, the cells a round writes and
sends are marked, its phases named (:func:`phases`); beside it the ranks in a layout of their
algorithm (:func:`layout`: a circle, a hypercube, a tree, nodes in bands) or on their topology,
the round's transfers as arrows labelled with the chunks they carry (:func:`transfer_text`) and
each link's bytes (:func:`jaxcoll.simulate`); a counter of the busiest rank's bytes against the
collective's bound (:func:`jaxcoll.bounds`), and each round's bytes (and time, split into its
α and its β + γ, where a calibration or topology is named). Two schedules side by side share
the time axis (``compare=``). No matplotlib.

The states are :func:`jaxcoll.ir.symbolic.states`' (what verify proves), the bytes and times
the cost model's: this module works them out as JSON-ready data. The page itself, its HTML,
CSS and JavaScript, is package data in ``page_template/`` (``page.html``, ``page.css``,
``page.js``): the script only draws what the JSON says. :func:`html` inlines the style and the
script into the template and fills in the title, the data and the view's size.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import replace
from functools import cache
from html import escape
from importlib import resources
from pathlib import Path

import numpy as np

from jaxcoll.analysis.model import Calibration, bounds, cost
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
         topology=None, compare: Schedule | None = None) -> Path | Page:
    """Write a page that steps through ``schedule``'s rounds on a time axis.

    Each rank's buffer is a row of chunks coloured and labelled by whose data they hold
    (:func:`jaxcoll.ir.symbolic.states`): a partial sum (a chunk summed over some ranks, not
    yet all) pale and hatched, a cell holding its result (what the collective promises
    it) with a green border and a tick; the cells each round writes outlined, the rounds
    grouped in named phases. Beside it the ranks in the layout of their algorithm
    (:func:`layout`), or on ``topology`` where one is named, with the round's transfers as
    arrows labelled with the chunks they carry and each busy link's bytes
    (:func:`jaxcoll.simulate`). A counter follows the bytes the busiest rank has sent so far
    towards the collective's lower bound (:func:`jaxcoll.bounds`' bytes a rank must send, e.g.
    2(n-1)/n·N for allreduce). Each round's bytes for a buffer of ``nbytes`` per rank come from
    :func:`jaxcoll.cost`.

    Times only where named: with ``calibration`` from the α-β-γ model (:func:`jaxcoll.cost`),
    with ``topology`` (or a calibration's shared medium) from :func:`jaxcoll.simulate`. Then
    each round is drawn on the time axis at its priced length, split into its α (the round's
    time with β = γ = 0: its latency) and the rest (β, and γ where it reduces), and Play runs
    in that time, scaled; without either, rounds take equal lengths and the page says so.

    Args:
      schedule: the schedule to draw (:func:`jaxcoll.schedule` or any
        :class:`~jaxcoll.ir.schedules.Schedule`).
      path: where to write the page (.html or .htm); None: return a :class:`Page` that a
        notebook shows inline.
      nbytes: the buffer per rank, as :func:`jaxcoll.cost` takes it.
      calibration: the α, β, γ that price the rounds (e.g. ``jaxcoll.calibration()``,
        what ``auto`` uses here); None: no times unless ``topology`` is named.
      topology: the links the ranks are placed and priced on (:mod:`jaxcoll.analysis.topology`
        presets, :func:`jaxcoll.analysis.systems.dgx`); None: a layout per algorithm.
      compare: a second schedule of the same collective on as many ranks, drawn beside the
        first in a panel of its own; both share the controls and one time axis (on it
        each takes its own priced time), e.g. ``html(ring, "p.html", compare=naive)``.

    Returns:
      ``path`` (a :class:`pathlib.Path`), or a :class:`Page` without one.

    Raises:
      TypeError: ``schedule`` or ``compare`` is not a Schedule.
      ValueError: ``path`` does not end in .html, ``nbytes`` <= 0, ``compare`` has other
        ranks or another collective than ``schedule``, or ``topology`` other ranks.
      jaxcoll.ScheduleError: a transfer is not possible (a schedule that breaks its collective's
        promise is drawn, with verify's message; one without a collective from allreduce's
        start, marked not verified).
    """
    _check_schedule("schedule", schedule)
    if compare is not None:
        _check_compare(schedule, compare)
    if path is not None and Path(path).suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"html: path={str(path)!r} must end in .html (or .htm)")
    if not nbytes > 0:
        raise ValueError(f"html: nbytes={nbytes!r} must be > 0 (bytes per rank)")
    data = _page_data(schedule, nbytes, calibration, topology)
    data["compare"] = (None if compare is None
                       else _page_data(compare, nbytes, calibration, topology))
    title = schedule.name if compare is None else f"{schedule.name} vs {compare.name}"
    json_text = json.dumps(data).replace("<", "\\u003c")  # no "</script>" inside the script
    fields = {"TITLE": escape(title), "DATA": json_text,  # one pass: a name may say DATA
              "VIEW": str(VIEW)}
    text = re.sub(r"__(TITLE|DATA|VIEW)__", lambda found: fields[found.group(1)], _template())
    if path is None:
        return Page(text, height=_page_height(data))
    path = Path(path)
    path.write_text(text, encoding="utf-8")
    return path


def _check_schedule(name: str, value) -> None:
    if not isinstance(value, Schedule):
        raise TypeError(f"html: {name} must be a jaxcoll.Schedule (jaxcoll.schedule(...) or "
                        f"Schedule.build(...)), got {type(value).__name__}: {value!r:.80}")


def _check_compare(schedule: Schedule, compare) -> None:
    """``compare`` must be a Schedule of ``schedule``'s collective on as many ranks: the two
    share one time axis, one topology and one bound."""
    _check_schedule("compare", compare)
    if compare.n_ranks != schedule.n_ranks:
        raise ValueError(f"html: compare={compare.name!r} has {compare.n_ranks} ranks, the "
                         f"schedule {schedule.n_ranks}: compare schedules on as many ranks")
    if compare.collective != schedule.collective:
        raise ValueError(f"html: compare={compare.name!r} is a {compare.collective or 'no'} "
                         f"schedule, the schedule a {schedule.collective or 'no'} one: compare "
                         f"two schedules of one collective")


def _page_height(data: dict) -> int:
    """The iframe's height for a notebook: the tallest panel's grid or view, and the table."""
    panels = [data] + ([data["compare"]] if data["compare"] else [])
    tallest = max(p["cell_h"] * p["n_ranks"] + (p["view"]["height"] if data["compare"] else 0)
                  for p in panels)
    views = max(p["view"]["height"] for p in panels)
    return 520 + max(tallest, views + 200) + 22 * min(len(data["rounds"]) + 1, 12)


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
    """Per round: bytes its transfers move, bytes the busiest rank sends that round and so far
    (every round's sends added up per rank), and (where a calibration or topology is named)
    seconds, split into α and β + γ (:func:`_split`); a line naming the model; the whole
    time's text (None: no times)."""
    timed = calibration_ is not None or topology is not None
    cal = calibration_ or Calibration(0.0, 0.0, 0.0, "none")  # no times: bytes only
    links = topology or (cal.topology(schedule.n_ranks) if timed else None)
    chunk = chunk_bytes(schedule, nbytes)
    sent = np.zeros(schedule.n_ranks)  # (n,) bytes each rank has sent so far
    rows, total = [], 0.0
    for round_ in schedule.rounds:
        alone = replace(schedule, rounds=(round_,))
        priced = cost(alone, nbytes, alpha=cal.alpha, beta=cal.beta, gamma=cal.gamma)
        seconds, latency = _split(alone, nbytes, priced, cal, links)
        total += seconds
        for t in round_:
            sent[t.src] += len(t.chunks) * chunk if t.src != t.dst else 0.0
        moved = sum(len(t.chunks) for t in round_) * chunk
        rows.append({"bytes": moved, "busiest": priced.bytes_sent,
                     "sent_so_far": float(sent.max()),
                     "seconds": seconds if timed else None,
                     "alpha_seconds": latency if timed else None,
                     "rest_seconds": seconds - latency if timed else None,
                     "bytes_text": size_label(moved), "busiest_text": size_label(priced.bytes_sent),
                     "sent_so_far_text": size_label(float(sent.max())),
                     "time_text": _duration(seconds) if timed else "—",
                     "alpha_text": _duration(latency) if timed else "—",
                     "rest_text": _duration(seconds - latency) if timed else "—",
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


def _split(alone: Schedule, nbytes: float, priced, cal: Calibration,
           links: Topology | None) -> tuple[float, float]:
    """A one-round schedule's (seconds, of which α): the model's messages x α
    (:func:`jaxcoll.cost`), or on links the round simulated with β = γ = 0 (its latency: the
    α of its routes and any per-message overhead); the rest is β and γ."""
    if links is None:
        return priced.seconds, priced.messages * cal.alpha
    latency_only = replace(links, beta=np.zeros_like(links.beta))
    seconds = simulate(alone, nbytes, links).seconds
    return seconds, min(seconds, simulate(alone, nbytes, latency_only, gamma=0.0).seconds)


def _bound(shown: Schedule, nbytes: float) -> dict:
    """The bytes some rank must send (:func:`jaxcoll.bounds`' ``path_bytes`` through a rank's
    port), the counter's goal."""
    bound = bounds(shown.collective, shown.n_ranks, nbytes,
                   Calibration(0.0, 0.0, 0.0, "bytes only")).path_bytes
    return {"bytes": float(bound), "text": size_label(float(bound)),
            "rule": _rule(bound / nbytes, shown.n_ranks)}


def _rule(share: float, n: int) -> str:
    """The bound as a share of N, as the literature writes it: "2(n-1)/n·N", "(n-1)/n·N",
    "N" (else the number)."""
    for factor, text in ((2 * (n - 1) / n, "2(n-1)/n·N"), ((n - 1) / n, "(n-1)/n·N"),
                         (1.0, "N")):
        if n > 1 and np.isclose(share, factor):
            return text
    return f"{share:.3g}·N"


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
               "text": [transfer_text(t) for t in round_]  # in-switch ones listed, no arrow
               + [str(op) for op in round_.switched], **row}
              for round_, row in zip(schedule.rounds, costs)]
    rooted = schedule.collective in RECORDS and RECORDS[schedule.collective].rooted
    n, chunks = schedule.n_ranks, schedule.buffer_chunks
    links = topology or (calibration_.topology(n) if calibration_ is not None else None)
    complete = (_complete(shown, history) if verdict != "unverified"
                else [[] for _ in history])
    return {"name": schedule.name, "collective": schedule.collective,
            "root": schedule.root if rooted else None,
            "n_ranks": n, "n_chunks": chunks,
            "labels": _page_labels(schedule),
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
            "texts": _texts(history),
            "complete": complete, "partial": _partial(shown, history, complete),
            "bound": _bound(shown, nbytes),
            "phases": phases(shown, history) if schedule.rounds else [],
            "view": _topology_view(schedule, nbytes, links or switch(
                n, alpha=0.0, beta=1e-9, reduces=schedule.in_switch), named=links is not None),
            "rounds": rounds}


def _texts(history) -> list[list[list[str]]]:
    """Per step, rank and chunk, :func:`holding_text` of the cell (each holding worked out
    once: most cells hold the same from step to step)."""
    memo: dict[tuple, str] = {}

    def text(cell) -> str:
        key = tuple(sorted(cell or ()))
        if key not in memo:
            memo[key] = holding_text(key)
        return memo[key]

    return [[[text(cell) for cell in row] for row in state] for state in history]


def _complete(schedule: Schedule, history) -> list[list[list[int]]]:
    """Per step, the [rank, chunk] cells that hold exactly what they must end with."""
    want = promised(schedule)
    return [[[r, c] for (r, c), needed in want.items() if set(state[r][c] or ()) == needed]
            for state in history]


def _partial(schedule: Schedule, history, complete) -> list[list[list[int]]]:
    """Per step, the [rank, chunk] cells holding a partial sum: in a collective that reduces, a
    cell not complete that holds a chunk summed over two or more ranks but not all n."""
    if not RECORDS[schedule.collective].reduces:
        return [[] for _ in history]
    n = schedule.n_ranks
    found = []
    for state, done in zip(history, complete):
        finished = {tuple(cell) for cell in done}
        found.append([[r, c] for r, row in enumerate(state) for c, held in enumerate(row)
                      if held and (r, c) not in finished
                      and any(1 < k < n for k in Counter(chunk for _, chunk in held).values())])
    return found


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


# The view: ranks placed in their algorithm's layout (layout()) or on their links (a circle, a
# ring's or nodes' ranks in order round it; a torus's as its grid), each round's transfers as
# arcs labelled with their chunks, the links' bytes from simulate. Geometry in px, worked out
# here so that it is tested here.
VIEW = 360  # the view's width and height (a tree's may be larger)
NODE = 11  # a rank's circle's radius
# An arc's bow off the straight line, x its length, to the left of its way (outside the
# circle): the first of these that misses every other rank.
BENDS = (0.24, -0.24, 0.4, -0.4, 0.55, -0.55, 0.75, -0.75)
LABELS_SHOWN = 24  # a round of more transfers (and n > 8) labels its arrows on hover only
# Hypercube layouts, n = 4, 8, 16: the step bit k of a rank moves it by, before scaling (a
# square, a cube, two cubes), and the box each fills: every xor partner's arc then stays clear
# of the other ranks' circles by 20 px or more.
HYPERCUBE_AXES = ((1.0, 0.0), (0.0, 1.0), (0.5, 0.6), (2.3, 0.0))
HYPERCUBE_BOX = {2: (200, 200), 3: (300, 230), 4: (320, 260)}


def layout(schedule: Schedule) -> dict:
    """Where the page places ``schedule``'s ranks when no topology is named.

    The layout of its algorithm, chosen from the schedule's name and the pairs its transfers
    join, the first that fits:

    - ``"bands"``: a hierarchical schedule (its name gives the levels' sizes, "hierarchical
      ... 2x4"): each node (a line of the innermost level) a band, its ranks in a row, the
      nodes one under another.
    - ``"tree"``: the transfers join the ranks in a tree (n - 1 pairs, all connected) that is
      not a star (tree, binomial and chain schedules; naive's root talking to every rank stays
      on the circle), or a double tree (its first tree: the transfers of chunk 0, the second's
      drawn as chords): the root on top, each rank's parent (its neighbour towards the root:
      whom it receives from in a broadcast, sends to in a reduce) a row above it.
    - ``"hypercube"``: n = 4, 8 or 16 and every transfer between partners r and r XOR 2^k
      (recursive doubling, halving-doubling): flipping bit k moves a rank along one axis, the
      same vector for every rank (a square, a cube, two cubes).
    - ``"circle"``: everything else (ring, bidirectional ring, bruck, pat, swing, pairwise,
      naive; a hypercube's partners when n is not a power of two), from the top, clockwise.

    Args:
      schedule: the schedule to place.

    Returns:
      A dict: ``layout`` (the kind above), ``places`` ((n, 2) centres in px), ``width`` and
      ``height`` (px), ``parents`` (each rank's parent in the tree, the root's None; None
      but for trees), ``axes`` (px step of each bit, hypercubes only) and ``bands`` (each
      node's ranks and box, bands only).
    """
    n, pairs = schedule.n_ranks, _pairs(schedule.rounds)
    shape = _levels(schedule.name, n)
    if shape is not None:
        return _bands(n, shape[-1])
    tree = _tree(n, pairs, schedule.root) or (
        _tree(n, _pairs(schedule.rounds, chunk=0), schedule.root)
        if "double_tree" in schedule.name else None)
    if tree is not None:
        return _tree_layout(tree)
    if n in (4, 8, 16) and pairs and all(_one_bit(a ^ b) for a, b in pairs):
        return _hypercube(n)
    return _circle(n)


def _pairs(rounds, chunk: int | None = None) -> set[tuple[int, int]]:
    """The (low, high) rank pairs that transfers join (only those moving ``chunk``)."""
    return {(min(t.src, t.dst), max(t.src, t.dst)) for round_ in rounds for t in round_
            if t.src != t.dst and (chunk is None or chunk in t.chunks)}


def _one_bit(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _levels(name: str, n: int) -> tuple[int, ...] | None:
    """A hierarchical schedule's levels' sizes from its name ("hierarchical allgather 2x4")."""
    found = re.search(r"\bhierarchical \w+ (\d+(?:x\d+)*)", name)
    shape = tuple(int(s) for s in found.group(1).split("x")) if found else None
    return shape if shape and int(np.prod(shape)) == n else None


def _circle(n: int) -> dict:
    angle = 2 * np.pi * np.arange(n) / max(n, 1)
    radius = 0.0 if n == 1 else VIEW / 2 - 30
    places = np.stack([VIEW / 2 + radius * np.sin(angle), VIEW / 2 - radius * np.cos(angle)],
                      axis=1)
    return {"layout": "circle", "places": places, "width": VIEW, "height": VIEW}


def _bands(n: int, per_node: int) -> dict:
    """Node m's ranks m·g .. m·g + g - 1 in a row, the rows one under another, each row on a
    band; consecutive rows shifted by half a step (a transfer two nodes down then misses the
    node between)."""
    nodes = n // per_node
    dx = min(72.0, (VIEW - 80) / max(per_node - 0.5, 1))
    dy = min(90.0, (VIEW - 80) / max(nodes - 1, 1))
    node, slot = np.divmod(np.arange(n), per_node)
    x = 40 + slot * dx + (node % 2) * dx / 2
    y = 40 + node * dy
    places = np.stack([x, y], axis=1)
    width = max(VIEW, int(x.max()) + 60)
    bands = [{"node": m, "ranks": list(range(m * per_node, (m + 1) * per_node)),
              "x": 12, "y": float(40 + m * dy - NODE - 8), "w": width - 24,
              "h": 2 * NODE + 16} for m in range(nodes)]
    return {"layout": "bands", "places": places, "width": width,
            "height": max(VIEW, int(y.max()) + 50), "bands": bands}


def _tree(n: int, pairs: set, root: int) -> list | None:
    """Each rank's parent (the root's None) if ``pairs`` join the n ranks in a tree that is
    not a star (n > 3); else None."""
    if n < 2 or len(pairs) != n - 1:
        return None
    neighbours = defaultdict(list)
    for a, b in sorted(pairs):
        neighbours[a].append(b)
        neighbours[b].append(a)
    if n > 3 and max(len(v) for v in neighbours.values()) == n - 1:
        return None  # a star: the circle shows it better
    parents, queue = {root: None}, [root]
    for rank in queue:  # breadth first from the root
        for other in neighbours[rank]:
            if other not in parents:
                parents[other] = rank
                queue.append(other)
    return [parents[r] for r in range(n)] if len(parents) == n else None


def _tree_layout(parents: list) -> dict:
    """The root on top, children a row below their parent in rank order, leaves spaced
    evenly, each parent centred over its children."""
    n = len(parents)
    children = defaultdict(list)
    for rank, parent in enumerate(parents):
        if parent is not None:
            children[parent].append(rank)
    root = parents.index(None)
    depth, slot, order = np.zeros(n, int), np.zeros(n), []

    def place(rank: int, level: int) -> None:  # depth first: leaves take the next slot
        depth[rank] = level
        for child in children[rank]:
            place(child, level + 1)
        slot[rank] = (np.mean(slot[children[rank]]) if children[rank]
                      else len(order))
        if not children[rank]:
            order.append(rank)

    place(root, 0)
    leaves, levels = len(order), int(depth.max())
    dx = float(np.clip((VIEW - 80) / max(leaves - 1, 1), 30, 70))
    dy = float(np.clip((VIEW - 80) / max(levels, 1), 34, 80))
    width = max(VIEW, int(80 + dx * (leaves - 1)))
    x = width / 2 + (slot - (leaves - 1) / 2) * dx
    if dy < 50:  # tight rows: an only child (a chain's) steps aside, so its arrow shows
        only = np.array([len(children[parents[r]]) == 1 if parents[r] is not None else False
                         for r in range(n)])
        x = x + np.where(only, np.where(depth % 2, 24.0, -24.0), 0.0)
    y = 40 + depth * dy
    return {"layout": "tree", "places": np.stack([x, y], axis=1), "width": width,
            "height": max(VIEW, int(y.max()) + 40), "parents": parents}


def _hypercube(n: int) -> dict:
    bits = n.bit_length() - 1
    box = np.array(HYPERCUBE_BOX[bits], float)
    steps = np.array(HYPERCUBE_AXES[:bits])  # (bits, 2)
    ranks = np.arange(n)
    places = ((ranks[:, None] >> np.arange(bits)) & 1) @ steps  # (n, 2)
    scale = box / places.max(axis=0)
    places = places * scale + (VIEW - box) / 2
    return {"layout": "hypercube", "places": places, "width": VIEW, "height": VIEW,
            "axes": np.round(steps * scale, 1).tolist()}


def _positions(topology: Topology, n: int) -> dict:
    """The ranks on their links: a torus of two or more dimensions as its rows x its innermost
    dimension, everything else round a circle from the top, clockwise."""
    if len(topology.levels) >= 2 and topology.node_of is None:  # a torus
        cols = topology.levels[-1]
        rows = n // cols
        step = min((VIEW - 80) / max(cols - 1, 1), (VIEW - 80) / max(rows - 1, 1))
        r, c = np.divmod(np.arange(n), cols)
        return {"layout": "grid", "width": VIEW, "height": VIEW,
                "places": np.stack([VIEW / 2 + (c - (cols - 1) / 2) * step,
                                    VIEW / 2 + (r - (rows - 1) / 2) * step], axis=1)}
    return _circle(n)


def _link_ends(topology: Topology) -> dict[int, tuple[int, int]]:
    """The links that join two ranks directly (a ring's, a torus's): link -> (from, to)."""
    n = topology.n
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    routes = topology.routes(src, dst)  # (pairs, hops)
    single = (routes >= 0).sum(axis=1) == 1
    return {int(routes[k, 0]): (int(src[k]), int(dst[k])) for k in np.flatnonzero(single)}


def _curve(p0, p1, bend: float) -> tuple[str, list[float]]:
    """An SVG quadratic arc from circle p0 to circle p1 (leaving and reaching their edges),
    bent by ``bend`` x its length to the left of its direction, and its middle point (where
    its label goes)."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    d = p1 - p0
    if not np.hypot(*d):
        return "", p0.tolist()
    control = (p0 + p1) / 2 + bend * np.array([d[1], -d[0]])  # left of the way, y downwards
    start = p0 + NODE * (control - p0) / np.hypot(*(control - p0))
    end = p1 + (NODE + 3) * (control - p1) / np.hypot(*(control - p1))  # room for the head
    middle = (start + 2 * control + end) / 4
    return (f"M{start[0]:.1f},{start[1]:.1f} Q{control[0]:.1f},{control[1]:.1f} "
            f"{end[0]:.1f},{end[1]:.1f}", np.round(middle, 1).tolist())


def _chord(placed: dict, src: int, dst: int) -> tuple[str, list[float]]:
    """A direct arc between two ranks. On the circle bowed inwards (so it misses the ranks
    between them), one way bowed more than the other (so an exchange's two arcs part);
    elsewhere bowed to the left of its way (an exchange's two arcs on either side), or as
    much further to either side as it takes to miss the other ranks (:func:`_clear_bend`)."""
    places = placed["places"]
    p0, p1 = places[src], places[dst]
    if placed["layout"] != "circle":
        return _curve(p0, p1, _clear_bend(places, src, dst, (placed["width"], placed["height"])))
    d, middle = p1 - p0, (p0 + p1) / 2
    inwards = np.dot([d[1], -d[0]], np.full(2, VIEW / 2) - middle)
    side = 1.0 if inwards >= -1e-9 else -1.0
    return _curve(p0, p1, side * (0.25 if src < dst else 0.42))


def _clear_bend(places: np.ndarray, src: int, dst: int, size: tuple[int, int]) -> float:
    """The first of BENDS whose arc from src to dst keeps NODE + 4 px off every other rank's
    centre and stays in the view (``size``: its width and height); the widest if none does."""
    p0, p1 = places[src], places[dst]
    others = np.delete(places, [src, dst], axis=0)  # (n - 2, 2)
    u = np.linspace(0.0, 1.0, 41)[:, None]  # (41, 1) along the arc
    for bend in BENDS:
        control = (p0 + p1) / 2 + bend * np.array([p1[1] - p0[1], p0[0] - p1[0]])
        points = (1 - u) ** 2 * p0 + 2 * (1 - u) * u * control + u ** 2 * p1  # (41, 2)
        gaps = np.hypot(*(points[:, None] - others[None]).transpose(2, 0, 1))
        inside = (points >= NODE).all() and (points <= np.array(size) - NODE).all()
        if inside and (not gaps.size or gaps.min() >= NODE + 4):
            return bend
    return BENDS[-1]


def _hop(places: np.ndarray, a: int, b: int, kind: str) -> tuple[str, list[float]]:
    """One link's arc between neighbours: a little to the left of its way (its way back on
    the other side); a torus's wrap-around bowed out of its row or column."""
    far = kind == "grid" and np.hypot(*(places[b] - places[a])) > 1.5 * _spacing(places)
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


def chunks_text(chunks, labels: list[str]) -> str:
    """The chunks a transfer carries, as the page labels its arrow.

    Args:
      chunks: the transfer's chunk indices (``Transfer.chunks``), ascending.
      labels: each chunk's name on the page: a letter for the collective's chunks
        (a = chunk 0), "in0" or "s0" for an out-of-place or scratch one.

    Returns:
      Their names joined by commas, a run of three or more letters as "a–d": "a,c",
      "a–d,f", "in0,in1".
    """
    chunks = list(chunks)
    parts, start = [], 0
    for k in range(1, len(chunks) + 1):
        if k == len(chunks) or chunks[k] != chunks[k - 1] + 1:
            run = [labels[c] for c in chunks[start:k]]
            lettered = all(len(label) == 1 for label in run)
            parts.append(f"{run[0]}–{run[-1]}" if lettered and len(run) > 2
                         else ",".join(run))
            start = k
    return ",".join(parts)


def _arc(t: Transfer, topology: Topology, placed: dict, drawn: dict, labels: list[str]
         ) -> dict:
    """One transfer's arrow: along its route's links where they are drawn, else a chord;
    labelled with the chunks it carries."""
    places, kind = placed["places"], placed["layout"]
    hops = topology.routes(np.array([t.src]), np.array([t.dst]))[0]
    hops = [int(k) for k in hops if k >= 0]
    if drawn and all(k in drawn for k in hops):
        pieces = [_hop(places, *drawn[k], kind) for k in hops]
        path, middle = " ".join(d for d, _ in pieces), pieces[len(pieces) // 2][1]
    else:
        path, middle = _chord(placed, t.src, t.dst)
    fastest = float(np.min(topology.beta))  # s/B of the fastest link; 1.5x that is "slow"
    slowest = max(float(topology.beta[k]) for k in hops) if hops else 0.0
    return {"d": path, "src": t.src, "dst": t.dst, "reduce": t.reduce,
            "text": transfer_text(t), "chunks": list(t.chunks),
            "label": chunks_text(t.chunks, labels), "at": middle,
            "slow": slowest > 1.5 * fastest}


def _topology_view(schedule: Schedule, nbytes: float, topology: Topology, named: bool) -> dict:
    """The ranks in their layout (on ``topology`` where one is ``named``), the drawn links,
    and per round each transfer's labelled arc(s) and the bytes on every busy link
    (simulate's)."""
    n = schedule.n_ranks
    placed = _positions(topology, n) if named else layout(schedule)
    ends = _link_ends(topology) if named else {}
    drawn = ends if len(ends) <= 4 * n else {}  # a ring's or torus's links, not n·(n-1)
    labels = _page_labels(schedule)
    rounds = []
    for round_ in schedule.rounds:
        arcs = [_arc(t, topology, placed, drawn, labels) for t in round_]
        ran = simulate(replace(schedule, rounds=(round_,)), nbytes, topology)
        rounds.append({"arcs": arcs, "loads": _loads(ran, topology, named),
                       "labels_shown": n <= 8 or len(arcs) <= LABELS_SHOWN})
    nodes = [] if topology.node_of is None or not named else [
        {"node": int(m), "ranks": [int(r) for r in np.flatnonzero(topology.node_of == m)]}
        for m in np.unique(topology.node_of)]
    return {"layout": placed["layout"], "size": VIEW, "radius": NODE,
            "width": placed["width"], "height": placed["height"],
            "places": np.round(placed["places"], 1).tolist(), "nodes": nodes,
            "parents": placed.get("parents"), "axes": placed.get("axes"),
            "bands": placed.get("bands", []),
            "links": [{"d": _hop(placed["places"], a, b, placed["layout"])[0],
                       "name": topology.link_names[k]} for k, (a, b) in sorted(drawn.items())],
            "name": topology.name if named else _layout_name(placed["layout"]),
            "rounds": rounds}


def _layout_name(kind: str) -> str:
    """What the view says of an algorithm's layout (no topology named)."""
    return {"circle": "the ranks round a circle",
            "tree": "the ranks as the schedule's tree (parent above children)",
            "hypercube": "the ranks as a hypercube (bit k of a rank: one axis)",
            "bands": "the ranks by node (one band each)"}[kind] + (
        "; each rank's port on a switch (no topology named: the bytes each rank sends and "
        "receives)")


def _page_labels(schedule: Schedule) -> list[str]:
    """Each chunk's label as the page shows it: letters for the collective's chunks."""
    return [_letter(int(label)) if label.isdigit() else label
            for label in chunk_labels(schedule)]
