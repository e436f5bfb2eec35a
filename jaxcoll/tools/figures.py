"""The tutorials' figures, drawn with matplotlib instead of plotting code of their own: how the
primitives relate (:func:`relations`), predicted times over message size against the lower
bound (:func:`over_sizes`), and two runs compared step by step (:func:`step_by_step`). Each
returns a :class:`Picture`, which a notebook shows (as PNG) and which saves itself; none touches
pyplot or the backend. (The stored notebooks call them as ``jaxcoll.tools.pictures.over_sizes``
...: :mod:`jaxcoll.tools.pictures` re-exports them.)"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import numpy as np

from jaxcoll.tools.palette import size_label


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
