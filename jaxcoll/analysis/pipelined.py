"""A schedule priced as a pipelined runtime (NCCL's, MSCCL's) runs it, not lock-step. No JAX.

:func:`jaxcoll.analysis.topology.simulate` with ``runtime="pipelined"`` comes here (and
makes the :class:`~jaxcoll.analysis.topology.Simulation`); this module knows only a
topology's fields (``n``, ``alpha``, ``beta``, ``overhead``, ``routes``, ``link_names``,
``switch_of``, ``switch_ports``, ``period``, ``link_orbit``), so it imports no other analysis
module than :mod:`~jaxcoll.analysis.protocols` (Simple's step). A protocol (LL, LL128,
Simple) reaches it as the topology seen through it
(:meth:`~jaxcoll.analysis.topology.Topology.in_protocol`: β times the bytes on the wire, α as
NCCL's latencies scale it) and its step as the slice.

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
- a round's in-switch operations (:class:`~jaxcoll.ir.schedules.ThroughSwitch`, NVLS), slice
  by slice after its transfers: one starts when its senders hold their chunks, every link it
  crosses (the senders' up links, its ``via`` rank's down and up links, the receivers' down
  links) carrying it from then, once free (cut through, as a route's links do); it arrives
  when the last has, + α up (and through ``via``) and down;
- the makespan is the last arrival.

**A few ranks for all.** Where the schedule is its own image under one symmetry
(:func:`jaxcoll.ir.symbolic.common_symmetry`: rotate, xor, mirror or grid, every round) and
the topology's ranks come in groups that any permutation of the groups maps onto each other
(``Topology.period``: :func:`~jaxcoll.analysis.topology.nodes`' nodes, a
:func:`~jaxcoll.analysis.topology.switch`'s ranks), every group runs as group 0 does, moved:
only group 0's ranks' transfers are priced, a cell written at rank x is kept as its image at
rank x mod period, and a link stands for its like in every group
(``Topology.link_orbit``). That is the same run (tested against every rank written out,
every registered symmetric schedule) wherever no two messages of a round queue on one link;
where they do (NICs shared by GPUs), they queue in rank order within a group rather than
across all ranks, a tie-break (within 1% where tested). A 32,768-rank ring is then 8 ranks'
transfers a round. (Lock-step ``simulate`` prices a symmetric round so too, exactly:
:func:`jaxcoll.analysis.topology.simulate`.)

How it is computed, the same run faster: a round in which no link carries two messages of a
slice runs every slice at once (a link's k-th slice leaves it free at (k + 1)·b + max(F, max
over j <= k of (input_j - j·b)), F when it was free before); rounds written out (not
symmetric) are routed all at once; symmetric rounds of one kind (other partners, the same
bytes) are made and routed at once, and those crossing the same links share their crossing;
a round of in-switch operations alone runs as messages whose hops are the switch's ports;
long tuples of chunk ids that many transfers share (naive's whole buffers) get one cell per
rank instead of one per chunk (:class:`_SharedSets`).

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

from jaxcoll.analysis.protocols import BY_NAME
from jaxcoll.ir.symbolic import common_symmetry

# NCCL's Simple protocol moves data through a FIFO of NCCL_STEPS = 8 slots
# (src/include/device.h) in a buffer of DEFAULT_BUFFSIZE = 1 << 22 = 4 MiB per connection
# (src/init.cc): a step (stepSize = buffSize / NCCL_STEPS) is 512 KiB (protocols.py).
STEP_BYTES = BY_NAME["Simple"].step_bytes
MAX_DEFAULT_SLICES = 64  # the default slices' cap (a slice is larger than a step above it)
MAX_TRANSFERS = 1 << 22  # transfers priced (every rank's, or a group's standing for all)
MAX_EVENTS = 1 << 26  # transfers x slices x channels at most
MAX_CELLS = 1 << 25  # slices x channels x ranks held x chunks: when each cell is ready
SETS_FROM = MAX_EVENTS  # chunk ids read x channels past which shared sets get a cell each
SHARED_LONG = 64  # chunk ids in a tuple, at least, for it to be a shared set

RUNTIMES = ("lockstep", "pipelined")


def default_slices(chunk_bytes: float, step_bytes: int = STEP_BYTES) -> int:
    """The slices a chunk of ``chunk_bytes`` (one channel's) is cut into by default.

    Args:
      chunk_bytes: the bytes of one chunk of one channel.
      step_bytes: the data one step of the protocol carries; default NCCL Simple's
        (``STEP_BYTES``, 512 KiB).

    Returns:
      The number of slices, an int, one per step, rounded up, at least 1 and at most
      ``MAX_DEFAULT_SLICES`` (64).
    """
    return int(min(MAX_DEFAULT_SLICES, max(1, math.ceil(chunk_bytes / step_bytes))))


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


def _group(schedule, topology, placements) -> tuple[int, object] | None:
    """(period, symmetry) where one group of ``period`` ranks stands for all (module
    docstring, "A few ranks for all"), else None: the schedule is its own image under one
    symmetry (:func:`jaxcoll.ir.symbolic.common_symmetry`) whose moves between ranks of the
    same place in their groups map groups onto groups, on a topology with such groups
    (``Topology.period``) whose channels place ranks within their groups alike."""
    period = group_period(topology, placements, schedule.n_ranks)
    symmetry = common_symmetry(schedule) if period else None
    return (period, symmetry) if symmetry is not None and fits(symmetry, period) else None


def group_period(topology, placements, n: int) -> int:
    """The topology's ``period`` where its groups of ranks can stand for each other for n
    ranks placed by ``placements`` (every channel keeps each rank in its group, alike in
    every group), else 0."""
    period = topology.period
    if not period or topology.link_orbit is None or n % period or n == period:
        return 0
    ranks = np.arange(n)
    for place in placements:
        if not ((place // period == ranks // period).all()
                and (place % period == place[ranks % period] % period).all()):
            return 0
    return period


def fits(symmetry, period: int) -> bool:
    """True where the symmetry's moves between ranks of one place in their groups of
    ``period`` map groups onto groups: xor with a power-of-two period, mirror an even one,
    grid whole trailing levels, rotate any."""
    if symmetry.kind == "xor":
        return not period & (period - 1)
    if symmetry.kind == "mirror":
        return period % 2 == 0
    if symmetry.kind == "grid":
        return period in np.cumprod(symmetry.sizes[::-1])
    return True


def _toward(symmetry, x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The symmetry's element (a rank) that moves rank x to rank q, elementwise."""
    if symmetry.kind == "xor":
        return x ^ q
    if symmetry.kind == "grid":  # coordinate-wise q - x
        sizes = np.array(symmetry.sizes)
        return np.ravel_multi_index(tuple((np.array(np.unravel_index(q, sizes))
                                           - np.array(np.unravel_index(x, sizes)))
                                          % sizes[:, None]), sizes)
    return (q - x) % symmetry.n_ranks


def _rounds(schedule, slices: int, channels: int, group=None) -> tuple[list[tuple], int]:
    """Per round with a transfer, (round index, src, dst, reduce, count, reads, writes,
    shape): (t,) arrays of the ranks' transfers, and (sender, chunk, transfer) / (receiver,
    chunk, transfer) arrays of the state's cells each reads and writes; and the ranks the
    state holds. Every rank's; with a ``group`` (period, symmetry), the group's ranks' only, a
    cell written at rank x read as its image at rank x mod period; past ``SETS_FROM`` ids
    read, long tuples shared by transfers as :class:`_SharedSets` (cells after the ranks').
    Raises ValueError past the limits."""
    n = schedule.n_ranks
    period = n if group is None else group[0]
    total = sum(len(round_.base) * (period if round_.symmetry else 1)
                for round_ in schedule.rounds)
    if total > MAX_TRANSFERS or total * slices * channels > MAX_EVENTS:
        raise ValueError(
            f"simulate(runtime='pipelined'): {schedule.name!r} has {total} transfers (every "
            f"rank's{'' if group is None else ' of a group standing for all'}) x {slices} "
            f"slices x {channels} channels; the pipelined engine prices at most "
            f"{MAX_TRANSFERS} transfers and {MAX_EVENTS} transfers x slices x channels: "
            + ("pass fewer slices or channels, or " if total <= MAX_TRANSFERS else "")
            + "price it lock-step" + ("" if group is not None else
                                      " (no symmetry lets a few ranks stand for all), or "
                                      "bracket it from its phases with "
                                      "jaxcoll.analysis.topology.pipelined_bounds"))
    ids = sum(sum(map(len, (t.chunks for t in round_.base))) * (period if round_.symmetry
                                                                   else 1)
              for round_ in schedule.rounds)
    sets = None
    if ids * channels > SETS_FROM and group is None and not schedule.in_switch:
        sets = _SharedSets(schedule)  # naive's whole buffers: a cell for each
        ids = sets.cells_read
    if ids * channels > MAX_EVENTS:  # checked before any is read
        raise ValueError(
            f"simulate(runtime='pipelined'): {schedule.name!r}'s transfers read {ids} cells "
            f"(every rank's{'' if group is None else ' of a group standing for all'}) x "
            f"{channels} channels; the pipelined engine reads at most {MAX_EVENTS}: pass "
            "fewer channels or price it lock-step")
    rounds, kinds, index = [], {}, 0
    while index < len(schedule.rounds):
        round_ = schedule.rounds[index]
        if group is not None and round_.base:  # a run of rounds of one kind at once
            kind = _kind(round_)
            run = 1
            while (index + run < len(schedule.rounds) and schedule.rounds[index + run].base
                   and _kind(schedule.rounds[index + run]) == kind):
                run += 1
            rounds += _group_rounds(index, schedule.rounds[index:index + run], group, kind,
                                    kinds)
            index += run
            continue
        index += 1
        transfers = round_.transfers
        if not transfers:
            if round_.switched:
                empty = np.zeros(0, dtype=np.int64)
                rounds.append((index - 1, empty, empty, empty.astype(bool),
                               empty.astype(float), (empty, empty, empty),
                               (empty, empty, empty), None))
            continue
        src = np.array([t.src for t in transfers], dtype=np.int64)
        dst = np.array([t.dst for t in transfers], dtype=np.int64)
        reduce = np.array([t.reduce for t in transfers], dtype=bool)
        count = np.array([len(t.chunks) for t in transfers], dtype=np.float64)
        if sets is not None:
            rounds.append((index - 1, src, dst, reduce, count, *sets.cells(transfers), None))
            continue
        owner = np.repeat(np.arange(len(transfers)), count.astype(np.int64))
        chunks = np.array([c for t in transfers for c in t.chunks], dtype=np.int64)
        into = np.array([c for t in transfers for c in t.into], dtype=np.int64)
        rounds.append((index - 1, src, dst, reduce, count, (src[owner], chunks, owner),
                       (dst[owner], into, owner), None))
    return rounds, period + (0 if sets is None else sets.extra_ranks)


class _SharedSets:
    """Cells for long tuples of chunk ids that transfers share (naive reduce_scatter's and
    allgather's whole buffer, n ids in n - 1 transfers): instead of every chunk's cell, a
    transfer that writes such a set S at rank x writes one cell V(x, S), and one that reads it
    there reads one cell R(x, S); a write at x of a cell in S (or of a set meeting S) writes
    R(x, S) too, and a read at x of a cell in a set S' written there (or of a set meeting S')
    reads V(x, S') too. A cell is ready at the latest arrival of what was written into it,
    so every transfer's input is as late as with every chunk's cell: the same run, bitwise.
    The cells after the ranks' own are numbered as ranks from n up (``extra_ranks``)."""

    def __init__(self, schedule):
        n, self.width = schedule.n_ranks, schedule.buffer_chunks
        seen, self.sets = {}, {}  # id of a long tuple -> how many transfers name it; its set
        self.kept = []  # the shared tuples themselves: no other object takes their ids
        transfers = [t for round_ in schedule.rounds for t in round_.transfers]
        for t in transfers:
            for ids in {id(t.chunks): t.chunks, id(t.into): t.into}.values():
                if len(ids) >= SHARED_LONG:
                    seen[id(ids)] = seen.get(id(ids), 0) + 1
                    if seen[id(ids)] == 2:
                        self.sets[id(ids)] = frozenset(ids)
                        self.kept.append(ids)
        self.written, self.read = {}, {}  # rank -> the sets written / read there
        for t in transfers:
            if id(t.into) in self.sets:
                self.written.setdefault(t.dst, set()).add(id(t.into))
            if id(t.chunks) in self.sets:
                self.read.setdefault(t.src, set()).add(id(t.chunks))
        self.virtual, self.meeting, self.cells_read = {}, {}, 0
        for t in transfers:  # number the virtual cells
            reads = self._read(t)
            self.cells_read += len(reads)
            for cell in reads + self._write(t):
                if len(cell) == 3:
                    self._cell(*cell)
        self.first = n * self.width  # the flat index of the first virtual cell
        self.extra_ranks = -(-len(self.virtual) // self.width)

    def _cell(self, kind: str, rank: int, key: int) -> int:
        """The virtual cell V (written sets) or R (read sets) of set ``key`` at ``rank``."""
        return self.virtual.setdefault((kind, rank, key), len(self.virtual))

    def _meets(self, a: int, b: int) -> bool:
        met = self.meeting.get((a, b))
        if met is None:
            met = self.meeting[a, b] = not self.sets[a].isdisjoint(self.sets[b])
        return met

    def _touching(self, sets: set, ids: tuple) -> list[int]:
        """The sets among ``sets`` that hold one of ``ids`` (or meet it, a set itself)."""
        if id(ids) in self.sets:
            return [key for key in sets if self._meets(id(ids), key)]
        return [key for key in sets if not self.sets[key].isdisjoint(ids)]

    def _read(self, t) -> list:
        """What transfer t reads at its sender: (rank, chunk) pairs and virtual cells."""
        x, written = t.src, self.written.get(t.src, ())
        own = ([("R", x, id(t.chunks))] if id(t.chunks) in self.sets
               else [(x, c) for c in t.chunks])
        return own + [("V", x, key) for key in self._touching(written, t.chunks)]

    def _write(self, t) -> list:
        """What transfer t writes at its receiver: (rank, chunk) pairs and virtual cells."""
        y, read = t.dst, self.read.get(t.dst, ())
        own = ([("V", y, id(t.into))] if id(t.into) in self.sets
               else [(y, c) for c in t.into])
        return own + [("R", y, key) for key in self._touching(read, t.into)]

    def cells(self, transfers) -> tuple:
        """A round's (reads, writes) as :func:`_rounds` gives them: (rank, chunk, transfer)
        arrays, a virtual cell v as rank n + v // width, chunk v % width."""
        out = []
        for side in (self._read, self._write):
            flat, owner = [], []
            for k, t in enumerate(transfers):
                cells = [self.first + self._cell(*c) if len(c) == 3 else c[0] * self.width + c[1]
                         for c in side(t)]
                flat += cells
                owner += [k] * len(cells)
            flat = np.array(flat, dtype=np.int64)
            out.append((flat // self.width, flat % self.width, np.array(owner, dtype=np.int64)))
        return tuple(out)


def _kind(round_) -> tuple:
    """A symmetric round's kind, (symmetry, each base transfer's (chunk count, reduce)):
    rounds of one kind differ at most in where their transfers go (and which chunks)."""
    return round_.symmetry, tuple((len(t.chunks), t.reduce) for t in round_.base)


def _group_rounds(first: int, run, group, kind, kinds: dict) -> list[tuple]:
    """:func:`_rounds`' tuples for a run of symmetric rounds of one ``kind``, the group's
    ranks' transfers only (base transfer by base transfer, rank by rank), made from rank 0's
    with numpy, all the run's rounds at once (``kinds`` keeps what rounds of a kind share);
    each with its shape, (symmetry, each base transfer's (dst, chunk count, reduce)): rounds
    of one shape cross the same links and send from and to the same ranks."""
    (period, common), symmetry = group, kind[0]
    ranks = np.arange(period)
    shared = kinds.get(kind)
    if shared is None:
        count = np.repeat([float(k) for k, _ in kind[1]], period)
        owner = np.repeat(np.arange(len(count)), count.astype(np.int64))
        shared = kinds[kind] = (np.tile(ranks, len(kind[1])),
                                np.repeat([r for _, r in kind[1]], period), count, owner)
    src, reduce, count, owner = shared
    ends = np.array([[t.dst for t in r.base] for r in run])  # (rounds, base transfers)
    dst = symmetry.rank(ends[:, :, None], ranks).reshape(len(run), -1)  # (rounds, period·b)
    receiver = dst[:, owner]
    stand_in = receiver % period  # rank x's cell (x, c) is rank q's (q, chunk(c, x to q))
    toward = _toward(common, receiver.ravel(), stand_in.ravel()).reshape(receiver.shape)
    # (rounds, period·k) every round's ranks' chunk ids: base transfer by base transfer, rank
    # by rank, chunk by chunk
    chunks, into = (np.concatenate([
        symmetry.chunk(np.array([getattr(r.base[b], ids) for r in run])[:, None, :],
                       ranks[None, :, None]).reshape(len(run), -1)
        for b in range(len(run[0].base))], axis=1) for ids in ("chunks", "into"))
    into = common.chunk(into, toward)
    return [(first + r, src, dst[r], reduce, count, (src[owner], chunks[r], owner),
             (stand_in[r], into[r], owner),
             (symmetry, tuple(zip(ends[r].tolist(), *zip(*kind[1])))))
            for r in range(len(run))]


def _switched(ops, topology, placements, piece: float, state: int, width: int,
              overhead: np.ndarray) -> list[tuple]:
    """Per in-switch operation and channel: (up links, down links, each up link's busy
    seconds, each down link's, latency up, latency down, the flat state's cells its senders
    read, those its receivers write) for one slice of ``piece`` bytes per chunk."""
    prepared = []
    for k, place in enumerate(placements):
        for op in ops:
            senders, receivers = place[list(op.senders)], place[list(op.receivers)]
            via = place[[op.via]] if op.via is not None else senders[:0]
            try:  # its ranks' ports, decided for all of them: NVLS or SHARP
                up, down = topology.operation_ports(np.concatenate([senders, receivers, via]))
            except ValueError as error:
                raise ValueError(f"simulate: {op} {error}") from None
            k_s, k_r = len(senders), len(receivers)
            through = np.concatenate([down[k_s + k_r:], up[k_s + k_r:]])  # (down, up) of via
            up, down = up[:k_s], down[k_s:k_s + k_r]
            up, down, through = up[up >= 0], down[down >= 0], through[through >= 0]
            nbytes = len(op.chunks) * piece
            chunks = np.array(op.chunks)
            reads = (k * state + np.array(op.senders)[:, None] * width + chunks).ravel()
            writes = (k * state + np.array(op.receivers)[:, None] * width + chunks).ravel()
            prepared.append((up, down, nbytes * topology.beta[up] + overhead[up],
                             nbytes * topology.beta[down] + overhead[down],
                             topology.alpha[up].max(initial=0.0),
                             topology.alpha[down].max(initial=0.0), reads, writes, through,
                             nbytes * topology.beta[through] + overhead[through],
                             topology.alpha[through], nbytes))
    return prepared


def _as_messages(switched, topology, overhead: np.ndarray, slices: int) -> tuple:
    """A round of in-switch operations alone (:func:`_switched`'s) as messages, in the
    prepared round's fields (read_at, starts, write_at, write_of, route, busy, latency,
    queues, loads): each operation, channel by channel, one message whose hops are the links
    it crosses in :func:`_run_switched`'s order (its senders' up links, its ``via``'s down and
    up links, its receivers' down links), each carrying it from its start once free, its
    latency α up, through ``via`` and down: the same run, every slice at once where the
    links' queues are short."""
    hops = [np.r_[up, through, down] for up, down, *_, through, _, _, _ in switched]
    route = np.full((len(hops), max(map(len, hops))), -1, dtype=np.int64)
    for message, links in enumerate(hops):
        route[message, :len(links)] = links
    sent = np.array([op[11] for op in switched])
    reduce = np.zeros(len(switched), dtype=bool)
    route, busy, _, queues, loads = next(_crossed(topology, route, route >= 0, sent, reduce,
                                                  [len(route)], 0.0, overhead, slices))
    latency = np.array([up + down + through.sum()
                        for _, _, _, _, up, down, *_, through, _ in switched])
    reads, writes = ([op[k] for op in switched] for k in (6, 7))
    return (np.concatenate(reads), np.r_[0, np.cumsum([len(r) for r in reads])[:-1]],
            np.concatenate(writes), np.repeat(np.arange(len(writes)), [len(w) for w in writes]),
            route, busy, latency, queues, loads)


def _switched_loads(switched, load: np.ndarray, messages: np.ndarray, topology,
                    overhead: np.ndarray, slices: int) -> None:
    """Add the bytes and messages of a round's in-switch operations (every slice) to ``load``
    and ``messages``, (links,) each."""
    for up, down, busy_up, busy_down, _, _, _, _, through, busy_through, _, _ in switched:
        for ports, busy in ((up, busy_up), (down, busy_down), (through, busy_through)):
            np.add.at(load, ports, (busy - overhead[ports]) / topology.beta[ports] * slices)
            np.add.at(messages, ports, slices)


def _run_switched(switched, ready: np.ndarray, free: np.ndarray) -> float:
    """One slice of a round's in-switch operations, one after another: each starts when its
    senders hold their chunks, every link it crosses (its senders' up links, a ``via`` rank's
    down and up links, its receivers' down links) carrying it from then, once free (cut
    through, as a transfer's route's links do here); it arrives when the last has, + α up,
    through ``via`` and down. Updates ``ready`` and ``free``; returns the last arrival."""
    latest = 0.0
    for (up, down, busy_up, busy_down, alpha_up, alpha_down, reads, writes, through,
         busy_through, alpha_through, _) in switched:
        start = carried = ready[reads].max()
        for links, busy in ((up, busy_up), (through, busy_through), (down, busy_down)):
            for link, seconds in zip(links, busy):
                free[link] = max(start, free[link]) + seconds
                carried = max(carried, free[link])
        arrival = carried + alpha_up + alpha_through.sum() + alpha_down
        ready[writes] = np.maximum(ready[writes], arrival)
        latest = max(latest, arrival)
    return latest


def run(schedule, chunk: float, topology, placements: list[np.ndarray], slices: int,
        gamma: float) -> tuple:
    """The pipelined run of ``schedule`` on ``topology`` (module docstring).

    Args:
      schedule: the :class:`~jaxcoll.ir.schedules.Schedule` to run.
      chunk: the bytes in one chunk of one channel.
      topology: the :class:`~jaxcoll.analysis.topology.Topology` (the fields the module
        docstring names are read).
      placements: one (n,) array per channel: channel c's ranks at ``placements[c]``.
      slices: the slices each chunk is cut into.
      gamma: seconds per byte reduced.

    Returns:
      A tuple (makespan, rounds, round_seconds, busiest, loads), the makespan in seconds (0
      with no transfer); the schedule's indices of the rounds with a transfer; per such round
      how much later its last arrival (over every slice and channel) makes the end (the
      running latest arrival's increase: they sum to the makespan); its busiest link over the
      run (bytes·β + overhead), an index into ``link_names``; and its loads as
      :class:`~jaxcoll.analysis.topology.Simulation` keeps them: (rounds,) each round's
      pattern, the distinct patterns' (links, bytes) arrays, and where one node's links
      stood for all, the (links,) link each link's bytes are those of (else None).

    Raises:
      ValueError: more than ``MAX_TRANSFERS`` transfers priced, ``MAX_EVENTS`` transfers x
        slices x channels or ``MAX_CELLS`` slices x channels x ranks held x chunks.
    """
    channels = len(placements)
    group = None if schedule.in_switch else _group(schedule, topology, placements)
    width = schedule.buffer_chunks
    links = len(topology.link_names)
    overhead = (np.zeros(links) if topology.overhead is None
                else np.asarray(topology.overhead, dtype=np.float64))
    piece = chunk / slices  # bytes of one chunk of one slice of one channel
    prepared, crossing, routes = [], {}, {}  # how a round's messages cross links, by the
    # round's shape and by their routes
    rounds, n = _rounds(schedule, slices, channels, group)  # n: the ranks the state holds
    written = _crossed_written_out(topology, placements, [  # rounds written out, all at once
        (src, dst, reduce, count * piece) for index, src, dst, reduce, count, _, _, shape
        in rounds if shape is None and len(src) and not schedule.rounds[index].switched],
        gamma, overhead, slices)
    _cross_shapes(topology, placements, group, [r for r in rounds if r[7] is not None],
                  crossing, routes, gamma, overhead, slices, piece)
    owners: dict = {}  # a round's transfers' reads and writes -> (their first reads, writes)
    for index, src, dst, reduce, count, reads, writes, shape in rounds:
        t = len(src)
        switched = (_switched(schedule.rounds[index].switched, topology, placements, piece,
                              n * width, width, overhead)
                    if schedule.rounds[index].switched else [])
        if not t:  # in-switch operations alone: run as messages
            prepared.append((index, *_as_messages(switched, topology, overhead, slices), []))
            continue
        # channel k's (rank, chunk) at k·n·width + rank·width + chunk in the flat state
        read_at, write_at = (_per_channel(cells[0] * width + cells[1], n * width, channels)
                             for cells in (reads, writes))
        if shape is not None:  # symmetric (so no in-switch operation): crossed by shape
            starts, write_of, *crossed = crossing[shape]
        else:
            key = (t, reads[2].tobytes(), writes[2].tobytes())
            if key not in owners:
                owners[key] = _owners(reads[2], writes[2], t, channels)
            starts, write_of = owners[key]
            crossed = (next(written) if not switched else _crossing(
                topology, placements, group, src, dst, reduce, count * piece, gamma,
                overhead, slices, switched, routes))
        prepared.append((index, read_at, starts, write_at, write_of, *crossed, switched))
    cells = channels * n * width
    if slices * cells > MAX_CELLS and not schedule.in_switch:  # only the cells touched
        prepared, cells = _touched(prepared, slices, schedule.name)
    free = np.zeros(links)  # when each link is next free
    last = np.zeros(len(prepared))  # each round's latest arrival
    ready = np.zeros((slices, cells))  # when each slice's (channel, rank,
    for position, (_, read_at, starts, write_at, write_of, route, busy, latency,  # chunk) is
                   queues, *_, switched) in enumerate(prepared):  # there; round by round, slice
        queued = len(queues.links) * slices * len(queues.turns) if queues.turns else 0
        if len(read_at) and not switched and (  # every slice at once, unless long queues
                len(queues.turns) <= 1 or queued <= 1 << 16):
            last[position] = _all_slices(ready, free, read_at, starts, write_at, write_of,
                                         route, latency, queues)
        else:
            last[position] = _slice_by_slice(ready, free, read_at, starts, write_at, write_of,
                                             route, busy, latency, queues, switched)
    end = np.maximum.accumulate(last) if len(last) else last
    round_seconds = np.diff(end, prepend=0.0)
    rounds = np.array([p[0] for p in prepared], dtype=int)
    busiest = np.array([p[9][2] for p in prepared], dtype=int)
    loads = _patterns([p[9][:2] for p in prepared], topology, group)
    return float(end[-1]) if len(end) else 0.0, rounds, round_seconds, busiest, loads


def _crossing(topology, placements, group, src, dst, reduce, sent, gamma: float,
              overhead: np.ndarray, slices: int, switched, routes: dict) -> tuple:
    """How a round's messages (every channel's) cross their links: (route, busy, latency,
    turns, loads): (m, hops) the links (with a ``group``, the links standing for them);
    (m, hops) each link's busy seconds a slice; (m,) α of the route + reducing; per turn q
    the (message, hop) pairs that are the q-th on their link; and :func:`_loads`. ``sent``:
    (t,) each transfer's bytes a slice. Rounds whose messages cross the same links with as
    many bytes share what ``routes`` keeps."""
    placed_src = np.concatenate([place[src] for place in placements])
    placed_dst = np.concatenate([place[dst] for place in placements])
    route = topology.routes(placed_src, placed_dst)
    if group is not None:  # a link stands for its like in every group
        route = topology.link_orbit(route)
    on = (route >= 0) & (placed_src != placed_dst)[:, None]
    return _cross(topology, route, on, sent, reduce, len(placements), gamma, overhead, slices,
                  switched, routes)


def _cross(topology, route, on, sent, reduce, channels: int, gamma: float,
           overhead: np.ndarray, slices: int, switched, routes: dict) -> tuple:
    """:func:`_crossing`'s tuple for messages on ``route`` (where ``on``), every channel's,
    of ``sent`` bytes a slice each transfer; ``routes`` keeps it by the links and bytes."""
    key = (route.tobytes(), on.tobytes(), sent.tobytes(), reduce.tobytes())
    crossed = routes.get(key) if not switched else None
    if crossed is None:
        sent, reduce = np.tile(sent, channels), np.tile(reduce, channels)
        *crossed, _ = next(_crossed(topology, route, on, sent, reduce, [len(route)], gamma,
                                    overhead, slices))
        crossed.append(_loads(topology, overhead, slices, route[on],  # with the switch's
                              sent[np.argwhere(on)[:, 0]], switched))
        if not switched:
            routes[key] = crossed = tuple(crossed)
    return tuple(crossed)


def _cross_shapes(topology, placements, group, rounds: list[tuple], crossing: dict,
                  routes: dict, gamma: float, overhead: np.ndarray, slices: int,
                  piece: float) -> None:
    """Put in ``crossing`` what the symmetric ``rounds`` (:func:`_rounds`' tuples) whose
    shape it lacks need, by shape: each transfer's first read, where it writes, and
    :func:`_crossing`'s tuple; the shapes of one kind (the same senders and bytes, other
    partners) routed all at once, those crossing the same links crossed once."""
    channels, kinds = len(placements), {}
    for _, src, dst, reduce, count, reads, writes, shape in rounds:
        if shape not in crossing:
            kinds.setdefault((shape[0], reduce.tobytes(), count.tobytes()), {}).setdefault(
                shape, (src, dst, reduce, count, reads[2], writes[2]))
    for members in kinds.values():
        shapes = list(members)
        src, _, reduce, count, read_of, write_of = members[shapes[0]]
        starts, write_of = _owners(read_of, write_of, len(src), channels)
        dst = np.stack([members[shape][1] for shape in shapes])  # (shapes, t)
        placed_src = np.tile(np.concatenate([place[src] for place in placements]), len(shapes))
        placed_dst = np.concatenate([place[dst] for place in placements], axis=1).ravel()
        route = topology.routes(placed_src, placed_dst)  # (shapes·m, hops)
        if group is not None:  # a link stands for its like in every group
            route = topology.link_orbit(route)
        on = (route >= 0) & (placed_src != placed_dst)[:, None]
        m = len(route) // len(shapes)
        rows = np.concatenate([route.reshape(len(shapes), -1), on.reshape(len(shapes), -1)],
                              axis=1)
        _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        crossed = [(starts, write_of, *_cross(topology, route[u * m:(u + 1) * m],
                                              on[u * m:(u + 1) * m], count * piece, reduce,
                                              channels, gamma, overhead, slices, [], routes))
                   for u in first]
        for shape, u in zip(shapes, inverse.ravel()):
            crossing[shape] = crossed[u]


def _crossed_written_out(topology, placements, rounds: list[tuple], gamma: float,
                         overhead: np.ndarray, slices: int):
    """:func:`_crossing`'s tuples of many rounds written out, (src, dst, reduce, sent) each,
    computed all at once (their routes, each link's turns, their loads), one by one."""
    if not rounds:
        return iter(())
    channels = len(placements)
    transfers = np.array([len(r[0]) for r in rounds])  # a round's
    sizes = transfers * channels  # messages a round, channel by channel
    within = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    per = np.repeat(transfers, sizes)
    at = np.repeat(np.cumsum(transfers) - transfers, sizes) + within % per  # its transfer
    channel = within // per
    placed = np.stack(placements)  # (channels, n): channel k's rank r at placed[k, r]
    src, dst, reduce, sent = (np.concatenate([r[k] for r in rounds])[at] for k in range(4))
    src, dst = placed[channel, src], placed[channel, dst]
    route = topology.routes(src, dst)
    on = (route >= 0) & (src != dst)[:, None]
    return _crossed(topology, route, on, sent, reduce, sizes, gamma, overhead, slices)


def _crossed(topology, route, on, sent, reduce, sizes, gamma: float, overhead: np.ndarray,
             slices: int):
    """:func:`_crossing`'s tuples, one by one, for rounds of ``sizes`` messages each, the
    messages on ``route`` (where ``on``) with ``sent`` bytes a slice, reducing where
    ``reduce``."""
    links = len(topology.link_names)
    ends = np.cumsum(sizes)
    hop = np.where(on, route, 0)
    busy = sent[:, None] * topology.beta[hop] + overhead[hop]  # (m, hops)
    latency = np.where(on, topology.alpha[hop], 0.0).sum(axis=1) + reduce * sent * gamma
    where = np.argwhere(on)  # (entries, 2): message, hop; in message order
    owner = np.repeat(np.arange(len(sizes)), sizes)[where[:, 0]]  # each entry's round
    used = route[on]
    order = np.lexsort((used, owner))  # by round, then link, then message (stable)
    key = owner[order] * links + used[order]
    first = np.r_[0, np.flatnonzero(np.diff(key)) + 1]
    turn = np.empty(len(used), dtype=np.int64)  # the messages before it on its link
    turn[order] = np.arange(len(used)) - np.repeat(first, np.diff(np.r_[first, len(used)]))
    entry_ends = np.searchsorted(owner, np.arange(1, len(sizes) + 1))
    pairs = key[first]  # (round, link) pairs crossed, sorted
    load = np.add.reduceat(sent[where[order, 0]] * slices, first) if len(first) else first
    messages = np.diff(np.r_[first, len(used)]) * float(slices)
    pair_busy = (load * topology.beta[pairs % links]
                 + messages * overhead[pairs % links])
    pair_ends = np.searchsorted(pairs // links, np.arange(1, len(sizes) + 1))
    for k in range(len(sizes)):
        m0, m1 = (ends[k - 1] if k else 0), ends[k]
        e0, e1 = (entry_ends[k - 1] if k else 0), entry_ends[k]
        p0, p1 = (pair_ends[k - 1] if k else 0), pair_ends[k]
        local = where[e0:e1] - [m0, 0]
        turns = ([local] if turn[e0:e1].max(initial=0) == 0 else
                 [local[turn[e0:e1] == q] for q in range(int(turn[e0:e1].max()) + 1)])
        busiest = int(pairs[p0 + np.argmax(pair_busy[p0:p1])] % links) if p1 > p0 else 0
        yield (route[m0:m1], busy[m0:m1], latency[m0:m1],
               _Queues.of(route[m0:m1], busy[m0:m1], turns),
               (pairs[p0:p1] % links, load[p0:p1], busiest))


def _touched(prepared: list[tuple], slices: int, name: str) -> tuple[list[tuple], int]:
    """The rounds with the state's cells renumbered to those some transfer reads or writes
    (a cell never written is ready at 0 wherever it is read), and how many those are. Raises
    ValueError past ``MAX_CELLS`` slices x cells."""
    touched = np.unique(np.concatenate([a for p in prepared for a in (p[1], p[3])]))
    if slices * len(touched) > MAX_CELLS:
        raise ValueError(
            f"simulate(runtime='pipelined'): {name!r} reads and writes {len(touched)} cells "
            f"(channel, rank, chunk) x {slices} slices; the pipelined engine holds at most "
            f"{MAX_CELLS}: pass fewer slices or price it lock-step")
    return [(p[0], np.searchsorted(touched, p[1]), p[2], np.searchsorted(touched, p[3]),
             *p[4:]) for p in prepared], len(touched)


def _owners(read_of: np.ndarray, write_of: np.ndarray, t: int, channels: int) -> tuple:
    """(each message's first read, each write's message) for a round of ``t`` transfers whose
    reads and writes belong to transfers ``read_of`` and ``write_of``, every channel's."""
    read_of, write_of = (_per_channel(owner, t, channels) for owner in (read_of, write_of))
    return _firsts(read_of), write_of


def _firsts(sorted_: np.ndarray) -> np.ndarray:
    """The positions where a sorted array's runs of equal values start."""
    return np.concatenate(([0], np.flatnonzero(sorted_[1:] != sorted_[:-1]) + 1))


def _per_channel(offset: np.ndarray, step: int, channels: int) -> np.ndarray:
    """``offset`` for channel 0, then + step for channel 1, ...: (channels·len(offset),)."""
    if channels == 1:
        return offset
    return (offset[None, :] + step * np.arange(channels)[:, None]).ravel()


class _Queues:
    """A round's messages queued on its links, as :func:`_all_slices` reads them (the same for
    every round of a shape): ``turns``, per turn q the (message, hop) pairs that are the q-th on
    their link; each entry's message, hop and turn, the links used and each entry's row among
    them, (links, 1, turns) the seconds each queued message keeps its link, and where every hop
    of every message is an entry, the entries in (message, hop) order (else None)."""

    __slots__ = ("turns", "message", "step", "turn", "links", "row", "each", "order")

    @classmethod
    def of(cls, route, busy, turns) -> "_Queues":
        queues = cls()
        queues.turns = turns
        if not turns:
            return queues
        entries = np.concatenate(turns)  # (e, 2): message, hop, turn by turn
        queues.message, queues.step = entries[:, 0], entries[:, 1]
        queues.turn = np.repeat(np.arange(len(turns)), [len(t) for t in turns])
        if len(turns) == 1:  # every entry on a link of its own
            queues.links = route[queues.message, queues.step]
            queues.row = np.arange(len(entries))
        else:
            queues.links, queues.row = np.unique(route[queues.message, queues.step],
                                                 return_inverse=True)
        queues.each = np.zeros((len(queues.links), 1, len(turns)))
        queues.each[queues.row, 0, queues.turn] = busy[queues.message, queues.step]
        queues.order = (np.lexsort((queues.step, queues.message))
                        if len(entries) == route.size else None)
        return queues


def _slice_by_slice(ready: np.ndarray, free: np.ndarray, read_at, starts, write_at, write_of,
                    route, busy, latency, queues, switched) -> float:
    """A round slice by slice, its transfers then its in-switch operations, each link's
    messages turn by turn (the q-th message on each link, the links all different). Updates
    ``ready`` and ``free``; returns the round's last arrival."""
    last = 0.0
    for k in range(len(ready)):
        if len(read_at):
            inputs = np.maximum.reduceat(ready[k][read_at], starts)  # (transfers,)
            carried = inputs.copy()  # when its last link has carried it
            for entries in queues.turns:
                message, step = entries[:, 0], entries[:, 1]
                link = route[message, step]
                free[link] = np.maximum(inputs[message], free[link]) + busy[message, step]
                np.maximum.at(carried, message, free[link])
            arrival = carried + latency
            np.maximum.at(ready[k], write_at, arrival[write_of])
            last = max(last, arrival.max())
        if switched:
            last = max(last, _run_switched(switched, ready[k], free))
    return float(last)


def _carried(inputs: np.ndarray, done: np.ndarray, route: np.ndarray, q) -> np.ndarray:
    """(slices, messages) when each message's last link has carried it: the latest of its
    entries' ``done`` (slices, entries), or its input where it crosses no link."""
    if q.order is not None:  # every hop of every message
        return np.maximum(inputs, done[:, q.order].reshape(len(done), *route.shape).max(axis=2))
    hops = np.full((len(done), *route.shape), -np.inf)  # (slices, messages, hops)
    hops[:, q.message, q.step] = done
    return np.maximum(inputs, hops.max(axis=2))


def _all_slices(ready: np.ndarray, free: np.ndarray, read_at, starts, write_at, write_of,
                route, latency, queues: _Queues) -> float:
    """A round, every slice at once. A link carries its messages in (slice, turn) order, each
    from when its input is ready and the link is free: F_i = max(input_i, F_(i-1)) + b_i, that
    is C_i + max(F, max over j <= i of (input_j - C_(j-1))) with C the running sum of b and F
    when the link was free before the round. Updates ``ready`` and ``free``; returns the
    round's last arrival."""
    inputs = np.maximum.reduceat(ready[:, read_at], starts, axis=1)  # (slices, transfers)
    carried = inputs  # when its last link has carried it
    if len(queues.turns) == 1:  # a message a link a slice: F_k = (k + 1)·b + max(F, max
        q = queues  # over j <= k of (input_j - j·b))
        link, each = q.links[q.row], q.each[q.row, 0, 0]  # (entries,)
        k = np.arange(len(ready))[:, None]
        done = (k + 1) * each + np.maximum(
            free[link], np.maximum.accumulate(inputs[:, q.message] - k * each, axis=0))
        free[link] = done[-1]
        carried = _carried(inputs, done, route, q)
    elif queues.turns:
        q = queues
        slices, depth = len(ready), len(q.turns)
        given = np.full((len(q.links), slices, depth), -np.inf)  # (links, slices, turns)
        given[q.row, :, q.turn] = inputs[:, q.message].T
        each = np.broadcast_to(q.each, given.shape).reshape(len(q.links), -1)
        ran = np.cumsum(each, axis=1)  # (links, slices·turns): C
        done = ran + np.maximum(free[q.links][:, None], np.maximum.accumulate(
            given.reshape(len(q.links), -1) - (ran - each), axis=1))
        free[q.links] = done[:, -1]
        done = done.reshape(len(q.links), slices, depth)[q.row, :, q.turn].T  # (slices, e)
        carried = _carried(inputs, done, route, q)
    arrival = carried + latency
    written = arrival[:, write_of]  # (slices, writes)
    order = np.argsort(write_at, kind="stable")
    cells = write_at[order]
    first = _firsts(cells)  # each cell's first write
    if len(first) < len(cells):  # a cell written twice in the round: its latest arrival
        written = np.maximum.reduceat(written[:, order], first, axis=1)
        cells = cells[first]
    else:
        written = written[:, order]
    ready[:, cells] = np.maximum(ready[:, cells], written)
    return float(arrival.max())


def _loads(topology, overhead: np.ndarray, slices: int, used: np.ndarray, sent: np.ndarray,
           switched) -> tuple[np.ndarray, np.ndarray, int]:
    """A round's (links used, their bytes over every slice, its busiest link: bytes·β +
    overhead): ``used`` the links its messages cross (one slice's), ``sent`` their bytes."""
    if switched:  # few ranks (one switch's): counted on every link
        links = len(topology.link_names)
        load = np.bincount(used, weights=sent * slices, minlength=links).astype(float)
        messages = np.bincount(used, minlength=links) * float(slices)
        _switched_loads(switched, load, messages, topology, overhead, slices)
        busy = load * topology.beta + messages * overhead
        links_used = np.flatnonzero(load)
        return links_used, load[links_used], int(np.argmax(busy))
    links_used, which = np.unique(used, return_inverse=True)
    load = np.bincount(which, weights=sent * slices, minlength=len(links_used))
    busy = (load * topology.beta[links_used]
            + np.bincount(which, minlength=len(links_used)) * slices * overhead[links_used])
    return links_used, load, int(links_used[np.argmax(busy)]) if len(busy) else 0


def _patterns(loads: list[tuple], topology, group) -> tuple:
    """(rounds,) each round's pattern, the distinct (links, bytes) patterns, and with a
    ``group`` the (links,) link each link's bytes are those of (else None)."""
    index, patterns, pattern_of = {}, [], []
    for links_used, load in loads:
        key = (links_used.tobytes(), load.tobytes())
        if key not in index:
            index[key] = len(patterns)
            patterns.append((links_used, load))
        pattern_of.append(index[key])
    like = (None if group is None
            else topology.link_orbit(np.arange(len(topology.link_names))))
    return np.array(pattern_of, dtype=int), patterns, like
