"""A plain reference runner: any :class:`~jaxcoll.Schedule` run round by round, rank by rank,
the way the lecture describes a schedule, with no plan, no compaction and no loops.

For each round, each group of transfers that is a permutation (a *matching*:
:func:`~jaxcoll.ir.schedules.split_round`) is one ``lax.ppermute``: every rank takes the
chunks it sends from the buffer as it was before the round, the ppermute moves them, and
every receiving rank writes or reduces them into its chunks. That is all a schedule means.

The XLA executor (``execute.py``) runs the same rounds through a lowering plan (chunk ids by
symmetry, runs of equal rounds as one ``fori_loop``, bit-cast copies), which is what makes
thousands of ranks cheap; tests/test_reference_runner.py holds it to this runner on every registered
schedule. This one traces one ppermute per matching of every round, so it is for small n.
"""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcoll.ir.schedules import Schedule, split_round


def run(schedule: Schedule, chunks, axis, combine: Callable = lax.add):
    """Run ``schedule`` on this rank's ``(n_chunks, chunk_len)`` input; its output back.

    Args:
      schedule: any schedule (verified or not: this runner only moves what it says).
      chunks: this rank's input, one row per chunk of the schedule.
      axis: the mesh axis (or ``vmap`` axis name) the schedule's ranks are.
      combine: how a reducing transfer combines what arrives with what is there.

    Returns:
      This rank's ``(n_chunks, chunk_len)`` output (scratch chunks, and an out-of-place
      schedule's output chunks, start as zeros).

    Raises:
      ScheduleError: the schedule reduces inside a switch (no ppermute does).
    """
    schedule.refuse_in_switch("the reference runner")
    me = lax.axis_index(axis)
    buf = jnp.zeros((schedule.buffer_chunks, chunks.shape[1]), chunks.dtype)
    buf = buf.at[schedule.input_at:schedule.input_at + schedule.n_chunks].set(chunks)
    for round_ in schedule.explicit().rounds:
        before = buf  # every transfer of a round reads the state before it
        for matching in split_round(round_):
            sends, receives = _tables(matching, schedule.n_ranks)  # (n_ranks, k) each
            sent = before[jnp.asarray(sends)[me]]  # (k, chunk_len): what I send, if I send
            got = lax.ppermute(sent, axis, [(t.src, t.dst) for t in matching])
            into = jnp.asarray(receives)[me]  # the chunks I write: -1 if I receive nothing
            here = jnp.maximum(into, 0)
            new = combine(buf[here], got) if matching[0].reduce else got
            buf = buf.at[here].set(jnp.where((into >= 0)[:, None], new, buf[here]))
    return buf[schedule.output_at:schedule.output_at + schedule.n_chunks]


def _tables(matching, n_ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Per rank, the chunks it sends and the chunks it receives into in this matching
    (``(n_ranks, k)``; a rank that sends nothing sends chunk 0, unread, and one that receives
    nothing has -1)."""
    k = len(matching[0].chunks)
    sends = np.zeros((n_ranks, k), np.int32)
    receives = np.full((n_ranks, k), -1, np.int32)
    for t in matching:
        sends[t.src], receives[t.dst] = t.chunks, t.into
    return sends, receives
