"""The plumbing the tutorials share, kept out of the lessons: running a function on every rank,
small exact inputs, pictures, reading the compiled program, counting bytes, timing and plots.

Import it after the notebook's first cell has set JAX_PLATFORMS and jax_num_cpu_devices: it
builds the mesh of every device JAX has, under one axis named ``AXIS``.

Each program built here runs one collective, or collectives that depend on each other: on
jaxlib 0.10's CPU runtime two *independent* collectives in one jitted program can crash the
process (docs/guide/typing.md, "jaxlib 0.10 on CPU runs independent collectives into each other").
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import tempfile
from collections import Counter
from pathlib import Path

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jaxcoll
from jaxcoll.analysis.model import schedule_for
from jaxcoll.tools.palette import size_label  # noqa: F401 (the notebooks' size labels)
from jaxcoll.tools.timing import time_alternating

AXIS = "i"
mesh = Mesh(np.array(jax.devices()), (AXIS,))
n = mesh.size
_PICTURES = Path(tempfile.mkdtemp())  # jaxcoll.draw's PNGs go here, not into the repository


def on_every_rank(fn):
    """jit(shard_map(fn)): rank r runs ``fn`` on row r of the input; what it returns is row r
    of the output (out_specs=P(AXIS), so every rank's answer can be checked)."""
    return jax.jit(jax.shard_map(lambda rows: fn(rows[0])[None],  # rows: (1, ...) on each rank
                                 mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


def on_ranks(fn, ranks: int):
    """:func:`on_every_rank` on the first ``ranks`` devices only (a mesh of that many)."""
    part = Mesh(np.array(jax.devices()[:ranks]), (AXIS,))
    return jax.jit(jax.shard_map(lambda rows: fn(rows[0])[None],
                                 mesh=part, in_specs=P(AXIS), out_specs=P(AXIS)))


def by_rows(fn):
    """jit(shard_map(fn)) with every argument and every result split by rows over the ranks:
    rank r gets block r of each argument (its leading axis kept), and its results are stacked."""
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))


def small_integers(*shape, seed=0):
    """Integers in [-8, 8] stored as float32: their sums are exact in any order, so every
    correct algorithm gives the built-in's bits exactly."""
    return np.random.default_rng(seed).integers(-8, 9, size=shape).astype(np.float32)


def show(schedule):
    """jaxcoll.draw's picture of ``schedule``, shown in the notebook."""
    from IPython.display import Image

    name = re.sub(r"\W+", "_", f"{schedule.name}_{schedule.n_ranks}") + ".png"
    return Image(filename=str(jaxcoll.draw(schedule, _PICTURES / name)))


# ----------------------------------------------------------------------------- compiled programs

_COLLECTIVE = re.compile(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|"
                         r"collective-permute|collective-broadcast)(?:-start)?\(")


def compiled_text(program, *args) -> str:
    """The optimised HLO (XLA's program text) ``program`` compiles to for ``args``."""
    return program.lower(*args).compile().as_text()


def collectives_in(program, *args) -> Counter:
    """How many of each collective operation the compiled program contains."""
    return Counter(_COLLECTIVE.findall(compiled_text(program, *args)))


def permute_pairs(program, *args) -> list[set[tuple[int, int]]]:
    """For each collective-permute of the compiled program: its (source, target) pairs."""
    found = []
    for line in compiled_text(program, *args).splitlines():
        pairs = re.search(r"collective-permute(?:-start)?\(.*source_target_pairs=(\{\{.*?\}\})",
                          line)
        if pairs:
            found.append({(int(s), int(t)) for s, t in re.findall(r"(\d+),(\d+)", pairs[1])})
    return found


_DTYPE_BYTES = {"f64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s8": 1, "u8": 1}


def permute_sizes(program, *args) -> list[int]:
    """The bytes each synchronous collective-permute of the compiled program moves per rank
    (the form XLA's CPU backend compiles to; an async -start has a tuple shape, not counted)."""
    return [_DTYPE_BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d]))
            for dtype, dims in re.findall(r"= (\w+)\[([\d,]*)\]\S* collective-permute\(",
                                          compiled_text(program, *args))]


