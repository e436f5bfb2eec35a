"""Notebook 13's plumbing: the published nccl-tests tables (bench/published/, in the repository
checkout, not the installed package), NCCL's tree as a schedule, and one plot.

No JAX here: everything is counting and NCCL's own tables (jaxcoll.analysis.nccl).
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from jaxcoll.ir.families.tree import _zip_rounds, fan_out, heap_children
from jaxcoll.ir.schedules import Schedule

# the notebooks run from tutorials/ in a checkout; bench/ sits beside it
PUBLISHED = Path(__file__).resolve().parent.parent / "bench" / "published"


def published(run: str) -> tuple[dict, list[tuple[int, float, float]]]:
    """A published run's header (``# key: value`` lines) and its rows (size in bytes, time in
    µs, busbw in GB/s), as tests/test_nccl_model.py reads them; rows without a time are left
    out (the Azure files print busbw only)."""
    text = (PUBLISHED / f"{run}.csv").read_text().splitlines()
    header = dict(line[2:].split(": ", 1) for line in text
                  if line.startswith("# ") and ": " in line)
    rows = csv.DictReader(line for line in text if line and not line.startswith("#"))
    return header, [(int(r["size_bytes"]), float(r["time_us"]), float(r["busbw_gbs"]))
                    for r in rows if r["time_us"]]


def nccl_tree_allreduce(n_nodes: int, gpus: int) -> Schedule:
    """NCCL's tree shape as a jaxcoll schedule: a chain of ``gpus`` inside each node, a binary
    tree between the nodes' first GPUs, and a second tree on the nodes mirrored, each carrying
    half the buffer (one piece each). Reduce up both trees, then broadcast down; the schedule
    promises an allreduce (``collective``), so ``jaxcoll.verify`` checks it.

    Rank = node * gpus + local; the head (local 0) of node k sends to its node-tree children's
    heads (the heap k -> 2k+1, 2k+2) and to local 1; local l sends to local l + 1."""
    n = n_nodes * gpus

    def children(v):
        node, local = divmod(v, gpus)
        heads = [c * gpus for c in heap_children(node, n_nodes)] if local == 0 else []
        return heads + ([v + 1] if local < gpus - 1 else [])

    def mirrored(v):
        node, local = divmod(v, gpus)
        return (n_nodes - 1 - node) * gpus + local

    tree_a = fan_out("nccl_tree", n, children, lambda v: v, [0])
    tree_b = fan_out("nccl_tree", n, children, mirrored, [1])
    down = Schedule.build("nccl_tree broadcast", n, n_chunks=2, rounds=_zip_rounds(tree_a, tree_b))
    both = down.reversed("nccl_tree reduce", reduce=True) + down
    return dataclasses.replace(both, collective="allreduce")


def plot(curves: dict, title: str):
    """busbw against size, one panel per system: {system: {label: (sizes, busbw)}}."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), squeeze=False)
    for ax, (system, lines) in zip(axes[0], curves.items()):
        for label, (sizes, busbw) in lines.items():
            ax.plot(sizes, busbw, "o-" if "measured" in label else "--", ms=3, label=label)
        ax.set(xscale="log", yscale="log", xlabel="size (bytes)", title=system)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("busbw (GB/s)")
    figure.suptitle(title)
    figure.tight_layout()
    return figure
