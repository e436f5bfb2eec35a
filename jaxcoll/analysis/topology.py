"""Links in the model: a topology of directed links, each with its own α and β, ranks placed on
them, and :func:`simulate`, which prices a schedule on it round by round. No JAX in here.

A transfer from ``src`` to ``dst`` follows a route, a list of links. In a round it takes

    α of its route (the sum of its links' α)
    + the most any of its links is busy that round: (bytes on the link) · β_link
    + (bytes its receiver reduces that round) · γ,

so links shared by several transfers of a round split their bandwidth, and transfers on
disjoint links run at the same time (full duplex = two links, one each way). A round lasts as
long as its slowest transfer; rounds run one after another, as the schedule's lock-step does.
``runtime="pipelined"`` prices it as NCCL's and MSCCL's runtimes run it instead: in slices,
each transfer starting when its inputs and links are ready (:mod:`jaxcoll.analysis.pipelined`).

``concurrent=False`` prices a round as jaxcoll's executor runs it: one ``ppermute`` per matching
(:func:`~jaxcoll.ir.schedules.split_round`), one after another. On a :func:`switch` no transfer of
a matching shares a link, so that is exactly :func:`jaxcoll.cost` (tested for every schedule).

Presets: :func:`switch` (every rank one full-duplex port into a non-blocking switch, as on
NVSwitch), :func:`ring` and :func:`torus` (of any dimensions; links to neighbours only,
shortest-way routing, dimension by dimension), :func:`nodes` (GPUs on a switch inside each
node, NICs between nodes), :func:`shared` (one medium every message crosses: processes of
one host over loopback).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from jaxcoll.analysis import pipelined, protocols
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule, split_round

Routes = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (t,) src, (t,) dst -> (t, hops), -1 pad


@dataclass(frozen=True, eq=False)
class Topology:
    """``n`` ranks on directed links; ``routes(src, dst)`` gives the links each transfer uses.

    Made by the presets (:func:`switch`, :func:`ring`, :func:`torus`, :func:`nodes`,
    :func:`shared`, :func:`fully_connected`) and priced on by :func:`simulate`.

    Attributes:
      name: what it is called in :func:`simulate`'s and :func:`jaxcoll.synthesize`'s
        reports.
      n: the number of ranks (0 to n - 1), placed on the links by
        ``routes``.
      link_names: (links,) each directed link's name, e.g. "0->switch", in the order of
        ``alpha`` and ``beta``.
      alpha: (links,) seconds a message pays on the link (a route pays the sum of its
        links').
      beta: (links,) seconds per byte on the link; links shared by transfers of a round
        split their bandwidth.
      routes: ``routes(src, dst)``: (t,) sources and (t,) destinations to (t, hops)
        link indices, padded with -1.
      gamma: seconds per byte reduced (by the receiver, on top of its links' time); 0
        leaves reductions free.
      node_of: (n,) each rank's node: the cut the NICs cross (:func:`nodes`); None: no
        nodes.
      gpus_per_node: > 0: channels rotate each node's ranks (:meth:`channel_ranks`,
        :func:`simulate`'s ``channels``).
      assumptions: what the numbers assume, in words (link counts, bandwidths,
        routing).
      overhead: (links,) seconds each message keeps a link busy on top of its bytes
        (LogGP's gap): what a shared medium such as one host's cores pays per message;
        None: 0.
      levels: the sizes of the levels ``hierarchical`` runs on here, outermost first (a
        torus's dimensions, nodes' (n_nodes, gpus)); (): none.
      system: the real system it describes (a :class:`jaxcoll.analysis.systems.System`, set
        by :func:`jaxcoll.analysis.systems.cluster`), which :func:`jaxcoll.analysis.nccl.predict`
        needs; None: not one.
      switch_of: (n,) the switch each rank's port joins where that switch reduces (NVLS:
        :class:`~jaxcoll.ir.schedules.ThroughSwitch` runs among ranks of one), -1 where none
        does; None: no switch reduces.
      link_kinds: (links,) "nvlink" or "net" for each link, which NCCL's protocols' latencies
        tell apart (:func:`simulate`'s ``protocol``); None: every link "nvlink".
      period: > 0 where the ranks come in groups of ``period`` (nodes) that every permutation
        of the groups maps onto each other, links and all (rank x moved to group g's rank
        x mod period), as on :func:`nodes` and :func:`switch`: the pipelined runtime then
        prices a symmetric schedule at one group's ranks for all; 0: not known.
      link_orbit: ``link_orbit(links)``: (k,) link indices to (k,) the index of the link that
        stands for each under those permutations (group 0's; -1 stays -1); None where
        ``period`` is 0.
      sharp: the NICs' fabric reduces across nodes (InfiniBand SHARP, NCCL's CollNet): a
        :class:`~jaxcoll.ir.schedules.ThroughSwitch` whose ranks span nodes goes up each
        sender's NIC and down each receiver's (:meth:`operation_ports`).
    """

    name: str
    n: int
    link_names: tuple[str, ...]
    alpha: np.ndarray
    beta: np.ndarray
    routes: Routes
    gamma: float = 0.0
    node_of: np.ndarray | None = None
    gpus_per_node: int = 0
    assumptions: str = ""
    overhead: np.ndarray | None = None
    levels: tuple[int, ...] = ()
    system: object = None
    switch_of: np.ndarray | None = None
    link_kinds: tuple[str, ...] | None = None
    period: int = 0
    link_orbit: Callable[[np.ndarray], np.ndarray] | None = None
    sharp: bool = False

    def in_protocol(self, protocol) -> "Topology":
        """The topology as ``protocol`` (a :class:`jaxcoll.analysis.protocols.Protocol`) sees
        it: every link's β times the protocol's bytes on the wire per byte of data, its α
        (taken as Simple's) times NCCL's ring latency per step in the protocol over Simple's
        on that kind of link."""
        kinds = np.array(self.link_kinds or ("nvlink",) * len(self.link_names))
        simple = protocols.BY_NAME["Simple"]
        scale = np.ones(len(kinds))
        for kind in np.unique(kinds):
            scale[kinds == kind] = protocol.hop_latency(kind) / simple.hop_latency(kind)
        return replace(self, alpha=self.alpha * scale, beta=self.beta * protocol.wire)

    def switch_ports(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ranks,) the link each of ``ranks`` sends into its reducing switch by, and (ranks,)
        the one it receives from it by: the first and last link of its route to and from
        another rank of the switch (a switch of one rank: -1, no link)."""
        if self.switch_of is None:
            raise ValueError(f"{self.name!r} has no switch that reduces (NVLS): in-switch "
                             "operations cannot run on it")
        domain = self.switch_of[ranks]
        if (domain < 0).any():
            raise ValueError(f"{self.name!r}: rank {int(ranks[domain < 0][0])} is on no switch "
                             "that reduces")
        up, down = self._switch_ports()
        return up[ranks], down[ranks]

    def operation_ports(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ranks,) the link each of an in-switch operation's ``ranks`` sends up by, and
        (ranks,) the one it receives down by: its switch's ports where they are all on one
        switch that reduces (NVLS: :meth:`switch_ports`), else, on a fabric that reduces
        (``sharp``) where they span nodes, its NIC's way out and in (SHARP).

        Raises:
          ValueError: the ranks are on neither.
        """
        ranks = np.asarray(ranks, dtype=np.int64)
        domains = None if self.switch_of is None else set(self.switch_of[ranks].tolist())
        if domains is not None and len(domains) == 1 and -1 not in domains:
            return self.switch_ports(ranks)
        if self.sharp and self.node_of is not None and len(set(
                self.node_of[ranks].tolist())) > 1:
            away = (ranks + self.gpus_per_node) % self.n  # a rank of another node
            out, back = self.routes(ranks, away), _packed(self.routes(away, ranks))
            last = np.maximum((back >= 0).sum(axis=1) - 1, 0)
            return out[:, 0], back[np.arange(len(ranks)), last]
        where = ("none" if domains is None else f"switches {sorted(domains)} (-1: none)")
        raise ValueError(f"needs its ranks on one switch that reduces (NVLS), or across nodes "
                         f"on a fabric that reduces (SHARP); on {self.name!r} they are on "
                         f"{where}" + ("" if self.sharp else ", and its fabric does not "
                                       "reduce"))

    def _switch_ports(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`switch_ports` of every rank (-1 on no switch), computed once per topology:
        the first and last link of its route to and from another rank of its switch."""
        cached = self.__dict__.get("_ports")
        if cached is None:
            ranks = np.flatnonzero(self.switch_of >= 0)
            domains = self.switch_of[ranks]
            first, second = (np.full(int(domains.max(initial=-1)) + 1, -1) for _ in range(2))
            _, at = np.unique(domains, return_index=True)  # each switch's first rank
            first[domains[at]] = ranks[at]
            rest = np.delete(np.arange(len(ranks)), at)
            _, at = np.unique(domains[rest], return_index=True)  # and its second
            second[domains[rest][at]] = ranks[rest][at]
            mate = np.where(first[domains] != ranks, first[domains], second[domains])
            alone = mate < 0  # the only rank of its switch
            mate = np.where(alone, ranks, mate)
            out, back = self.routes(ranks, mate), _packed(self.routes(mate, ranks))
            last = np.maximum((back >= 0).sum(axis=1) - 1, 0)
            cached = (np.full(self.n, -1), np.full(self.n, -1))
            cached[0][ranks] = np.where(alone, -1, out[:, 0])
            cached[1][ranks] = np.where(alone, -1, back[np.arange(len(ranks)), last])
            object.__setattr__(self, "_ports", cached)
        return cached

    def route(self, src: int, dst: int) -> list[str]:
        """The names of the links a transfer from ``src`` to ``dst`` crosses."""
        hops = self.routes(np.array([src]), np.array([dst]))[0]
        return [self.link_names[link] for link in hops if link >= 0]

    def first_links(self, rank: int) -> np.ndarray:
        """The links a rank's messages can leave it by (its ports)."""
        others = np.array([r for r in range(self.n) if r != rank])
        return np.unique(self.routes(np.full_like(others, rank), others)[:, 0])

    def channel_ranks(self, channel: int) -> np.ndarray:
        """(n,) where channel ``channel`` puts each of the schedule's ranks: on :func:`nodes`,
        each node's GPUs rotated by the channel (so its rings leave a node by other NICs, as
        NCCL's channels do); elsewhere the same ranks."""
        ranks = np.arange(self.n)
        if not self.gpus_per_node:
            return ranks
        g = self.gpus_per_node
        return ranks // g * g + (ranks % g + channel) % g


@dataclass(frozen=True, eq=False)
class Simulation:
    """A schedule priced on a topology: the total, and per round its time, busiest link, bytes.

    Per round (per matching when not ``concurrent``; rounds with no transfer left out) its
    time, busiest link and links' bytes. What :func:`simulate` returns; ``str()`` says the
    total and the slowest round.

    Under ``runtime="pipelined"`` rounds overlap: ``seconds`` is the makespan (the last
    arrival), ``round_seconds`` how much later each round's last arrival (over all slices and
    channels) makes the end than the rounds before it did (0 where it ends before them; they
    still sum to ``seconds``), and the busiest link and loads are over the whole run.

    Attributes:
      seconds: the predicted time: the sum of ``round_seconds`` (rounds run one after
        another; pipelined: the makespan).
      round_seconds: (rounds,) each round's time: its slowest transfer's (rounds with no
        transfer left out; pipelined: above).
      busiest_link: (rounds,) the link busy longest that round (bytes·β + overhead),
        an index into the topology's ``link_names``.
      loads: (rounds,) the pattern of each round's link loads, and the patterns: (links,
        bytes) each (rounds that move the same bytes over the same links, as a ring's do,
        share one); read it with :meth:`link_bytes` and :meth:`round_links`.
      topology: the :class:`Topology` it was priced on (its name and links name the
        report's).
      like: (links,) where one node's links stood for all (a symmetric round on nodes:
        :mod:`jaxcoll.analysis.pipelined`), the link each link's bytes are those of; None:
        every link as it is.
      grouped: the patterns of ``loads`` that name only those standing links (every one
        under ``runtime="pipelined"`` when ``like`` is set).
    """

    seconds: float
    round_seconds: np.ndarray
    busiest_link: np.ndarray
    loads: tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]] = field(repr=False)
    topology: Topology = field(repr=False)
    like: np.ndarray | None = field(default=None, repr=False)
    grouped: frozenset[int] | None = field(default=None, repr=False)

    def link_bytes(self) -> np.ndarray:
        """(links,) bytes each link carries over the whole run."""
        pattern_of, patterns = self.loads
        rounds = np.bincount(pattern_of, minlength=len(patterns))  # (patterns,)
        total, standing = (np.zeros(len(self.topology.link_names)) for _ in range(2))
        for index, ((links, nbytes), count) in enumerate(zip(patterns, rounds)):
            (standing if self._stands(index) else total)[links] += count * nbytes
        return total if self.like is None else total + standing[self.like]

    def _stands(self, pattern: int) -> bool:
        """True where a pattern's links stand for their like in every group."""
        return self.like is not None and (self.grouped is None or pattern in self.grouped)

    def round_links(self, round_index: int) -> dict[str, float]:
        """The links busy in one round, with their bytes."""
        pattern_of, patterns = self.loads
        links, nbytes = patterns[pattern_of[round_index]]
        if self._stands(pattern_of[round_index]):  # every link whose like is one of them
            every = np.flatnonzero(np.isin(self.like, links))
            links, nbytes = every, nbytes[np.searchsorted(links, self.like[every])]
        return {self.topology.link_names[k]: float(b) for k, b in zip(links, nbytes)}

    def __str__(self) -> str:
        if not len(self.round_seconds):
            return "0 µs: no rounds"
        slowest = int(np.argmax(self.round_seconds))
        busiest = self.topology.link_names[self.busiest_link[slowest]]
        return (f"{self.seconds * 1e6:.1f} µs over {len(self.round_seconds)} rounds on "
                f"{self.topology.name}; slowest round {slowest} "
                f"({self.round_seconds[slowest] * 1e6:.1f} µs, busiest link {busiest})")


# ----------------------------------------------------------------------------- simulating

def chunk_bytes(schedule: Schedule, nbytes: float) -> float:
    """Bytes in one of the schedule's chunks when a rank's buffer is ``nbytes``.

    Args:
      schedule: a :class:`~jaxcoll.ir.schedules.Schedule`.
      nbytes: the bytes of a rank's buffer.

    Returns:
      ``nbytes`` over the schedule's chunks, a float (alltoall's 2n chunks hold its input
      twice: over n chunks of data).
    """
    twice = schedule.collective and RECORDS[schedule.collective].schedule_blocks == "2n"
    return nbytes / (schedule.n_chunks // 2 if twice else schedule.n_chunks)


_PHASES: dict[tuple[int, bool], tuple] = {}  # (id(schedule), concurrent) -> (weakref, phases)
# (schedules built by build_schedule live as long as its cache: bench/scale.py clears it)


def _phases(schedule: Schedule, concurrent: bool) -> list[tuple]:
    """Per round (or per matching), (pattern, arrays, switched): ``arrays()`` gives the (src,
    dst, chunk count, reduce) arrays of its transfers (and its in-switch operations, where
    ``switched``); phases of one ``pattern`` (not None) have the same arrays (symmetric rounds
    that send as many chunks to the same partners). Cached per schedule object (a 1024-rank ring has two million
    transfers). A round's in-switch operations are one phase with its transfers (they run at
    the same time)."""
    key = (id(schedule), concurrent)
    cached = _PHASES.get(key)
    if cached is not None and cached[0]() is schedule:
        return cached[1]
    phases = []
    for round_ in schedule.rounds:
        if round_.switched:
            phases.append((None, lambda arrays=_arrays(round_.transfers), ops=round_.switched:
                           (*arrays, ops), True))
            continue
        if round_.symmetry is not None:  # every rank r sends rank 0's transfers moved to r
            shapes = [(t.dst, len(t.chunks), t.reduce) for t in round_.base]
            groups = [shapes] if concurrent else [[shape] for shape in shapes]
            phases += [((round_.symmetry, tuple(group)),
                        lambda group=group, symmetry=round_.symmetry: _spread(group, symmetry),
                        False) for group in groups if group]
            continue
        groups = [list(round_)] if concurrent else split_round(round_)
        phases += [(None, lambda arrays=_arrays(group): arrays, False)
                   for group in groups if group]
    _PHASES[key] = (weakref.ref(schedule), phases)
    weakref.finalize(schedule, _PHASES.pop, key, None)  # forgotten with the schedule
    return phases


def _arrays(transfers) -> tuple[np.ndarray, ...]:
    """(src, dst, chunk count, reduce) arrays of ``transfers``."""
    columns = list(zip(*[(t.src, t.dst, len(t.chunks), t.reduce) for t in transfers])) or [()] * 4
    return tuple(np.array(column, dtype=kind) for column, kind in
                 zip(columns, (np.int64, np.int64, np.float64, bool)))


def _spread(shapes, symmetry) -> tuple[np.ndarray, ...]:
    """(src, dst, chunk count, reduce) arrays of rank 0's transfers, given as (dst, chunk count,
    reduce) ``shapes``, made by every rank."""
    columns = [(*symmetry.partners(dst), np.full(symmetry.n_ranks, float(count)),
                np.full(symmetry.n_ranks, reduce))
               for dst, count, reduce in shapes]
    return tuple(map(np.concatenate, zip(*columns)))


def simulate(schedule: Schedule, nbytes: float, topology: Topology, *,
             concurrent: bool = True, channels: int = 1, gamma: float | None = None,
             runtime: str = "lockstep", slices: int | None = None,
             protocol: str | None = None) -> Simulation:
    """Predicted time of ``schedule`` on ``topology``, with contention on shared links.

    For a buffer of ``nbytes`` per rank (as :func:`jaxcoll.cost` counts it), round by round.
    In a round a transfer takes

        α of its route (the sum of its links' α)
        + the most any of its links is busy that round: (bytes on the link)·β_link
        + (bytes its receiver reduces that round)·γ,

    and the round lasts as long as its slowest transfer (the module's docstring).

    Args:
      schedule: the schedule to price, from :func:`jaxcoll.schedule` or any
        :class:`~jaxcoll.ir.schedules.Schedule`, on ``topology.n`` ranks.
      nbytes: the whole buffer one rank works on, as :func:`jaxcoll.cost` takes it
        (the output for allgather and gather).
      topology: the links, e.g. :func:`switch`, :func:`ring`, :func:`torus`,
        :func:`nodes` (or :mod:`jaxcoll.analysis.systems`' real ones).
      concurrent: every transfer of a round at once (what one fused kernel can do);
        False: one matching after another (what jaxcoll's executor does: one
        ``ppermute`` each; on a :func:`switch` exactly :func:`jaxcoll.cost`).
      channels: run the schedule ``channels`` times at once on ``nbytes / channels``
        each, channel c on :meth:`Topology.channel_ranks` (c), as NCCL splits a
        collective over rings.
      gamma: seconds per byte reduced, instead of the topology's; None: the
        topology's ``gamma``.
      runtime: ``"lockstep"`` (jaxcoll's XLA executor: a round starts when the one before
        has ended everywhere, each paying its α) or ``"pipelined"`` (NCCL's and MSCCL's:
        the buffer in ``slices`` slices, each transfer of each slice crossing each of its
        links once its inputs have reached its sender and that link is free, α paid as
        latency; the exact rules: :mod:`jaxcoll.analysis.pipelined`). Both price one node's
        ranks for all where the schedule and the topology allow (a symmetric round, or
        pipelined a symmetric schedule, on :func:`nodes` or a :func:`switch`), the same
        numbers as every rank's transfers; pipelined prices at most 2**22 transfers, 2**26
        transfers x slices x channels.
      slices: ``runtime="pipelined"`` only: the equal slices each channel's buffer is cut
        into; None: one per step of the protocol's buffer in a channel's chunk (Simple's:
        512 KiB, its 4 MiB buffer over NCCL_STEPS = 8), 1 to 64.
      protocol: ``runtime="pipelined"`` only: NCCL's "LL", "LL128" or "Simple" (any case):
        each link's β times its bytes on the wire per byte of data (2, 128/120, 1), its α
        (the topology's is Simple's) times NCCL's ring step latency in the protocol over
        Simple's on that kind of link (:attr:`Topology.link_kinds`; tuning.cc
        hwLatencies: NVLink 0.6, 1.9, 3.4 µs; network 2.7, 4.0, 14 µs), and the default
        slice its step (:mod:`jaxcoll.analysis.protocols`); None: Simple.

    Returns:
      A :class:`Simulation` — the total seconds, and per round its time, its busiest link
      and the links' bytes.

    Raises:
      ValueError: the schedule's ranks are not the topology's; ``channels`` < 1;
        ``channels`` > 1 for a rooted collective (each channel's ranks are rotated, which
        would move its root); an unknown ``runtime``; ``slices`` not an int >= 1, or given
        lock-step; an unknown ``protocol``, or one given lock-step; ``concurrent=False``
        pipelined; or past the pipelined engine's limits; an in-switch operation
        (:class:`~jaxcoll.ir.schedules.ThroughSwitch`) whose ranks are not on one switch
        that reduces.

    Examples:
      >>> import jaxcoll
      >>> from jaxcoll.analysis.topology import ring, switch
      >>> allreduce = jaxcoll.schedule("allreduce", "ring", 8)
      >>> links = switch(8, alpha=1e-6, beta=1e-9)
      >>> print(jaxcoll.simulate(allreduce, 1 << 20, links))
      1849.0 µs over 14 rounds on switch; slowest round 0 (132.1 µs, busiest link 0->switch)
      >>> print(jaxcoll.cost(allreduce, 1 << 20, alpha=1e-6, beta=1e-9))  # the same
      1849.0 µs: 14 messages; the busiest rank sends 1835008 B and reduces 917504 B
      >>> doubling = jaxcoll.schedule("allgather", "recursive_doubling", 8)
      >>> print(jaxcoll.simulate(doubling, 1 << 20, links))
      920.5 µs over 3 rounds on switch; slowest round 2 (525.3 µs, busiest link 0->switch)
      >>> on_a_ring = ring(8, alpha=1e-6, beta=1e-9)  # its last round's partners are 4 hops
      >>> print(jaxcoll.simulate(doubling, 1 << 20, on_a_ring))  # apart and share links
      2759.5 µs over 3 rounds on ring of 8; slowest round 2 (2101.2 µs, busiest link 0->1)
    """
    if schedule.n_ranks != topology.n:
        raise ValueError(f"simulate: the schedule has {schedule.n_ranks} ranks, the topology "
                         f"{topology.name!r} {topology.n}")
    if channels < 1:
        raise ValueError(f"simulate: channels={channels!r}, must be >= 1")
    if channels > 1 and schedule.collective and RECORDS[schedule.collective].rooted:
        raise ValueError(f"simulate: channels={channels} moves a {schedule.collective}'s root "
                         "(each channel's ranks are rotated): channels are for unrooted ones")
    if runtime not in pipelined.RUNTIMES:
        raise ValueError(f"simulate: runtime={runtime!r}, must be one of {pipelined.RUNTIMES}")
    if runtime == "lockstep" and slices is not None:
        raise ValueError(f"simulate: slices={slices!r} is for runtime='pipelined' (lock-step "
                         "runs the whole buffer in every round)")
    if runtime == "lockstep" and protocol is not None:
        raise ValueError(f"simulate: protocol={protocol!r} is for runtime='pipelined' (lock-step "
                         "is jaxcoll's executor: XLA's collective-permutes, no NCCL protocol)")
    if runtime == "pipelined" and not concurrent:
        raise ValueError("simulate: concurrent=False is the lock-step executor's order (one "
                         "ppermute per matching); runtime='pipelined' needs concurrent=True")
    gamma = topology.gamma if gamma is None else gamma
    chunk = chunk_bytes(schedule, nbytes) / channels
    placements = [topology.channel_ranks(c) for c in range(channels)]
    if runtime == "pipelined":
        wire = protocols.named("Simple" if protocol is None else protocol, "simulate: protocol")
        slices = pipelined.default_slices(chunk, wire.step_bytes) if slices is None else slices
        pipelined.check_slices(slices)
        seconds, _, times, busiest, (*loads, like) = pipelined.run(
            schedule, chunk, topology.in_protocol(wire), placements, int(slices), gamma)
        return Simulation(seconds, times, busiest, tuple(loads), topology, like)
    return _lockstep(schedule, topology, placements, chunk, gamma, concurrent)


def pipelined_bounds(schedule: Schedule, nbytes: float, topology: Topology,
                     **kwargs) -> tuple[float, float]:
    """Bounds on ``simulate(..., runtime="pipelined")`` from the schedule's phases priced
    apart, for a schedule the pipelined engine cannot price whole.

    The phases are the schedule's runs of rounds alike in having a symmetry or not (a
    composite's binomial tree, written out, then its ring, which one node's ranks price for
    all). The engine's times only grow with its inputs (max and +, each link's messages in
    a fixed order), so the whole run takes at least its longest phase run alone from time 0
    and at most the phases one after another, each from when the one before has ended
    everywhere. At 32,768 ranks a binomial scatter then a ring allgather is 10^9 transfers
    whole; its phases are 32,767 and a node's 8 ranks' 262,136.

    Args:
      schedule: as :func:`simulate`.
      nbytes: as :func:`simulate`.
      topology: as :func:`simulate`.
      **kwargs: :func:`simulate`'s other arguments (``channels``, ``gamma``, ``slices``,
        ``protocol``); the runtime is ``"pipelined"``.

    Returns:
      (lower, upper) seconds, equal (the price) for a schedule of one phase.

    Raises:
      ValueError: as :func:`simulate`, a phase past the pipelined engine's limits included.
    """
    rounds = schedule.rounds
    cuts = [0] + [k for k in range(1, len(rounds))
                  if (rounds[k].symmetry is None) != (rounds[k - 1].symmetry is None)]
    seconds = [simulate(replace(schedule, rounds=rounds[first:end],
                                name=f"{schedule.name}, rounds {first}..{end - 1}"),
                        nbytes, topology, runtime="pipelined", **kwargs).seconds
               for first, end in zip(cuts, cuts[1:] + [len(rounds)])]
    return max(seconds, default=0.0), sum(seconds)


def _lockstep(schedule: Schedule, topology: Topology, placements, chunk: float, gamma: float,
              concurrent: bool) -> Simulation:
    """:func:`simulate` lock-step: phase by phase, each distinct symmetric phase priced once
    (from one node's ranks where the topology allows), the phases written out all at once."""
    seen: dict = {}  # a phase's pattern -> its (time, busiest link, pattern index)
    times, busiest, pattern_of, patterns, grouped = [], [], [], [], []
    written = []  # (position, arrays) of the phases written out, priced all at once below
    period = pipelined.group_period(topology, placements, schedule.n_ranks)
    standing: dict = {}  # a symmetric phase's pattern -> its positions, priced from one
    for pattern, arrays, switched in _phases(schedule, concurrent):  # group's ranks below
        priced = seen.get(pattern) if pattern is not None else None
        if priced is None and pattern is None and not switched:
            written.append((len(times), arrays()))
            priced = (0.0, 0, -1)
        elif priced is None and pattern is not None and period and pipelined.fits(
                pattern[0], period):  # one group's ranks stand for all
            standing.setdefault(pattern, []).append(len(times))
            priced = (0.0, 0, -1)
        elif priced is None:
            took, link, load = _price(topology, placements, chunk, gamma, *arrays())
            used = np.flatnonzero(load)
            patterns.append((used, load[used]))
            priced = (took, link, len(patterns) - 1)
            if pattern is not None:
                seen[pattern] = priced
        times.append(priced[0])
        busiest.append(priced[1])
        pattern_of.append(priced[2])
    for positions, (took, link, used, load) in zip(standing.values(), _price_groups(
            topology, placements, chunk, gamma, list(standing), period)):
        grouped.append(len(patterns))
        patterns.append((used, load))
        for position in positions:
            times[position], busiest[position] = took, link
            pattern_of[position] = len(patterns) - 1
    for (position, _), (took, link, used, load) in zip(written, _price_many(
            topology, placements, chunk, gamma, [arrays for _, arrays in written])):
        times[position], busiest[position] = took, link
        pattern_of[position] = len(patterns)
        patterns.append((used, load))
    like = topology.link_orbit(np.arange(len(topology.link_names))) if grouped else None
    return Simulation(float(np.sum(times)), np.array(times), np.array(busiest, dtype=int),
                      (np.array(pattern_of, dtype=int), patterns), topology, like,
                      frozenset(grouped))


def _price_groups(topology: Topology, placements, chunk: float, gamma: float,
                  patterns: list[tuple], period: int) -> list[tuple]:
    """:func:`_price` of symmetric phases, each from one group's ranks' transfers: per
    pattern (symmetry, each base transfer's (dst, chunk count, reduce)), (seconds, its
    busiest link, group 0's links it loads, their bytes: each standing for its like in every
    group). Every group's transfers are group 0's moved, on links moved alike: the same loads
    and times (what ``pipelined`` relies on too). Phases that differ only in their partners
    are routed all at once, and those that then cross the same links to the same places in
    their groups priced once."""
    ranks = np.arange(period)
    out: list = [None] * len(patterns)
    kinds: dict = {}  # (symmetry, chunk counts and reduces) -> the patterns of that kind
    for i, (symmetry, shapes) in enumerate(patterns):
        kinds.setdefault((symmetry, tuple((k, r) for _, k, r in shapes)), []).append(i)
    for (symmetry, counts), members in kinds.items():
        ends = np.array([[d for d, _, _ in patterns[i][1]] for i in members])  # (p, shapes)
        dst = symmetry.rank(ends[:, :, None], ranks)  # (p, shapes, period): each rank's partner
        src = np.broadcast_to(ranks, dst.shape)
        src, dst = (np.stack([place[ranks_] for place in placements], axis=1).reshape(
            len(members), -1) for ranks_ in (src, dst))  # (p, m): channel, shape, rank
        m = src.shape[1]
        route = topology.link_orbit(topology.routes(src.ravel(), dst.ravel()))  # (p·m, hops)
        on = (route >= 0) & (src != dst).ravel()[:, None]
        rows = np.concatenate([route.reshape(len(members), -1), on.reshape(len(members), -1),
                               dst % period], axis=1)
        _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        count = np.repeat([float(k) for k, _ in counts], period)
        sent = np.tile(count * chunk, len(placements) * len(first))
        reduce = np.tile(np.repeat([r for _, r in counts], period), len(placements) * len(first))
        at = (first[:, None] * m + np.arange(m)).ravel()  # the distinct phases' messages
        priced = _priced(topology, route[at], on[at], sent, reduce, (dst % period)[first].ravel(),
                         np.repeat(np.arange(len(first)), m), len(first), gamma)
        for j, i in enumerate(members):
            out[i] = priced[inverse.ravel()[j]]
    return out


def _price_many(topology: Topology, placements, chunk: float, gamma: float,
                phases: list[tuple]) -> list[tuple]:
    """:func:`_price` of many phases of transfers at once (each round's time is its own): per
    phase (seconds, busiest link, links used, their bytes)."""
    if not phases:
        return []
    channels = len(placements)
    sizes = np.array([len(arrays[0]) for arrays in phases])
    phase = np.tile(np.repeat(np.arange(len(phases)), sizes), channels)  # (t·channels,)
    src, dst, count, reduce = (np.concatenate([arrays[k] for arrays in phases])
                               for k in range(4))
    src, dst = (np.concatenate([place[ranks] for place in placements]) for ranks in (src, dst))
    route = topology.routes(src, dst)  # (t, hops), -1 past a route's end
    on = (route >= 0) & (src != dst)[:, None]
    return _priced(topology, route, on, np.tile(count * chunk, channels),
                   np.tile(reduce, channels), dst, phase, len(phases), gamma)


def _priced(topology: Topology, route, on, sent, reduce, receiver, phase, phases: int,
            gamma: float) -> list[tuple]:
    """Per phase (seconds, busiest link, links used, their bytes) of messages on ``route``
    (where ``on``), of ``sent`` bytes to ``receiver``, each in its ``phase`` of ``phases``:
    a phase lasts as long as its slowest message, its route's α + its busiest link's time +
    what its receiver reduces that phase·γ."""
    links = len(topology.link_names)
    key = phase[:, None] * links + np.where(on, route, 0)  # (t, hops): (phase, link)
    pairs, which = np.unique(key[on], return_inverse=True)  # sorted by phase, then link
    load = np.bincount(which, weights=np.broadcast_to(sent[:, None], route.shape)[on],
                       minlength=len(pairs))
    busy = load * topology.beta[pairs % links]
    if topology.overhead is not None:
        busy = busy + np.bincount(which, minlength=len(pairs)) * topology.overhead[pairs % links]
    hop_busy = np.zeros(route.shape)
    hop_busy[on] = busy[which]
    receivers, at = np.unique(phase * topology.n + receiver, return_inverse=True)
    reduced = np.bincount(at, weights=reduce * sent, minlength=len(receivers))[at]
    took = (hop_busy.max(axis=1) + np.where(on, topology.alpha[np.where(on, route, 0)],
                                            0.0).sum(axis=1) + reduced * gamma)
    longest = np.full(phases, 0.0)
    np.maximum.at(longest, phase, took)
    bounds = np.searchsorted(pairs // links, np.arange(phases + 1))
    out = []
    for k in range(phases):
        lo, hi = bounds[k], bounds[k + 1]
        mine = slice(lo, hi)
        link = int(pairs[lo + np.argmax(busy[mine])] % links) if hi > lo else 0
        kept = load[mine] > 0
        out.append((float(longest[k]), link, pairs[mine][kept] % links, load[mine][kept]))
    return out


def _price(topology: Topology, placements, chunk: float, gamma: float, src, dst, count,
           reduce, switched=()) -> tuple[float, int, np.ndarray]:
    """One phase on the topology: (seconds, its busiest link, (links,) bytes on each)."""
    channels = len(placements)
    src = np.concatenate([place[src] for place in placements])
    dst = np.concatenate([place[dst] for place in placements])
    sent = np.tile(count * chunk, channels)  # (t,) bytes of each transfer
    reduce = np.tile(reduce, channels)
    route = topology.routes(src, dst)  # (t, hops), -1 past a route's end
    on = (route >= 0) & (src != dst)[:, None]  # a local transfer crosses no link
    load = np.bincount(route[on], weights=np.broadcast_to(sent[:, None], route.shape)[on],
                       minlength=len(topology.link_names))  # (links,)
    busy = load * topology.beta  # (links,) seconds each link needs this round
    if topology.overhead is not None:
        messages = np.bincount(route[on], minlength=len(topology.link_names))  # (links,)
        busy = busy + messages * topology.overhead
    reduced = np.bincount(dst, weights=reduce * sent, minlength=topology.n)  # (n,) by dst
    if switched:
        ports, sent, trips = switch_loads(topology, placements, chunk, switched)
        up = ports >= 0
        load = load + np.bincount(ports[up], minlength=len(topology.link_names),
                                  weights=np.broadcast_to(sent[:, None], ports.shape)[up])
        busy = load * topology.beta + (0.0 if topology.overhead is None else
                                       np.bincount(np.r_[route[on], ports[up]],
                                                   minlength=len(busy)) * topology.overhead)
        switch_took = (np.where(up, busy[ports], 0.0).max(axis=1)  # (ops x ranks,)
                       + np.where(up, topology.alpha[ports], 0.0).sum(axis=1) * trips)
    took = (np.where(on, busy[route], 0.0).max(axis=1)
            + np.where(on, topology.alpha[route], 0.0).sum(axis=1) + reduced[dst] * gamma)
    if switched:
        took = np.r_[took, switch_took]
    return float(took.max(initial=0.0)), int(np.argmax(busy)), load


def switch_loads(topology: Topology, placements, chunk: float, switched
                 ) -> tuple[np.ndarray, np.ndarray]:
    """In-switch operations on the topology: (m, 2) the up link and the down link of each
    (operation, rank) pair, -1 where it has none (a sender that does not receive, a receiver
    that does not send, a switch of one rank; an operation's ``via`` rank a pair more), (m,)
    the bytes each carries, and (m,) its operation's trips through the switch (2 with a
    ``via``: α twice). Raises ValueError where an operation's ranks are not all on one switch
    that reduces."""
    ups, downs, sent, trips = [], [], [], []
    for place in placements:
        for op in switched:
            senders, receivers = place[list(op.senders)], place[list(op.receivers)]
            via = place[[op.via]] if op.via is not None else senders[:0]
            ranks = np.union1d(np.union1d(senders, receivers), via)
            try:
                up, down = topology.operation_ports(ranks)
            except ValueError as error:
                raise ValueError(f"simulate: {op} {error}") from None
            ups.append(np.where(np.isin(ranks, senders), up, -1))
            downs.append(np.where(np.isin(ranks, receivers), down, -1))
            if len(via):  # its ports carry the sum once more, each way
                ups[-1], downs[-1] = (np.r_[column, ports[np.searchsorted(ranks, via)]]
                                      for column, ports in ((ups[-1], up), (downs[-1], down)))
            sent.append(np.full(len(ups[-1]), len(op.chunks) * chunk))
            trips.append(np.full(len(ups[-1]), 2 if len(via) else 1))
    return (np.stack([np.concatenate(ups), np.concatenate(downs)], axis=1),
            np.concatenate(sent), np.concatenate(trips))


# ----------------------------------------------------------------------------- presets

def _along_ring(start: np.ndarray, stop: np.ndarray, size: int, both_ways: bool = True):
    """The shortest way round a ring of ``size``: (positions left, direction +1/-1, hops),
    positions (t, most hops) of the link-owning rank at each hop, -1 past the end."""
    ahead = (stop - start) % size
    forward = ahead <= size - ahead if both_ways else np.ones_like(ahead, dtype=bool)
    hops = np.where(forward, ahead, (size - ahead) % size)
    step = np.where(forward, 1, -1)
    k = np.arange(max(int(hops.max(initial=0)), 1))
    positions = (start[:, None] + step[:, None] * k[None, :]) % size  # (t, most hops)
    return np.where(k[None, :] < hops[:, None], positions, -1), step, hops


def switch(n: int, *, alpha: float, beta: float, gamma: float = 0.0,
           name: str = "switch", reduces: bool = False) -> Topology:
    """Every rank one full-duplex port (an up link and a down link) into a non-blocking switch.

    Args:
      n: the number of ranks.
      alpha: seconds a message pays in all (α/2 on each of its two links).
      beta: seconds per byte on each link (each port's up and down link).
      gamma: seconds per byte reduced (by the receiver, on top of its links' time); 0 leaves
        reductions free.
      name: what the topology is called in reports.
      reduces: the switch adds what ranks send into it and multicasts the sum (NVLS), for
        :class:`~jaxcoll.ir.schedules.ThroughSwitch`; default False.

    Returns:
      The :class:`Topology`, in which a message pays α in all and β per byte.
    """
    names = tuple(f"{r}->switch" for r in range(n)) + tuple(f"switch->{r}" for r in range(n))
    return Topology(name, n, names, np.full(2 * n, alpha / 2), np.full(2 * n, float(beta)),
                    lambda src, dst: np.stack([src, n + dst], axis=1), gamma,
                    assumptions=f"{n} ranks, one full-duplex port each into a non-blocking "
                                f"switch{' that reduces (NVLS)' if reduces else ''}; "
                                f"α={alpha:.3g} s per message, {1 / beta / 1e9:.4g} GB/s "
                                "each way per port",
                    switch_of=np.zeros(n, dtype=np.int64) if reduces else None, period=1,
                    link_orbit=lambda links: np.where(links < 0, -1, links // n * n))


def shared(n: int, *, alpha: float, beta: float, overhead: float = 0.0, gamma: float = 0.0,
           name: str = "one host") -> Topology:
    """n ranks on one medium every message crosses.

    Such as processes of one machine over loopback (their cores and memory are the wire).

    Args:
      n: the number of ranks.
      alpha: seconds per round, on the one link.
      beta: seconds per byte of the round's bytes.
      overhead: seconds each message keeps the medium busy on top of its bytes.
      gamma: seconds per byte reduced (by the receiver, on top of its links' time); 0 leaves
        reductions free.
      name: what the topology is called in reports.

    Returns:
      The :class:`Topology`, one link; a round takes α + (its messages)·overhead + (its
      bytes)·β, whatever ranks they join.
    """
    return Topology(name, n, ("host",), np.array([float(alpha)]), np.array([float(beta)]),
                    lambda src, dst: np.zeros((len(src), 1), dtype=np.int64), gamma,
                    assumptions=f"{n} ranks sharing one medium: α={alpha:.3g} s per round, "
                                f"{overhead:.3g} s per message, {beta:.3g} s per byte",
                    overhead=np.array([float(overhead)]))


def fully_connected(n: int, *, alpha: float, beta: float, gamma: float = 0.0,
                    name: str = "") -> Topology:
    """A link each way between every two ranks (AMD's Infinity Fabric among a node's GPUs).

    Args:
      n: the number of ranks.
      alpha: seconds a message pays on its link.
      beta: seconds per byte on each link.
      gamma: seconds per byte reduced (by the receiver, on top of its links' time); 0 leaves
        reductions free.
      name: what the topology is called in reports; "": "{n} fully connected".

    Returns:
      The :class:`Topology`, in which a message crosses its pair's own link, paying α and β
      per byte on it.
    """
    # link (src, dst) at index src·n + dst
    names = tuple(f"{src}->{dst}" for src in range(n) for dst in range(n))
    return Topology(name or f"{n} fully connected", n, names, np.full(n * n, float(alpha)),
                    np.full(n * n, float(beta)),
                    lambda src, dst: (src * n + dst)[:, None], gamma,
                    assumptions=f"{n} ranks, a link each way between every two; α={alpha:.3g} "
                                f"s, {1 / beta / 1e9:.4g} GB/s each way per link")


def ring(n: int, *, alpha: float, beta: float, gamma: float = 0.0,
         bidirectional: bool = True) -> Topology:
    """Ranks on a ring of links to their neighbours, messages routed the shorter way round.

    Args:
      n: the number of ranks.
      alpha: seconds a message pays per hop.
      beta: seconds per byte on each link.
      gamma: seconds per byte reduced (by the receiver, on top of its links' time); 0 leaves
        reductions free.
      bidirectional: links both ways (full duplex); False: one way only, every message going
        forwards.

    Returns:
      The :class:`Topology`, called "ring of {n}", α per hop.
    """
    back = " (back)" if n == 2 else ""  # two ranks: two links each way
    names = tuple(f"{r}->{(r + 1) % n}" for r in range(n)) + \
        tuple(f"{r}->{(r - 1) % n}{back}" for r in range(n))

    def routes(src, dst):
        positions, step, _ = _along_ring(src, dst, n, bidirectional)
        return np.where(positions >= 0, positions + np.where(step < 0, n, 0)[:, None], -1)

    kind = "full-duplex" if bidirectional else "one-way"
    return Topology(f"ring of {n}", n, names, np.full(2 * n, float(alpha)),
                    np.full(2 * n, float(beta)), routes, gamma,
                    assumptions=f"{n} ranks on a {kind} ring; α={alpha:.3g} s per hop, "
                                f"{1 / beta / 1e9:.4g} GB/s per link each way")


def torus(*dims: int, alpha: float, beta: float, gamma: float = 0.0) -> Topology:
    """A torus of any dimensions, ``torus(rows, cols, ...)`` or ``torus(x, y, z, ...)``.

    Full-duplex links to both neighbours along each dimension; messages go along the innermost
    dimension first (the row), then outwards, the shorter way each.

    Args:
      *dims: the sizes of the dimensions, outermost first, ints >= 1 (rank row-major in
        ``dims``).
      alpha: seconds a message pays per hop.
      beta: seconds per byte on each link.
      gamma: seconds per byte reduced (by the receiver, on top of its links' time); 0 leaves
        reductions free.

    Returns:
      The :class:`Topology`, α per hop, whose ``levels`` are ``dims``.

    Raises:
      ValueError: ``dims`` is empty, or one of them is not an int >= 1.
    """
    _check_dims(dims)
    n, k = int(np.prod(dims)), len(dims)
    strides = [int(np.prod(dims[d + 1:])) for d in range(k)]
    ways = [_WAYS[k - 1 - d] if k - 1 - d < len(_WAYS) else (f"dim{d}+", f"dim{d}-")
            for d in range(k)]  # link 2k·r + 2(k-1-d) + (backwards): rank r, dimension d
    names = tuple(f"{r}->{way}" for r in range(n) for d in reversed(range(k)) for way in ways[d])

    def routes(src, dst):
        hops = []
        for d in reversed(range(k)):  # innermost first: outer coordinates still src's
            here = src // strides[d] % dims[d]
            along, step, _ = _along_ring(here, dst // strides[d] % dims[d], dims[d])
            others = (src // (strides[d] * dims[d]) * strides[d] * dims[d]  # outer: src's
                      + dst % strides[d])  # inner: dst's, already travelled
            owner = others[:, None] + along * strides[d]  # (t, most hops) rank owning each hop
            hops.append(np.where(along >= 0, 2 * k * owner + 2 * (k - 1 - d)
                                 + np.where(step > 0, 0, 1)[:, None], -1))
        return _packed(np.concatenate(hops, axis=1))

    shape = "x".join(map(str, dims))
    return Topology(f"{shape} torus", n, names, np.full(2 * k * n, float(alpha)),
                    np.full(2 * k * n, float(beta)), routes, gamma, levels=tuple(dims),
                    assumptions=f"{shape} torus, full-duplex links to {2 * k} neighbours, "
                                f"innermost dimension first routing; α={alpha:.3g} s per hop, "
                                f"{1 / beta / 1e9:.4g} GB/s per link each way")


# each dimension's two ways, innermost dimension first (a 2-D torus: east/west along a row)
_WAYS = (("east", "west"), ("south", "north"), ("up", "down"))


def _check_dims(dims) -> None:
    if not dims or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1
                       for d in dims):
        raise ValueError(f"torus: dims={dims!r}, must be one or more ints >= 1, the sizes of "
                         "the dimensions (torus(4, 4, ...), torus(2, 2, 2, ...))")


def _packed(route: np.ndarray) -> np.ndarray:
    """Each row's links first, its -1 padding last (a route's first link is its port)."""
    order = np.argsort(route < 0, axis=1, kind="stable")
    return np.take_along_axis(route, order, axis=1)


def nodes(n_nodes: int, gpus: int, *, nvlink: tuple[float, float], nic: tuple[float, float],
          nics: int | None = None, gamma: float = 0.0, name: str = "",
          nvls: bool = False, sharp: bool = False) -> Topology:
    """``n_nodes`` nodes of ``gpus`` GPUs (rank = node·gpus + gpu).

    Inside a node: a switch. Between nodes: GPU g sends and receives through its node's NIC
    g·nics // gpus, on a non-blocking fabric.

    Args:
      n_nodes: the number of nodes.
      gpus: the GPUs in each node.
      nvlink: (α, β) inside a node, on the switch: seconds per message (α/2 on each of its
        two links) and seconds per byte per GPU each way.
      nic: (α, β) between nodes, per NIC each way.
      nics: the NICs per node; None: one per GPU (a rail-optimised node).
      gamma: seconds per byte reduced (by the receiver, on top of its links' time); 0 leaves
        reductions free.
      name: what the topology is called in reports; "": "{n_nodes} nodes x {gpus} GPUs".
      nvls: each node's switch adds what its GPUs send into it and multicasts the sum
        (NVLink SHARP), for :class:`~jaxcoll.ir.schedules.ThroughSwitch`; default False.
      sharp: the fabric between the nodes adds what the NICs send into it and multicasts
        the sum (InfiniBand SHARP, NCCL's CollNet), for a
        :class:`~jaxcoll.ir.schedules.ThroughSwitch` across nodes; default False.

    Returns:
      The :class:`Topology` of n_nodes·gpus ranks, whose ``levels`` are (n_nodes, gpus).
    """
    nics = gpus if nics is None else nics
    n = n_nodes * gpus
    (nv_alpha, nv_beta), (nic_alpha, nic_beta) = nvlink, nic
    names = (tuple(f"gpu{r}->nvswitch" for r in range(n))
             + tuple(f"nvswitch->gpu{r}" for r in range(n))
             + tuple(f"node{m}.nic{k}->fabric" for m in range(n_nodes) for k in range(nics))
             + tuple(f"fabric->node{m}.nic{k}" for m in range(n_nodes) for k in range(nics)))
    nic_links = 2 * n_nodes * nics
    alpha = np.concatenate([np.full(2 * n, nv_alpha / 2), np.full(nic_links, nic_alpha / 2)])
    beta = np.concatenate([np.full(2 * n, float(nv_beta)), np.full(nic_links, float(nic_beta))])

    def routes(src, dst):
        nic_out = 2 * n + src // gpus * nics + src % gpus * nics // gpus
        nic_in = 2 * n + n_nodes * nics + dst // gpus * nics + dst % gpus * nics // gpus
        inside = src // gpus == dst // gpus
        return np.stack([np.where(inside, src, nic_out), np.where(inside, n + dst, nic_in)],
                        axis=1)

    return Topology(name or f"{n_nodes} nodes x {gpus} GPUs", n, names, alpha, beta, routes,
                    gamma, np.arange(n) // gpus, gpus, levels=(n_nodes, gpus),
                    assumptions=f"{n_nodes} nodes x {gpus} GPUs; in a node a switch at "
                                f"{1 / nv_beta / 1e9:.4g} GB/s per GPU each way, "
                                f"α={nv_alpha:.3g} s; {nics} NICs per node at "
                                f"{1 / nic_beta / 1e9:.4g} GB/s each way, α={nic_alpha:.3g} s, "
                                "non-blocking fabric" + ("; NVLS in each node's switch" if nvls
                                                         else "")
                                + ("; SHARP in the fabric" if sharp else ""),
                    switch_of=np.arange(n) // gpus if nvls else None,
                    link_kinds=("nvlink",) * (2 * n) + ("net",) * nic_links, period=gpus,
                    link_orbit=functools.partial(_node_link_orbit, n, gpus, n_nodes * nics, nics),
                    sharp=sharp)


def _node_link_orbit(n: int, gpus: int, nic_links: int, nics: int, links: np.ndarray
                     ) -> np.ndarray:
    """:func:`nodes`' links to node 0's: a GPU's up and down links to GPU (its index in its
    node)'s of node 0, a NIC's out and in links to the same NIC of node 0 (-1 stays -1)."""
    gpu = links < 2 * n  # [0, n): up; [n, 2n): down; then NICs out, NICs in
    base = np.where(gpu, links // n * n, 2 * n + (links - 2 * n) // nic_links * nic_links)
    offset = np.where(gpu, links % n % gpus, (links - 2 * n) % nic_links % nics)
    return np.where(links < 0, -1, base + offset)