def temp_bytes(program, *args) -> int:
    """The temporary memory XLA allocates per rank for the compiled program."""
    return program.lower(*args).compile().memory_analysis().temp_size_in_bytes


# ----------------------------------------------------------------------------- bytes and time

def traffic(schedule, nbytes):
    """(sent, received): bytes each rank sends and receives over the whole schedule, for a
    buffer of ``nbytes`` per rank cut into the schedule's chunks."""
    chunk = nbytes / schedule.n_chunks
    sent, received = np.zeros(schedule.n_ranks), np.zeros(schedule.n_ranks)
    for round_ in schedule.rounds:
        for t in round_:
            sent[t.src] += len(t.chunks) * chunk
            received[t.dst] += len(t.chunks) * chunk
    return sent, received


def predicted(primitive, algorithm, ranks, nbytes, calibration):
    """The α-β-γ model's seconds for ``algorithm`` as jaxcoll runs it (the chain and the
    pipelined tree in the pieces jaxcoll would cut ``nbytes`` into)."""
    schedule = schedule_for(primitive, algorithm, ranks, nbytes, calibration)
    return jaxcoll.cost(schedule, nbytes, alpha=calibration.alpha, beta=calibration.beta,
                        gamma=calibration.gamma).seconds


def median_seconds(programs: dict, x, iters: int) -> dict:
    """Median seconds per call of each program on ``x`` (rows spread over the ranks), the
    programs called in alternation after one warm-up call each."""
    x = jax.device_put(x, NamedSharding(mesh, P(AXIS)))
    times = time_alternating(programs, x, iters, warmup=1)
    return {name: float(np.median(t)) for name, t in times.items()}


# ----------------------------------------------------------------------------- plots

def over_sizes(ax, curves: dict, *, points: dict | None = None, lines: dict | None = None,
               bound: tuple | None = None, ylabel: str, title: str, log_y: bool = False):
    """Values over message size: ``curves`` {label: (sizes, values)} as lines, ``points``
    {label: (sizes, values)} as markers, ``lines`` {label: y} as dotted horizontal lines,
    ``bound`` (label, sizes, values) as a dashed black line."""
    for label, (sizes, values) in curves.items():
        ax.plot(sizes, values, label=label)
    if bound:
        ax.plot(bound[1], bound[2], "k--", label=bound[0])
    for label, (sizes, values) in (points or {}).items():
        ax.plot(sizes, values, "o", color="black", label=label)
    for label, y in (lines or {}).items():
        ax.axhline(y, color="grey", linestyle=":", linewidth=1)
        ax.annotate(label, (0.01, y), xycoords=("axes fraction", "data"), fontsize=8,
                    color="grey", va="bottom")
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    low, high = ax.get_xlim()
    ticks = [2.0**k for k in range(0, 41, 5) if low <= 2.0**k <= high]
    ax.set_xticks(ticks, [size_label(t) for t in ticks])
    ax.set_xlabel("N, bytes per rank")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if lines and not log_y:  # room above the highest line for its label, the legend below it
        ax.set_ylim(0, 1.12 * max(lines.values()))
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, 0.87))
    else:
        ax.legend(fontsize=8)


def line_plot(ax, curves: dict, *, dashed: dict | None = None, xlabel: str, ylabel: str,
              title: str, log_y: bool = False, marker: str = "o"):
    """``curves`` {label: (xs, ys)} as solid lines, ``dashed`` {label: (xs, ys)} as dashed
    ones, each dashed line in the colour of the solid line at the same position."""
    colours = _colours(len(curves))
    for colour, (label, (xs, ys)) in zip(colours, curves.items()):
        ax.plot(xs, ys, marker=marker, color=colour, label=label)
    for colour, (label, (xs, ys)) in zip(colours, (dashed or {}).items()):
        ax.plot(xs, ys, "--", color=colour, label=label)
    if log_y:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)


