"""A schedule priced as a pipelined runtime (NCCL's, MSCCL's) runs it, not lock-step. No JAX.

:func:`jaxcoll.analysis.topology.simulate` with ``runtime="pipelined"`` comes here (and
makes the :class:`~jaxcoll.analysis.topology.Simulation`); this module knows only a
topology's fields (``n``, ``alpha``, ``beta``, ``overhead``, ``routes``, ``link_names``), so
it imports no other analysis module.

The model, exactly:

- each channel's share of the buffer is cut into ``slices`` equal slices; every slice runs
  the schedule's transfers, round by round, on ``1/slices`` of each chunk;
- transfer (slice k, round i) of a channel is ready when its inputs are at its sender: every
  transfer of the same slice and channel, in an earlier round, that wrote (copied or reduced
  into, following ``into``) a chunk it sends, at the sender, has arrived (chunks no earlier
  transfer wrote are there at time 0);
- a link carries one message at a time, first in first out in (round, slice, channel,
  transfer) order: round-major, as NCCL's ring runs a step's slices through the connection's
  FIFO (``NCCL_STEPS`` slots) while the next step starts on its first slice as soon as that
  one has arrived, so a ring pays about one α per round on its critical path, overlapped with
  the link's busy time, not one per slice (slice-major order would serialize the slices and
  charge S·(R − 1) + 1 α). Each link of a route carries the
  message on its own, busy bytes · that link's β (+ its ``overhead``) from when the message's
  inputs are ready and the link is free (as lock-step's round takes its busiest link's
  time, not the sum over the route);
- it arrives when its last link has carried it, + α of its route (latency, not occupancy)
  + (bytes it reduces) · γ; a local transfer (no link) when its inputs are ready, + γ;
- the makespan is the last arrival.

No buffer is reused too early: a transfer does not wait for a later round's reader of a chunk
it overwrites (the runtime is assumed to have room), nor for its receiver to be ready.

With ``slices=1`` it is never slower than lock-step, on any topology: by induction over rounds,
every input of round i has arrived and every link is free by the time L_i lock-step starts the
round; a link then carries its round's messages by L_i + (its bytes)·β + overhead, at most what
lock-step's round takes; a transfer's γ is for its own bytes, not all its receiver reduces that
round. It is the same where every transfer needs the round before's arrival at its sender, no
two transfers of a round share a link and every round's transfers take as long (a 2-rank
allreduce on a switch).
"""

from __future__ import annotations

import math

import numpy as np

# NCCL's Simple protocol moves data through a FIFO of NCCL_STEPS = 8 slots
# (src/include/device.h) in a buffer of DEFAULT_BUFFSIZE = 1 << 22 = 4 MiB per connection
# (src/init.cc): a step (stepSize = buffSize / NCCL_STEPS) is 512 KiB.
STEP_BYTES = (1 << 22) // 8
MAX_DEFAULT_SLICES = 64  # the default slices' cap (a slice is larger than a step above it)
MAX_TRANSFERS = 1 << 20  # every rank's transfers, written out, at most
MAX_EVENTS = 1 << 21  # transfers x slices x channels at most

RUNTIMES = ("lockstep", "pipelined")


def default_slices(chunk_bytes: float) -> int:
    """The slices a chunk of ``chunk_bytes`` (one channel's) is cut into by default.

    Args:
      chunk_bytes: the bytes of one chunk of one channel.

    Returns:
      The number of slices, an int, one per NCCL Simple step (``STEP_BYTES``, 512 KiB),
      rounded up, at least 1 and at most ``MAX_DEFAULT_SLICES`` (64).
    """
    return int(min(MAX_DEFAULT_SLICES, max(1, math.ceil(chunk_bytes / STEP_BYTES))))


def check_slices(slices) -> None:
    """Raise ValueError unless ``slices`` is an int >= 1.

    Args:
      slices: the pieces each channel's buffer is to be cut into.

    Raises:
      ValueError: ``slices`` is not an int >= 1 (a bool is not).
    """
    if isinstance(slices, bool) or not isinstance(slices, (int, np.integer)) or slices < 1:
        raise ValueError(f"simulate: slices={slices!r}, must be an int >= 1 (the pieces each "
                         "channel's buffer is cut into) or None for the default")


def _rounds(schedule, slices: int, channels: int) -> list[tuple]:
    """Per round with a transfer, (round index, src, dst, reduce, count, reads, writes):
    (t,) arrays of every rank's transfers, and (sender, chunk, transfer) / (receiver, chunk,
    transfer) arrays of what each reads and writes. Raises ValueError past the limits."""
    total = sum(len(round_) for round_ in schedule.rounds)
    if (total > MAX_TRANSFERS or total * slices * channels > MAX_EVENTS
            or slices * channels * schedule.n_ranks * schedule.buffer_chunks > MAX_EVENTS):
        raise ValueError(
            f"simulate(runtime='pipelined'): {schedule.name!r} has {total} transfers (every "
            f"rank's) x {slices} slices x {channels} channels; the pipelined engine writes "
            f"them out and prices at most {MAX_TRANSFERS} transfers and {MAX_EVENTS} transfers "
            "x slices x channels: pass fewer slices or price it lock-step")
    rounds = []
    for index, round_ in enumerate(schedule.rounds):
        transfers = round_.transfers
        if not transfers:
            continue
        src = np.array([t.src for t in transfers], dtype=np.int64)
        dst = np.array([t.dst for t in transfers], dtype=np.int64)
        reduce = np.array([t.reduce for t in transfers], dtype=bool)
        count = np.array([len(t.chunks) for t in transfers], dtype=np.float64)
        owner = np.repeat(np.arange(len(transfers)), count.astype(np.int64))
        chunks = np.array([c for t in transfers for c in t.chunks], dtype=np.int64)
        into = np.array([c for t in transfers for c in t.into], dtype=np.int64)
        rounds.append((index, src, dst, reduce, count, (src[owner], chunks, owner),
                       (dst[owner], into, owner)))
    return rounds


