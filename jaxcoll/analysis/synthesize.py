"""Synthesis: search for a schedule on a topology, prove it (``verify``) and price it
(``simulate``) against the registered algorithms and the lower bounds. No JAX in here.

The search space: allgather schedules built round by round by a greedy list scheduler, each
policy of which is one candidate. The buffer is cut into ``pieces`` chunks per block (chunk c
is rank c // pieces's, so pieces pipeline); a round is a set of transfers, each moving chunks
its sender holds and its receiver lacks, the rarest first (fewest holders), each chunk into a
rank at most once. A transfer joins the round only if every link on its route still finishes
within the round's time (links' bytes·β + messages·overhead + the largest α crossing it):
links split their bandwidth exactly as :func:`~jaxcoll.analysis.topology.simulate` prices them,
and a fast link may carry several chunks while a slow one carries one. A policy chooses

- ``pieces``: chunks per block (1, 2, 4, ... up to ``max_pieces``);
- ``most_chunks``: the most chunks one transfer moves (1, 2, or no limit: recursive doubling's
  growing messages);
- ``round_time``: the round lasts as long as its first transfer (``"first"``) or as one
  transfer on the slowest useful pair (``"slowest"``: fast links fill in meanwhile);
- ``order``: pairs on the cheapest routes first (``"cheap_first"``) or the dearest
  (``"costly_first"``: a node's NICs set the pace, NVLink fills in), or those with the most
  chunks to give (``"fullest_first"``: recursive doubling's pairs);
- ``pairs``: only pairs joined by the fewest links (``"nearest"``: neighbours on a ring or a
  torus; every pair on a switch) or every pair (``"all"``);
- ``seed``: ties broken at random.

Every transfer copies a chunk into a rank that lacks it, so each chunk spreads along a tree:
run backwards with reduce (the schedule's time reversal), the same rounds are a
reduce_scatter, and reduce_scatter + allgather an allreduce. Each candidate is priced on the
primitive asked for. The registered algorithms (``jaxcoll.analysis.model.ranking`` on the
topology: pipelined ones in the model's pieces, ``hierarchical`` on the levels of nodes or a
torus) are candidates too, so the result is never slower than the best of them;
:class:`Synthesis` says whether the search's own best beat it, by how much, and how far each
is from the bound.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from jaxcoll.analysis.model import Bounds, bounds, ranking, schedule_for
from jaxcoll.analysis.topology import Topology, simulate
from jaxcoll.ir import _renamed
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule, Transfer
from jaxcoll.ir.symbolic import verify

# What the search builds: a collective whose chunks spread along trees (allgather), its time
# reversal with reduce (its dual: reduce_scatter) and the collective made of the two in turn.
_SPREADS = next(record for record in RECORDS.values() if record.spreads)
_REVERSED = _SPREADS.dual
_BOTH = next(record.name for record in RECORDS.values()
             if record.composed_of == (_REVERSED, _SPREADS.name))
SYNTHESIZABLE = (_SPREADS.name, _REVERSED, _BOTH)  # the collectives the search builds
# PRIMITIVES, its name before 0.5.0, reads it with a DeprecationWarning
__getattr__ = _renamed.module_getattr(__name__, {"PRIMITIVES": "SYNTHESIZABLE"}, globals())


@dataclass(frozen=True)
class Policy:
    """One point of the search space (see the module's docstring)."""

    pieces: int
    most_chunks: int  # 0: no limit
    round_time: str  # "first" | "slowest"
    order: str  # "cheap_first" | "costly_first" | "fullest_first"
    pairs: str  # "nearest" | "all"
    seed: int = 0

    def __str__(self) -> str:
        most = self.most_chunks or "any"
        return (f"pieces={self.pieces}, chunks per transfer {most}, round time {self.round_time}"
                f", {self.order}, {self.pairs} pairs, seed {self.seed}")


@dataclass(frozen=True)
class Synthesis:
    """The result of :func:`synthesize`: the fastest schedule found and how it compares.

    ``str()`` says it in one line; :attr:`speedup` and :attr:`gap` compare it with the best
    registered algorithm and with the bound.

    Attributes:
      schedule: the fastest schedule, verified and labelled with its collective (run it
        with ``algorithm=schedule``).
      seconds: ``simulate(schedule, nbytes, topology).seconds``: its time on the
        topology.
      origin: ``"search: <policy>"``, or ``"registered: <name>"`` when no searched
        candidate beat the best registered algorithm.
      searched_seconds: the search's own best, either way (it may be slower than
        ``seconds``).
      best_registered: the name of the registered algorithm ``ranking`` puts first on
        the topology.
      registered_seconds: its time, simulated as ``seconds`` is (what :attr:`speedup`
        divides).
      bound: the :class:`~jaxcoll.analysis.model.Bounds` no schedule can beat on the
        topology (what :attr:`gap` divides by).
      candidates: how many schedules were priced: the searched ones and the best
        registered one.
      topology: the topology's name (its ``name``, not the
        :class:`~jaxcoll.analysis.topology.Topology`).
    """

    schedule: Schedule
    seconds: float
    origin: str
    searched_seconds: float
    best_registered: str
    registered_seconds: float
    bound: Bounds
    candidates: int
    topology: str

    @property
    def speedup(self) -> float:
        """The best registered algorithm's time / this schedule's (>= 1)."""
        return self.registered_seconds / self.seconds

    @property
    def gap(self) -> float:
        """This schedule's time / the lower bound's (>= 1)."""
        return self.seconds / self.bound.seconds if self.bound.seconds else 1.0

    def __str__(self) -> str:
        return (f"{self.schedule.collective} on {self.topology}: {self.seconds * 1e6:.1f} µs "
                f"({self.origin}); search's best {self.searched_seconds * 1e6:.1f} µs; best "
                f"registered {self.best_registered} {self.registered_seconds * 1e6:.1f} µs "
                f"(x{self.speedup:.2f}); bound {self.bound.seconds * 1e6:.1f} µs "
                f"(gap x{self.gap:.2f}); {self.candidates} candidates")


def synthesize(primitive: str, topology: Topology, nbytes: float, *, n: int | None = None,
               candidates: int = 48, max_pieces: int = 4, seed: int = 0) -> Synthesis:
    """The fastest schedule of ``primitive`` on ``topology`` that a seeded search finds.

    The fastest for ``nbytes`` per rank that a bounded search (``candidates`` policies,
    seeded: deterministic) and the registered algorithms offer, verified, with its gap to the
    best registered one and to the bound. Every candidate is priced by
    :func:`~jaxcoll.analysis.topology.simulate` (the module's docstring: the search space).

    Cost: ``candidates`` greedy constructions, each O(rounds x pairs x chunks).

    Args:
      primitive: "allgather", "reduce_scatter" or "allreduce" (an allgather searched,
        its time reversal with reduce, or the two in turn).
      topology: the links to search on, a :class:`~jaxcoll.analysis.topology.Topology`
        (:func:`~jaxcoll.analysis.topology.switch`, ``ring``, ``torus``, ``nodes``).
      nbytes: the buffer per rank in bytes, as :func:`jaxcoll.simulate` takes it (> 0;
        the schedule's pieces are cut for it).
      n: the number of ranks, if given: it must be the topology's (a check, nothing
        more).
      candidates: how many policies the search builds and prices (>= 1); the time is
        linear in it.
      max_pieces: the most chunks per block a policy cuts the buffer into (>= 1; 1, 2,
        4, ... up to it).
      seed: the first seed ties are broken with (policies past the grid's end take
        seed + 1, ...): the same seed, the same result.

    Returns:
      A :class:`Synthesis` — the verified schedule, its time, where it came from, and how
      it compares with the best registered algorithm and the lower bound.

    Raises:
      ValueError: ``primitive`` is not one of the three; ``n`` is not the topology's;
        ``nbytes`` <= 0, ``candidates`` or ``max_pieces`` < 1; or the topology does not
        connect every rank.
      TypeError: ``topology`` is not a Topology, or ``nbytes``, ``candidates`` or
        ``max_pieces`` is not a number.

    Examples:
      >>> import jaxcoll
      >>> from jaxcoll.analysis.topology import torus
      >>> links = torus(2, 4, alpha=1e-6, beta=1e-9)
      >>> found = jaxcoll.synthesize("allreduce", links, 1 << 20, candidates=4, seed=0)
      >>> print(found)  # doctest: +ELLIPSIS
      allreduce on 2x4 torus: 665.4 µs (search: pieces=2, ...); ... 5 candidates
      >>> found.best_registered, round(found.speedup, 2)  # the search beat it
      ('bidirectional_ring', 1.42)
      >>> found.schedule.collective, found.schedule.n_ranks
      ('allreduce', 8)
    """
    _check(primitive, topology, nbytes, n, candidates, max_pieces)
    searched, policy, priced = _search(primitive, topology, nbytes, candidates, max_pieces, seed)
    searched_seconds = _seconds(searched, nbytes, topology)
    name, registered, registered_seconds = _best_registered(primitive, topology, nbytes)
    if searched_seconds <= registered_seconds:
        schedule, seconds, origin = searched, searched_seconds, f"search: {policy}"
    else:
        schedule, seconds, origin = registered, registered_seconds, f"registered: {name}"
    verify(schedule)
    return Synthesis(schedule, seconds, origin, searched_seconds, name, registered_seconds,
                     bounds(primitive, topology.n, nbytes, topology=topology),
                     priced + 1, topology.name)


def _check(primitive, topology, nbytes, n, candidates, max_pieces) -> None:
    """ValueError/TypeError naming the argument for bad input."""
    if primitive not in SYNTHESIZABLE:
        raise ValueError(f"jaxcoll.synthesize: primitive={primitive!r}, must be one of "
                         f"{', '.join(SYNTHESIZABLE)}")
    if not isinstance(topology, Topology):
        raise TypeError(f"jaxcoll.synthesize: topology={topology!r} is not a jaxcoll Topology "
                        "(jaxcoll.analysis.topology.switch, ring, torus, nodes)")
    if n is not None and n != topology.n:
        raise ValueError(f"jaxcoll.synthesize: n={n!r}, but the topology {topology.name!r} has "
                         f"{topology.n} ranks")
    for name, value, least in (("nbytes", nbytes, 0), ("candidates", candidates, 1),
                               ("max_pieces", max_pieces, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer,
                                                             np.floating)):
            raise TypeError(f"jaxcoll.synthesize: {name}={value!r}, must be a number")
        if not (value > least if name == "nbytes" else value >= least):
            raise ValueError(f"jaxcoll.synthesize: {name}={value!r}, must be "
                             f"{'> 0' if name == 'nbytes' else f'>= {least}'}")


def _seconds(schedule: Schedule, nbytes: float, topology: Topology) -> float:
    return simulate(schedule, nbytes, topology).seconds


def _best_registered(primitive: str, topology: Topology, nbytes: float):
    """(name, schedule, seconds) of the registered algorithm ``ranking`` puts first."""
    name, _ = ranking(primitive, topology.n, nbytes, topology=topology)[0]
    schedule = schedule_for(primitive, name, topology.n, nbytes, topology=topology)
    return name, schedule, _seconds(schedule, nbytes, topology)


# ----------------------------------------------------------------------------- the search

def policies(max_pieces: int) -> list[Policy]:
    """The search space's policies (seed 0), in a fixed shuffled order so that the first few
    already vary every choice; :func:`synthesize` tries the first ``candidates``, cycling
    seeds if there are more."""
    pieces = [1 << p for p in range(max_pieces.bit_length()) if 1 << p <= max_pieces]
    grid = [Policy(k, most, time, order, pairs) for k, most, time, order, pairs in
            itertools.product(pieces, (0, 1, 2), ("first", "slowest"),
                              ("cheap_first", "costly_first", "fullest_first"),
                              ("nearest", "all"))]
    return [grid[i] for i in np.random.default_rng(0).permutation(len(grid))]


@lru_cache(maxsize=16)
def _links(topology: Topology) -> "_Links":
    return _Links(topology)


@lru_cache(maxsize=512)
def _allgather(topology: Topology, policy: Policy, nbytes: float) -> Schedule:
    """greedy_allgather, cached: reduce_scatter and allreduce reuse the allgathers."""
    return greedy_allgather(_links(topology), policy, nbytes)


def _search(primitive, topology, nbytes, candidates, max_pieces, seed):
    """(best schedule, its policy, how many were priced) over the first ``candidates`` policies
    (seeds seed, seed + 1, ... once the grid is used up)."""
    grid = policies(int(max_pieces))
    best = None
    for index in range(int(candidates)):
        policy = replace(grid[index % len(grid)], seed=seed + index // len(grid))
        schedule = as_primitive(primitive, _allgather(topology, policy, float(nbytes)))
        seconds = _seconds(schedule, nbytes, topology)
        if best is None or seconds < best[0]:
            best = (seconds, schedule, policy)
    return best[1], best[2], int(candidates)


def as_primitive(primitive: str, allgather: Schedule) -> Schedule:
    """An allgather whose every chunk spreads along a tree, as ``primitive``: itself, its time
    reversal with reduce (a reduce_scatter), or the two concatenated (an allreduce)."""
    if primitive == _SPREADS.name:
        return allgather
    reduced = replace(allgather.reversed(
        allgather.name.replace(_SPREADS.name, _REVERSED), reduce=True), collective=_REVERSED)
    if primitive == _REVERSED:
        return reduced
    return replace(reduced + allgather, collective=_BOTH,
                   name=allgather.name.replace(_SPREADS.name, _BOTH))


@dataclass(frozen=True, eq=False)
class _Links:
    """Every ordered pair's route on a topology, as arrays the greedy reads."""

    topology: Topology
    routes: list  # [(s, d)] -> links of the route
    alpha: np.ndarray  # (n, n) α of the route
    hops: np.ndarray  # (n, n) links on the route; a large number on the diagonal
    beta: np.ndarray  # (n, n) the route's largest β
    overhead: np.ndarray  # (n, n) the route's largest overhead per message

    def __init__(self, topology: Topology):
        n = topology.n
        src, dst = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
        off = src != dst
        route = topology.routes(src[off], dst[off])  # (pairs, hops)
        routes = [[] for _ in range(n * n)]
        for s, d, r in zip(src[off], dst[off], route):
            routes[s * n + d] = r[r >= 0]
        alpha = np.zeros((n, n))
        hops = np.full((n, n), 1 << 30)
        for s, d in zip(src[off], dst[off]):
            alpha[s, d] = topology.alpha[routes[s * n + d]].sum()
            hops[s, d] = len(routes[s * n + d])
        object.__setattr__(self, "topology", topology)
        object.__setattr__(self, "routes", routes)
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "hops", hops)
        overhead = (np.zeros(len(topology.link_names)) if topology.overhead is None
                    else topology.overhead)
        for name, per_link in (("beta", topology.beta), ("overhead", overhead)):
            object.__setattr__(self, name, np.array(
                [[per_link[r].max(initial=0.0) for r in routes[s * n:(s + 1) * n]]
                 for s in range(n)]))

    def one_chunk(self, nbytes: float) -> np.ndarray:
        """(n, n) seconds one transfer of ``nbytes`` takes alone on each pair's route (its
        slowest link's β and overhead; inf on the diagonal)."""
        return self.alpha + nbytes * self.beta + self.overhead + np.where(
            self.hops < (1 << 30), 0.0, np.inf)

    def allowed(self, pairs: str) -> np.ndarray:
        """(n, n) the pairs a policy may use."""
        if pairs == "all":
            return self.hops < (1 << 30)
        return self.hops == self.hops.min()


class _Round:
    """The links' load in a round under construction, and the fit rule (module docstring)."""

    def __init__(self, links: _Links, limit: float | None):
        topology = links.topology
        self.links, self.limit = links, limit
        size = len(topology.link_names)
        self.load = np.zeros(size)  # bytes
        self.messages = np.zeros(size)
        self.alpha = np.zeros(size)  # the largest α of a route crossing the link
        self.overhead = np.zeros(size) if topology.overhead is None else topology.overhead

    def time(self, s: int, d: int, nbytes: float) -> float:
        """The round's time on the links of s -> d were it to carry ``nbytes`` more."""
        route = self.links.routes[s * self.links.topology.n + d]
        busy = ((self.load[route] + nbytes) * self.links.topology.beta[route]
                + (self.messages[route] + 1) * self.overhead[route])
        return float(np.max(busy + np.maximum(self.alpha[route], self.links.alpha[s, d])))

    def add(self, s: int, d: int, nbytes: float) -> None:
        route = self.links.routes[s * self.links.topology.n + d]
        self.load[route] += nbytes
        self.messages[route] += 1
        self.alpha[route] = np.maximum(self.alpha[route], self.links.alpha[s, d])
        if self.limit is None:
            self.limit = self.time(s, d, 0.0) * (1 + 1e-9)


def greedy_allgather(links: _Links, policy: Policy, nbytes: float) -> Schedule:
    """The allgather one policy builds (module docstring), labelled and index-checked."""
    n, k = links.topology.n, policy.pieces
    n_chunks = n * k
    have = np.zeros((n, n_chunks), bool)  # (ranks, chunks)
    have[np.arange(n_chunks) // k, np.arange(n_chunks)] = True
    allowed = links.allowed(policy.pairs)
    rng = np.random.default_rng(policy.seed)
    chunk = nbytes / n_chunks
    rounds = []
    while not have.all():
        transfers = _greedy_round(links, policy, have, allowed, chunk, rng)
        if not transfers:
            raise ValueError(f"synthesize: {links.topology.name!r} does not connect every "
                             f"rank with {policy.pairs} pairs")
        for t in transfers:
            have[t.dst, list(t.chunks)] = True
        rounds.append(transfers)
    schedule = Schedule.build(f"synthesized allgather on {links.topology.name}", n,
                              n_chunks=n_chunks, rounds=rounds)
    return replace(schedule, collective=_SPREADS.name)


def _greedy_round(links: _Links, policy: Policy, have: np.ndarray, allowed: np.ndarray,
                  chunk: float, rng) -> list[Transfer]:
    """One round: pairs in the policy's order, each sending the rarest chunks that fit, each
    chunk from one of the receiver's cheapest holders (none sent over a slow link that a
    faster one can bring, counting those already on their way this round)."""
    one = links.one_chunk(chunk)  # (src, dst) seconds of one chunk alone
    holders = have.sum(axis=0) + rng.random(have.shape[1]) * 0.5  # (chunks,) ties at random
    near = np.where(have[:, None, :], one[:, :, None], np.inf).min(axis=0)  # (dst, chunks)
    useful = have[:, None, :] & ~have[None, :, :]  # (src, dst, chunks)
    useful &= one[:, :, None] <= near[None, :, :] * (1 + 1e-9)
    counts = useful.sum(axis=2) * allowed  # (src, dst)
    src, dst = np.nonzero(counts)
    order = _pair_order(policy, links.alpha[src, dst], useful[src, dst], holders,
                        counts[src, dst], rng)
    most = policy.most_chunks or have.shape[1]
    limit = None
    if policy.round_time == "slowest":  # one transfer alone on the slowest useful pair
        sizes = np.minimum(most, counts[src, dst]) * chunk
        limit = float(np.max(links.alpha[src, dst] + sizes * links.beta[src, dst]
                             + links.overhead[src, dst])) * (1 + 1e-9)
    state = _Round(links, limit)
    incoming = np.zeros_like(have)  # chunks already on their way to each rank this round
    transfers = []
    for s, d in zip(src[order], dst[order]):
        free = np.flatnonzero(useful[s, d] & ~incoming[d] & (one[s, d] <= near[d] * (1 + 1e-9)))
        picked = []
        for c in free[np.argsort(holders[free], kind="stable")][:most]:
            if state.limit is not None and state.time(s, d, (len(picked) + 1) * chunk) > \
                    state.limit:
                break
            picked.append(int(c))
        if picked:
            state.add(s, d, len(picked) * chunk)
            incoming[d, picked] = True
            near[:, picked] = np.minimum(near[:, picked], one[d][:, None])  # d holds them soon
            transfers.append(Transfer(int(s), int(d), sorted(picked), reduce=False))
    return transfers


def _pair_order(policy: Policy, alpha: np.ndarray, useful: np.ndarray, holders: np.ndarray,
                counts: np.ndarray, rng) -> np.ndarray:
    """The order the round visits its candidate pairs in (``alpha``: (pairs,) their routes'
    α; ``useful``: (pairs, chunks) what each may send)."""
    ties = rng.random(len(counts))
    if policy.order == "fullest_first":  # the pairs with most to give first: doubling
        return np.lexsort((ties, -counts))
    rarest = np.where(useful, holders[None, :], np.inf).min(axis=1)  # (pairs,)
    sign = 1 if policy.order == "cheap_first" else -1
    return np.lexsort((ties, rarest, sign * np.round(alpha, 15)))