def _colours(count: int) -> list:
    import matplotlib.pyplot as plt

    return [plt.cm.tab10(i % 10) for i in range(count)]


def overlap_timeline(steps: int, c: float, t: float):
    """Two timelines of ``steps`` transfers (time t each, orange) and steps + 1 products (time
    c each, blue): all transfers first, then the products; and fused, step s's transfer beside
    step s's product. Returns the figure; each title gives its total time."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(8, 3), sharex=True)
    step = max(c, t)
    plans = {"all_gather, then matmul": ([s * t for s in range(steps)],
                                         [steps * t + s * c for s in range(steps + 1)]),
             "fused ring": ([s * step for s in range(steps)],
                            [s * step for s in range(steps + 1)])}
    for ax, (title, (transfers, products)) in zip(axes, plans.items()):
        for start in transfers:
            ax.barh(1, t, left=start, color="tab:orange", edgecolor="k")
        for start in products:
            ax.barh(0, c, left=start, color="tab:blue", edgecolor="k")
        ax.set_yticks([0, 1], ["compute", "transfer"])
        ax.set_title(f"{title}: {max(products) + c:.0f} units")
    axes[1].set_xlim(0, 2 * steps + 2)
    axes[1].set_xlabel(f"time (c = {c:g}, t = {t:g})")
    fig.tight_layout()
    return fig


def broadcast_trees(schedules: dict):
    """One-chunk broadcast schedules {title: schedule} drawn as the trees they send down: a
    circle per rank, coloured by the round it gets the data in; edges labelled by round."""
    import matplotlib.pyplot as plt

    longest = max(s.n_rounds for s in schedules.values())
    colours = plt.cm.plasma(np.linspace(0.0, 0.9, longest + 1))  # [the root, round 0, ...]
    fig, axes = plt.subplots(1, len(schedules), figsize=(6 * len(schedules), 4.2))
    for ax, (title, schedule) in zip(np.atleast_1d(axes), schedules.items()):
        parent, when = {}, {}
        for k, round_ in enumerate(schedule.rounds):
            for t in round_:
                parent[t.dst], when[t.dst] = t.src, k
        children = {r: sorted((c for c in parent if parent[c] == r), key=when.get)
                    for r in range(schedule.n_ranks)}
        place = _tree_layout(children, schedule.root)
        for child, src in parent.items():
            (x0, y0), (x1, y1) = place[src], place[child]
            ax.plot([x0, x1], [-y0, -y1], color="#555555", lw=1.5, zorder=1)
            ax.text((x0 + x1) / 2, -(y0 + y1) / 2, f"round {when[child]}", fontsize=8,
                    ha="center", va="center", zorder=2,
                    bbox=dict(boxstyle="round,pad=0.15", facecolor="white", edgecolor="none"))
        for rank, (x, y) in place.items():
            colour = colours[when[rank] + 1 if rank in parent else 0]
            ax.scatter([x], [-y], s=800, color=colour, edgecolor="black", zorder=3)
            ax.text(x, -y, str(rank), ha="center", va="center", fontsize=11, fontweight="bold",
                    color="white" if sum(colour[:3]) < 1.6 else "black", zorder=4)
        ax.set_title(f"{title}: {schedule.n_rounds} rounds", fontsize=11)
        ax.set_xlim(-0.7, max(x for x, _ in place.values()) + 0.7)
        ax.set_ylim(-max(d for _, d in place.values()) - 0.6, 0.6)
        ax.axis("off")
    handles = [plt.Line2D([], [], marker="o", ls="", ms=12, color=c, mec="black", label=label)
               for c, label in zip(colours, ["the root"] + [f"round {k}" for k in range(longest)])]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def _tree_layout(children, rank, depth=0, place=None):
    """{rank: (x, depth)}: leaves left to right, each parent centred above its children."""
    place = {} if place is None else place
    for child in children[rank]:
        _tree_layout(children, child, depth + 1, place)
    xs = [place[child][0] for child in children[rank]]
    next_leaf = 1 + max((x for x, _ in place.values()), default=-1)
    place[rank] = (sum(xs) / len(xs) if xs else next_leaf, depth)
    return place


# ----------------------------------------------------------------------------- butterflies

def _partner_rule(round_, n_ranks: int, sign: int = 0) -> str:
    """'r ⊕ d' or 'r + d' / 'r − d' if that one rule names every receiver of the round, else
    ''. ``sign`` (+1 or -1, from the round before): offsets first, written with that sign."""
    pairs = [(t.src, t.dst) for t in round_]
    offsets = [d for d in range(1, n_ranks) if all(dst == (src + d) % n_ranks for src, dst in pairs)]
    xors = [d for d in range(1, max(n_ranks, 2)) if all(dst == src ^ d for src, dst in pairs)]
    if xors and not (sign and offsets):
        return f"r ⊕ {xors[0]}"
    if offsets:
        d = offsets[0]
        minus = sign < 0 if sign else d > n_ranks - d
        return f"r − {n_ranks - d}" if minus else f"r + {d}"
    return ""


def butterflies(schedules: dict):
    """Schedules {title: schedule} as butterflies: ranks as rows, rounds as columns, each
    transfer a line from its sender (left of the round) to its receiver (right), the thicker
    the more of the buffer it carries, dashed if added in, solid if copied; under each round
    its partner rule (r ⊕ d: exchange with the rank whose number differs in bit d)."""
    import matplotlib.pyplot as plt

    widths = [max(s.n_rounds, 3) for s in schedules.values()]  # room per round
    fig, axes = plt.subplots(1, len(schedules), figsize=(1.4 * len(widths) + 0.8 * sum(widths), 4.6),
                             squeeze=False, gridspec_kw={"width_ratios": widths})
    for ax, (title, schedule) in zip(axes[0], schedules.items()):
        ranks, rounds = schedule.n_ranks, schedule.n_rounds
        rules, sign = [], 0
        for k, round_ in enumerate(schedule.rounds):
            rules.append(_partner_rule(round_, ranks, sign))
            sign = -1 if "−" in rules[-1] else 1 if "+" in rules[-1] else 0
            for t in round_:
                share = len(t.chunks) / schedule.n_chunks
                ax.plot([k, k + 1], [t.src, t.dst], color=plt.cm.tab10(t.src % 10),
                        lw=0.8 + 4 * share, ls="--" if t.reduce else "-", alpha=0.85)
        for k in range(rounds + 1):
            ax.scatter([k] * ranks, range(ranks), s=90, color="white", edgecolor="black",
                       zorder=3)
        ax.set_xticks([k + 0.5 for k in range(rounds)],
                      [f"{k}\n{rule}" for k, rule in enumerate(rules)], fontsize=10)
        ax.set_xlabel("round (and partner)", fontsize=10)
        ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)], fontsize=10)
        ax.set_ylim(ranks - 0.5, -0.5)
        ax.tick_params(length=0)
        ax.set_title(f"{title}\n{rounds} rounds", fontsize=11)
        for side in ax.spines.values():
            side.set_visible(False)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- relations

RELATION_PLACES = {"allreduce": (0.0, 3.5), "reduce_scatter": (-2.9, 2.4),
                   "allgather": (2.9, 2.4), "reduce": (-1.4, 1.1), "broadcast": (1.4, 1.1),
                   "gather": (-2.9, -0.1), "scatter": (2.9, -0.1), "alltoall": (0.0, -0.6)}
MIRROR_PLACES = {"allreduce": (0.0, 4.4), "reduce_scatter": (-2.8, 3.1), "allgather": (2.8, 3.1),
                 "reduce": (-2.8, 1.5), "broadcast": (2.8, 1.5), "gather": (-2.8, -0.1),
                 "scatter": (2.8, -0.1), "alltoall": (0.0, -1.2)}  # fan-in left, fan-out right


def relation_figure(arrows, *, title: str, legend=(), notes=None, places=None):
    """The eight primitives as boxes (grey where no arrow touches them) joined by ``arrows``
    [(from, to, colour, label, style)], style "-|>" one way, "<|-|>" both ways, ":" dotted
    one way; a pair joined more than once bends apart. ``legend`` [(colour, text)] goes under
    the figure, ``notes`` {primitive: text} under a box's name; ``places`` {primitive: (x, y)}
    (default ``RELATION_PLACES``)."""
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    notes, places = notes or {}, places or RELATION_PLACES
    top, bottom = max(y for _, y in places.values()) + 0.5, min(y for _, y in places.values()) - 0.5
    fig, ax = plt.subplots(figsize=(9, 1.2 + top - bottom + 0.3 * len(legend)))
    ax.set(xlim=(-4.3, 4.3), aspect="equal")
    ax.axis("off")
    ax.set_title(title, fontsize=13)
    used = {p for a, b, *_ in arrows for p in (a, b)} | set(notes)
    boxes = {}
    for name, (x, y) in places.items():
        text = name + (f"\n{notes[name]}" if name in notes else "")
        width, height = 0.115 * max(map(len, text.split("\n"))) + 0.3, 0.3 * text.count("\n") + 0.42
        boxes[name] = FancyBboxPatch((x - width / 2, y - height / 2), width, height, zorder=3,
                                     boxstyle="round,pad=0.02,rounding_size=0.08",
                                     facecolor="#f4f4f4" if name in used else "white",
                                     edgecolor="#333333" if name in used else "#cccccc")
        ax.add_patch(boxes[name])
        ax.text(x, y, text, ha="center", va="center", fontsize=12, zorder=4,
                fontweight="bold" if name in used else "normal",
                color="black" if name in used else "#bbbbbb")
    seen = Counter()
    for a, b, colour, label, style in arrows:
        pair = frozenset((a, b))
        bend = (0.0, 0.18, -0.18)[seen[pair] % 3] * (1 if a < b else -1)  # same side either way
        seen[pair] += 1
        (x0, y0), (x1, y1) = places[a], places[b]
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), patchA=boxes[a], patchB=boxes[b],
                                     arrowstyle="-|>" if style == ":" else style,
                                     mutation_scale=18, lw=2, color=colour, zorder=2,
                                     linestyle=":" if style == ":" else "-",
                                     connectionstyle=f"arc3,rad={bend}"))
        if label:  # on the middle of the (bent) arrow
            mx, my = (x0 + x1) / 2 + bend * (y1 - y0) / 2, (y0 + y1) / 2 - bend * (x1 - x0) / 2
            ax.text(mx, my, label, ha="center", va="center", fontsize=10, color=colour, zorder=5,
                    bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor=colour,
                              lw=0.6))
    lines = 0
    for colour, text in legend:  # long entries wrapped, each under the one before
        text = textwrap.fill(text, 95, subsequent_indent="    ")
        ax.text(-4.2, bottom - 0.15 - 0.3 * lines, text, color=colour, fontsize=11, va="top")
        lines += text.count("\n") + 1
    ax.set_ylim(bottom - 0.2 - 0.3 * lines, top)
    fig.tight_layout()
    return fig


def check_size(answer, leaves, low: float = 1 << 10, high: float = 1 << 30) -> None:
    """An exercise's check: ``answer`` (bytes; None: not done yet) must be within 5% of the
    size at which ``leaves(size)`` turns True (an algorithm or protocol left for another),
    found by bisection between ``low`` and ``high``."""
    if answer is None:
        print("not done yet: set my_answer")
        return
    for _ in range(40):
        middle = int((low * high) ** 0.5)  # bytes: a whole number
        low, high = (low, middle) if leaves(middle) else (middle, high)
    assert abs(answer / high - 1) < 0.05, f"not quite: {size_label(high)}"
    print(f"right: {size_label(high)}")


def permutes_run(program, *args) -> tuple[int, int]:
    """(written, run): the collective-permutes in the compiled program's text, and how many
    run per call, each inside a ``while`` loop counted once per trip (XLA's known trip count)."""
    computations = {}
    for block in re.split(r"\n(?=\S)", compiled_text(program, *args)):
        name = re.match(r"(?:ENTRY )?%?([\w.\-]+)", block)
        if name:
            computations["ENTRY" if block.startswith("ENTRY") else name[1]] = block

    def run(name: str) -> int:
        text = computations[name]
        loops = re.findall(r"while\(.*?body=%([\w.\-]+).*?\"known_trip_count\":\{\"n\":\"(\d+)\"",
                           text)
        assert text.count(" while(") == len(loops), f"a while loop of unknown trip count in {name}"
        return (len(_PERMUTE_OP.findall(text))
                + sum(int(trips) * run(body) for body, trips in loops))

    return len(_PERMUTE_OP.findall("\n".join(computations.values()))), run("ENTRY")


_PERMUTE_OP = re.compile(r"\bcollective-permute(?:-start)?\(")


def race_report(run) -> str:
    """What Pallas's interpret-mode race detector reports while ``run()`` runs, printed or
    raised (jax 0.10 prints every race it finds, jax 0.12 raises the first and logs the failed
    callbacks: both kept out of the notebook's output); "" if none."""
    report, callbacks = io.StringIO(), logging.getLogger("jax._src.callback")
    with contextlib.redirect_stdout(report), contextlib.redirect_stderr(report):
        callbacks.disabled = True
        try:
            jax.block_until_ready(run())
            jax.effects_barrier()
        except jax.errors.JaxRuntimeError as error:
            report.write(str(error))
        finally:
            callbacks.disabled = False
    text = report.getvalue()
    return text[text.index("RACE DETECTED"):] if "RACE DETECTED" in text else ""


# ----------------------------------------------------------------------------- pipelines

def pipeline_timelines(tables: dict):
    """Pipeline schedules {title: table} drawn as stage x tick grids: table[tick][stage] is
    ("F", i), ("B", i) or None; forwards blue, backwards orange, idle ticks white, each cell
    labelled with its microbatch. Returns the figure; each title gives its idle share."""
    import matplotlib.pyplot as plt

    stages = len(next(iter(tables.values()))[0])
    fig, axes = plt.subplots(len(tables), 1, figsize=(10, len(tables) * (1.0 + 0.45 * stages)),
                             squeeze=False)
    for ax, (title, table) in zip(axes[:, 0], tables.items()):
        idle = sum(op is None for row in table for op in row)
        for tick, row in enumerate(table):
            for stage, op in enumerate(row):
                colour = "white" if op is None else "tab:blue" if op[0] == "F" else "tab:orange"
                ax.add_patch(plt.Rectangle((tick, stage), 1, 1, facecolor=colour,
                                           edgecolor="#999999", lw=0.5))
                if op is not None:
                    ax.text(tick + 0.5, stage + 0.5, f"{op[0]}{op[1]}", ha="center",
                            va="center", fontsize=7, color="white")
        ax.set(xlim=(0, len(table)), ylim=(stages, 0), xlabel="clock tick")
        ax.set_xticks(range(0, len(table) + 1, 2))
        ax.set_yticks([s + 0.5 for s in range(stages)], [f"stage {s}" for s in range(stages)])
        ax.set_title(f"{title}: {len(table)} ticks, {idle} of {len(table) * stages} idle "
                     f"({idle / (len(table) * stages):.0%})", fontsize=10)
    fig.tight_layout()
    return fig