def run(schedule, chunk: float, topology, placements: list[np.ndarray], slices: int,
        gamma: float) -> tuple:
    """The pipelined run of ``schedule`` on ``topology`` (module docstring).

    Args:
      schedule: the :class:`~jaxcoll.ir.schedules.Schedule` to run.
      chunk: the bytes in one chunk of one channel.
      topology: the :class:`~jaxcoll.analysis.topology.Topology` (only its ``alpha``,
        ``beta``, ``overhead``, ``routes`` and ``link_names`` are read).
      placements: one (n,) array per channel: channel c's ranks at ``placements[c]``.
      slices: the slices each chunk is cut into.
      gamma: seconds per byte reduced.

    Returns:
      A tuple (makespan, rounds, round_seconds, busiest, loads), the makespan in seconds (0
      with no transfer); the schedule's indices of the rounds with a transfer; per such round
      how much later its last arrival (over every slice and channel) makes the end (the
      running latest arrival's increase: they sum to the makespan); its busiest link over the
      run (bytes·β + overhead), an index into ``link_names``; its (links, bytes) arrays.

    Raises:
      ValueError: more than ``MAX_TRANSFERS`` transfers written out, or more than
        ``MAX_EVENTS`` transfers x slices x channels.
    """
    channels = len(placements)
    n, width = schedule.n_ranks, schedule.buffer_chunks
    links = len(topology.link_names)
    overhead = (np.zeros(links) if topology.overhead is None
                else np.asarray(topology.overhead, dtype=np.float64))
    piece = chunk / slices  # bytes of one chunk of one slice of one channel
    prepared = []
    for index, src, dst, reduce, count, reads, writes in _rounds(schedule, slices, channels):
        t = len(src)
        # channel k's (rank, chunk) at k·n·width + rank·width + chunk in the flat state
        read_at, read_of, write_at, write_of = (
            np.concatenate([offset + k * step for k in range(channels)])
            for offset, step in ((reads[0] * width + reads[1], n * width), (reads[2], t),
                                 (writes[0] * width + writes[1], n * width), (writes[2], t)))
        placed_src = np.concatenate([place[src] for place in placements])
        placed_dst = np.concatenate([place[dst] for place in placements])
        sent = np.tile(count * piece, channels)  # (t·channels,) bytes per slice
        route = topology.routes(placed_src, placed_dst)
        on = (route >= 0) & (placed_src != placed_dst)[:, None]
        hop = np.where(on, route, 0)
        busy = sent[:, None] * topology.beta[hop] + overhead[hop]  # (t, hops) on each link
        latency = (np.where(on, topology.alpha[hop], 0.0).sum(axis=1)
                   + np.tile(reduce, channels) * sent * gamma)  # α of the route + reducing
        used = route[on]  # the links crossed, message by message in FIFO order
        order = np.argsort(used, kind="stable")
        first = np.r_[0, np.flatnonzero(np.diff(used[order])) + 1]
        turn = np.empty(len(used), dtype=np.int64)  # the messages before it on its link
        turn[order] = np.arange(len(used)) - np.repeat(first, np.diff(np.r_[first, len(used)]))
        where = np.argwhere(on)  # (entries, 2): (message, hop) of each link crossed
        turns = [where[turn == q] for q in range(int(turn.max(initial=-1)) + 1)]
        load = np.bincount(used, weights=sent[where[:, 0]] * slices, minlength=links)
        messages = np.bincount(used, minlength=links) * slices
        starts = np.r_[0, np.flatnonzero(np.diff(read_of)) + 1]  # each transfer's first read
        prepared.append((index, read_at, starts, write_at, write_of, route, busy, latency,
                         turns, load, load * topology.beta + messages * overhead))
    free = np.zeros(links)  # when each link is next free
    last = np.zeros(len(prepared))  # each round's latest arrival
    ready = np.zeros((slices, channels * n * width))  # when each slice's (channel, rank,
    for position, (_, read_at, starts, write_at, write_of, route, busy, latency,  # chunk) is
                   turns, *_) in enumerate(prepared):  # there; round by round, slice by slice
        for k in range(slices):
            inputs = np.maximum.reduceat(ready[k][read_at], starts)  # (transfers,)
            carried = inputs.copy()  # when its last link has carried it
            for entries in turns:  # the q-th message on each link: the links all differ
                message, step = entries[:, 0], entries[:, 1]
                link = route[message, step]
                free[link] = np.maximum(inputs[message], free[link]) + busy[message, step]
                np.maximum.at(carried, message, free[link])
            arrival = carried + latency
            np.maximum.at(ready[k], write_at, arrival[write_of])
            last[position] = max(last[position], arrival.max())
    end = np.maximum.accumulate(last) if len(last) else last
    round_seconds = np.diff(end, prepend=0.0)
    rounds = np.array([p[0] for p in prepared], dtype=int)
    busiest = np.array([int(np.argmax(p[10])) for p in prepared], dtype=int)
    loads = [(np.flatnonzero(p[9]), p[9][np.flatnonzero(p[9])]) for p in prepared]
    return float(end[-1]) if len(end) else 0.0, rounds, round_seconds, busiest, loads
