"""What the drawings share: one colour per rank, the empty cell's grey, and how a chunk and a
size are labelled. :mod:`jaxcoll.tools.pictures` (matplotlib), :mod:`jaxcoll.tools.page` (the
HTML page, no matplotlib), :mod:`jaxcoll.tools.figures` and the benchmark's plot
(:mod:`jaxcoll.tools.bench`) all take them from here."""

from __future__ import annotations

from jaxcoll.ir.schedules import Schedule

EMPTY = "#e6e6e6"  # a cell that holds nothing yet

# Paul Tol's "muted" scheme (personal.sron.nl/~pault): nine colours told apart with every
# common colour-vision deficiency; beyond nine ranks matplotlib's tab20, which is not (the
# cells' titles name the ranks). Written out so that the HTML page needs no matplotlib.
MUTED = ("#cc6677 #332288 #ddcc77 #117733 #88ccee #882255 #44aa99 #999933 "
         "#aa4499").split()
_TAB20 = ("#1f77b4 #aec7e8 #ff7f0e #ffbb78 #2ca02c #98df8a #d62728 #ff9896 #9467bd #c5b0d5 "
          "#8c564b #c49c94 #e377c2 #f7b6d2 #7f7f7f #c7c7c7 #bcbd22 #dbdb8d #17becf "
          "#9edae5").split()


def rank_colours(n: int) -> list[str]:
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


def size_label(nbytes: float) -> str:
    """'64 B', '1 KiB', '1.5 MiB': three digits in the largest binary unit that keeps it >= 1."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:g} B"
