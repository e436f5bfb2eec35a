"""Pictures of a schedule: which rank holds whose data after every round (:func:`draw`: a PNG,
or a GIF with one frame a round; matplotlib).

One panel per round, ranks as rows and chunks as columns. A cell is striped with the colour of
every rank whose data it holds (one colour: a copy of that rank's chunk; all colours: the full
reduction), grey if it holds nothing yet. Arrows are the round's transfers: solid for copies,
dashed for reductions. A schedule that reduces inside a switch (NVLS,
:class:`~jaxcoll.ir.schedules.ThroughSwitch`) has the switch as a column at the right, with
arrows up into it and down from it.

The same states as a page that steps through the rounds are :mod:`jaxcoll.tools.page`'s
(:func:`~jaxcoll.tools.page.html`); the tutorials' figures are :mod:`jaxcoll.tools.figures`'; the
colours and labels all of them share, :mod:`jaxcoll.tools.palette`'s. This module also
re-exports their public names, so that the stored notebooks and code written before they moved
keep working: ``jaxcoll.tools.pictures.html``, ``Page``, ``holding_text``, ``transfer_text``,
``phases`` (from :mod:`~jaxcoll.tools.page`), ``Picture``, ``relations``, ``over_sizes``,
``step_by_step`` (from :mod:`~jaxcoll.tools.figures`), ``MUTED``, ``EMPTY``, ``chunk_labels``,
``size_label`` (from :mod:`~jaxcoll.tools.palette`).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

from jaxcoll.ir.schedules import Schedule
from jaxcoll.ir.symbolic import states
from jaxcoll.tools.figures import (  # noqa: F401 (re-exported: the stored notebooks call them)
    Picture,
    over_sizes,
    relations,
    step_by_step,
)
from jaxcoll.tools.page import (  # noqa: F401 (re-exported: jaxcoll.tools.pictures.html, ...)
    Page,
    holding_text,
    html,
    phases,
    transfer_text,
)
from jaxcoll.tools.palette import (  # noqa: F401 (MUTED, size_label: re-exported)
    EMPTY,
    MUTED,
    chunk_labels,
    rank_colours,
    size_label,
)

ARROW = "#111111"
SWITCHED = "#7a3db8"  # in-switch reduction (NVLS): to and from the switch


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
    if schedule.in_switch:
        _switch(ax, schedule, round_index)
    ax.set_xlim(-0.1, chunks + (1.6 if schedule.in_switch else 0))
    ax.set_ylim(-0.1, n)
    ax.set_xticks([c + 0.46 for c in range(chunks)], chunk_labels(schedule), fontsize=7)
    ax.set_yticks([n - 1 - r + 0.46 for r in range(n)], [f"rank {r}" for r in range(n)],
                  fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title("start" if round_index is None else f"round {round_index}", fontsize=9)


def _switch(ax, schedule: Schedule, round_index: int | None) -> None:
    """The switch as a column right of the chunks, and the round's in-switch operations as
    arrows: from each sender's chunk up into it (dashed where it adds), from it down to each
    receiver's chunk (solid)."""
    from matplotlib.patches import FancyArrowPatch, Rectangle  # optional: jaxcoll[viz]

    n, x = schedule.n_ranks, schedule.buffer_chunks + 0.9
    ax.add_patch(Rectangle((x, 0), 0.5, n - 0.08, color=EMPTY))
    ax.text(x + 0.25, n - 0.5, "switch", rotation=90, ha="center", va="top", fontsize=7)
    if round_index is None:
        return
    for op in schedule.rounds[round_index].switched:
        for c in op.chunks:
            cells = [(rank, True) for rank in op.senders] + [(rank, False) for rank in
                                                              op.receivers]
            for rank, up in cells:
                cell, port = (c + 0.46, n - 1 - rank + 0.46), (x, n - 1 - rank + 0.46)
                start, end = (cell, port) if up else (port, cell)
                ax.add_patch(FancyArrowPatch(
                    start, end, arrowstyle="-|>", mutation_scale=7, linewidth=0.8,
                    color=SWITCHED, linestyle="--" if up and op.reduces else "-",
                    connectionstyle=f"arc3,rad={0.15 if up else -0.15}", clip_on=False))


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
    if any(schedule.rounds[index].switched for index in panels if index is not None):
        entries.append(Line2D([], [], color=SWITCHED, linestyle="--",
                              label="into the switch (adds)"))
        entries.append(Line2D([], [], color=SWITCHED, label="from the switch"))
    return entries


def _figure(schedule: Schedule, panels: list[int | None], history):
    from matplotlib.figure import Figure  # not pyplot: a notebook's backend stays as it is

    colours = rank_colours(schedule.n_ranks)
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
    """Write a picture of ``schedule``: which rank holds whose data after every round.

    One panel per round (the module docstring); needs matplotlib (``jaxcoll[viz]``), and
    Pillow for a GIF.

    Args:
      schedule: the :class:`~jaxcoll.Schedule` to draw;
        it must name its primitive.
      path: where to write the file
        (a :class:`pathlib.Path` or a string).
      gif: False (default) for one PNG of every round's panel, True for an animated GIF
        of one frame a round.

    Returns:
      The :class:`pathlib.Path` written.

    Raises:
      ScheduleError: at the first transfer of the schedule
        that is not possible.
      ValueError: if the schedule names no primitive
        (what its cells hold is read from the primitive's start).
    """
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

