"""The α-β-γ cost model, read off a schedule: α per message, β per byte sent, γ per byte
reduced; its calibration on the devices at hand, the lower bounds, and auto's choice.

Each ppermute the executor makes (one per matching of a round, see execute.py; a matching of
local transfers alone is none, and costs only its reduce's γ) costs
α + k·c·β (+ k·c·γ if it reduces), where c is the chunk size and k the most chunks any one
transfer of it moves. A schedule's predicted time is the sum over its ppermutes (:func:`cost`).

Calibrations are per transport (one process of fake CPU devices, processes over gloo, GPUs:
:func:`jaxcoll.tools.distributed.transport`); which one a call given none uses is not the
model's to decide (:func:`use_defaults`, installed by jaxcoll/tools/auto.py). One whose
``links`` is "shared" prices on one medium every message crosses
(:func:`~jaxcoll.analysis.topology.shared`, with :func:`~jaxcoll.analysis.topology.simulate`);
``ranking``, ``bounds`` and ``explain`` also take any ``topology`` to answer on paper. One with
``timings`` (measured on this machine by :mod:`jaxcoll.tools.calibration_cache`) ranks by them.

One job, the α-β-γ model and its calibrations; much of its length is the public names'
docstrings and their examples.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from jaxcoll.analysis.compression import Compress, error_bound, quantizations
from jaxcoll.analysis.topology import Topology, chunk_bytes, shared, simulate
from jaxcoll.ir.families import SCHEDULES, build_schedule, pipeline_pieces
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule, split_round


@dataclass(frozen=True)
class Cost:
    """Predicted seconds, and where they come from.

    What :func:`cost` returns (and :func:`ranking` ranks); ``str()`` gives it in µs.

    Attributes:
      seconds: the predicted time.
      messages: ppermutes, one after another: each pays α.
      bytes_sent: bytes sent by the busiest rank.
      bytes_reduced: bytes reduced by the busiest rank.
      alpha: the α it was priced with: seconds per message.
      beta: the β it was priced with: seconds per byte sent.
      gamma: the γ it was priced with: seconds per byte reduced.
    """

    seconds: float
    messages: int
    bytes_sent: float
    bytes_reduced: float
    alpha: float
    beta: float
    gamma: float

    def __str__(self) -> str:
        return (f"{self.seconds * 1e6:.1f} µs: {self.messages} messages; the busiest rank sends "
                f"{self.bytes_sent:.0f} B and reduces {self.bytes_reduced:.0f} B")


def cost(schedule: Schedule, nbytes: float, *, alpha: float, beta: float,
         gamma: float = 0.0) -> Cost:
    """Predicted time of ``schedule`` on a buffer of ``nbytes`` per rank.

    Each ppermute the executor makes (one per matching of a round; a matching of local
    transfers alone is none, and costs only its reduce's γ) costs

        α + k·c·β (+ k·c·γ if it reduces),

    where c is the chunk size and k the most chunks any one transfer of it moves; the
    schedule's time is the sum over its ppermutes. A round's in-switch operations
    (:class:`~jaxcoll.ir.schedules.ThroughSwitch`, NVLS) are one more message: α (2α where
    the sum passes through a ``via`` rank) + k·c·β, k the most chunks one rank's port carries
    into the switch or from it that round (the switch adds: no γ); no executor of jaxcoll's
    runs them. The model prices with what it is handed:
    nothing here is measured (:func:`jaxcoll.calibration` gives a machine's α, β, γ).

    Args:
      schedule: the schedule to price, from :func:`jaxcoll.schedule` or any
        :class:`~jaxcoll.ir.schedules.Schedule`.
      nbytes: the whole buffer one rank works on: the message for allreduce, broadcast
        and reduce; the input for reduce_scatter, scatter and alltoall; the output for
        allgather and gather.
      alpha: seconds each ppermute (message) pays, whatever its size; keyword-only,
        no default.
      beta: seconds per byte sent, on the transfer with the most chunks; keyword-only,
        no default.
      gamma: seconds per byte reduced (added into the receiver's buffer); 0 leaves
        reductions free.

    Returns:
      A :class:`Cost` — the predicted seconds, the messages one after another, and the
      bytes the busiest rank sends and reduces.

    Raises:
      AttributeError: ``schedule`` is not a Schedule (it is not checked: the model
        prices what it is handed).
      TypeError: ``alpha`` or ``beta`` is not given (no calibration is read here), or
        ``nbytes`` is not a number.

    Examples:
      >>> import jaxcoll
      >>> ring = jaxcoll.schedule("allreduce", "ring", 8)
      >>> c = jaxcoll.cost(ring, 1 << 20, alpha=1e-6, beta=1e-9)
      >>> print(c)
      1849.0 µs: 14 messages; the busiest rank sends 1835008 B and reduces 917504 B
      >>> c.messages  # 2(n-1) rounds of one ppermute each
      14
      >>> c.bytes_sent == 2 * 7 / 8 * (1 << 20)  # 2(n-1)/n·N: the bandwidth optimum
      True
    """
    chunk = chunk_bytes(schedule, nbytes)
    seconds, messages = 0.0, 0
    sent, reduced = Counter(), Counter()
    every_sent = every_reduced = 0.0  # by every rank alike, in symmetric rounds
    for round_ in schedule.rounds:
        # a symmetric round is one ppermute per base transfer, every rank alike (split_round
        # of its transfers gives the same matchings)
        symmetric = round_.symmetry is not None
        for matching in ([[t] for t in round_.base] if symmetric else split_round(round_)):
            # a local transfer (src == dst) crosses no link: no α or β, only its reduce's γ
            remote = [t for t in matching if t.src != t.dst]
            most = max(len(t.chunks) for t in matching) * chunk
            moved = max((len(t.chunks) for t in remote), default=0) * chunk
            seconds += (alpha if remote else 0.0) + moved * beta + (
                most * gamma if matching[0].reduce else 0.0)
            messages += bool(remote)
            if symmetric:
                every_sent += moved
                every_reduced += most if matching[0].reduce else 0.0
                continue
            for t in matching:
                sent[t.src] += len(t.chunks) * chunk if t.src != t.dst else 0.0
                if t.reduce:
                    reduced[t.dst] += len(t.chunks) * chunk
        if round_.switched:  # one multimem operation: α (twice through a via rank), and
            up, down = _through_switch(round_.switched)  # the busiest port's bytes·β
            trips = 2 if any(op.via is not None for op in round_.switched) else 1
            seconds += trips * alpha + max(max(up.values()), max(down.values())) * chunk * beta
            messages += 1
            for rank, count in up.items():
                sent[rank] += count * chunk  # the switch adds: no rank's γ
    return Cost(seconds, messages, every_sent + max(sent.values(), default=0.0),
                every_reduced + max(reduced.values(), default=0.0), alpha, beta, gamma)


def _through_switch(switched) -> tuple[Counter, Counter]:
    """The chunks each rank sends up into the switch, and gets down from it, in one round's
    in-switch operations."""
    up, down = Counter(), Counter()
    for op in switched:
        for rank in op.senders:
            up[rank] += len(op.chunks)
        for rank in op.receivers:
            down[rank] += len(op.chunks)
        if op.via is not None:  # the sum down to it and up again
            up[op.via] += len(op.chunks)
            down[op.via] += len(op.chunks)
    return up, down


# ----------------------------------------------------------------------------- calibration

# An algorithm a calibration has no per-algorithm factors for is priced with those of the one
# it runs most like on the executor: Swing is halving-doubling with other partners, PAT is
# Bruck with the distances reversed (its reduce_scatter is that run backwards, which on the
# executor is halving-doubling's rounds and bytes). Without them a calibration whose factors
# differ widely from algorithm to algorithm (cpu.json's do: bench/MODEL.md, "Numbers that were
# in code comments") would rank them by the missing factor alone.
RELATIVES = {("allreduce", "swing"): "halving_doubling", ("allgather", "pat"): "bruck",
             ("reduce_scatter", "pat"): "halving_doubling"}


@dataclass(frozen=True)
class Calibration:
    """α, β, γ for one backend, and how far each algorithm's measured time is from them.

    α (s per ppermute), β (s per byte sent), γ (s per byte reduced) for one backend, and
    optionally, per algorithm, how far its measured time is from what α, β, γ predict.
    :func:`jaxcoll.calibration` gives the one a call without one prices with; the shipped
    ones are in jaxcoll/analysis/calibrations/ (:func:`shipped`).

    Attributes:
      alpha: α, seconds per ppermute (per message), whatever its bytes; on "shared"
        links, per round.
      beta: β, seconds per byte sent: through a rank's port ("port"), or through the
        one medium every message crosses ("shared").
      gamma: γ, seconds per byte reduced into a receiver's buffer ("port" only: on
        "shared" links it is in β).
      backend: the backend it is for (cpu, gloo, gpu, ...: the shipped files are
        named after them).
      source: where the numbers come from (which machine, which measurement, when);
        "" if not said.
      per_algorithm: ((primitive, algorithm, latency factor, bandwidth factor), ...),
        measured by calibrate(..., primitives=...): the algorithm's time is latency
        factor x its α part + bandwidth factor x its β and γ part. What the schedule alone
        can't see (how the executor's program runs on this runtime) shows up here;
        absent means (1, 1).
      links: "port": each ppermute costs α + bytes·β (:func:`cost`); "shared": every
        rank's messages cross one medium (processes of one host over loopback, fake
        devices sharing cores): a round costs α + (its messages)·overhead + (all its
        bytes)·β (:func:`~jaxcoll.analysis.topology.shared`, :func:`simulate`).
      overhead: seconds per message on the one medium, "shared" only (γ is unused
        there: it is in β).
      timings: ((primitive, n, algorithm, input bytes per rank, seconds), ...): each
        algorithm timed on this machine (:mod:`jaxcoll.tools.calibration_cache`); where a
        primitive and n have them, :func:`ranking` goes by them (:meth:`measured`)
        instead of α, β, γ.

    Raises:
      ValueError: ``links`` is neither "port" nor "shared".
    """

    alpha: float
    beta: float
    gamma: float
    backend: str
    source: str = ""
    per_algorithm: tuple = ()
    links: str = "port"
    overhead: float = 0.0
    timings: tuple = ()

    def __post_init__(self):
        if self.links not in ("port", "shared"):
            raise ValueError(f"Calibration: links={self.links!r}, must be 'port' or 'shared'")

    def topology(self, n: int) -> Topology | None:
        """The links ``auto`` prices on for n ranks: None (``cost()``) or the shared host."""
        if self.links == "port":
            return None
        return shared(n, alpha=self.alpha, beta=self.beta, overhead=self.overhead,
                      gamma=0.0, name=f"one host ({self.backend})")

    def factors(self, primitive: str, algorithm: str) -> tuple[float, float]:
        """(latency factor, bandwidth factor) of ``algorithm`` for ``primitive``: measured, else
        those of its closest relative (:data:`RELATIVES`), else (1, 1)."""
        found = {(name, algo): (latency, bandwidth)
                 for name, algo, latency, bandwidth in self.per_algorithm}
        relative = RELATIVES.get((primitive, algorithm))
        return found.get((primitive, algorithm), found.get((primitive, relative), (1.0, 1.0)))

    def plain(self) -> "Calibration":
        """This calibration without per-algorithm factors or timings: the α-β-γ model alone."""
        return replace(self, per_algorithm=(), timings=())

    def measured(self, primitive: str, n: int, algorithm: str, nbytes: float) -> float | None:
        """Seconds ``algorithm`` takes for ``nbytes`` of input per rank by the ``timings``:
        linearly interpolated between the sizes measured (exact where time is α + bytes·β);
        below the smallest, its time; above the largest, its time scaled with the bytes (never
        less than the truth where time grows with the bytes). None where it was not measured."""
        points = sorted((size, seconds) for name, ranks, algo, size, seconds in self.timings
                        if (name, ranks, algo) == (primitive, n, algorithm))
        if not points:
            return None
        sizes, seconds = np.array(points).T  # (points,), (points,)
        if nbytes > sizes[-1]:
            return float(seconds[-1] * nbytes / sizes[-1])
        return float(np.interp(nbytes, sizes, seconds))

    def save(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path) -> "Calibration":
        fields = json.loads(Path(path).read_text())
        for rows in ("per_algorithm", "timings"):
            fields[rows] = tuple(tuple(row) for row in fields.get(rows, ()))
        return cls(**fields)


_SHIPPED = Path(__file__).parent / "calibrations"


@lru_cache(maxsize=None)
def shipped(backend: str) -> Calibration:
    """The calibration shipped with jaxcoll for a backend, read once (``auto`` asks on every trace).

    Args:
      backend: ``"cpu"``, ``"gloo"`` or ``"gpu"``; ``"cuda"`` and ``"rocm"`` read gpu's, any
        other name cpu's.

    Returns:
      The :class:`Calibration` in ``jaxcoll/analysis/calibrations/<backend>.json``.
    """
    path = _SHIPPED / f"{backend}.json"
    if not path.exists():
        path = _SHIPPED / "gpu.json" if backend in ("cuda", "rocm") else _SHIPPED / "cpu.json"
    return Calibration.load(path)


# Which calibration a call given none prices with, and which one ``auto`` ranks with, is a
# policy that needs JAX and files: jaxcoll/tools/auto.py installs it (:func:`use_defaults`)
# when jaxcoll is imported. The model itself only prices with what it is handed.
_defaults = {"default": lambda: shipped("cpu"), "for_auto": lambda primitive, n: shipped("cpu")}


def use_defaults(default, for_auto) -> None:
    """Installs the calibrations calls given none price and rank with.

    Price calls given no calibration with ``default()``, and rank ``auto``'s candidates for
    ``primitive`` on n ranks with ``for_auto(primitive, n)`` (jaxcoll/tools/auto.py installs
    them when jaxcoll is imported).

    Args:
      default: a callable taking nothing that returns the :class:`Calibration` a call given
        none prices with (what :func:`default_calibration` returns).
      for_auto: a callable taking ``primitive`` (a collective's name) and ``n`` (the number of
        ranks) that returns the :class:`Calibration` ``auto`` ranks its candidates with.
    """
    _defaults.update(default=default, for_auto=for_auto)


def default_calibration() -> Calibration:
    """The calibration a call given none prices with (:func:`jaxcoll.calibration`).

    Returns:
      The :class:`Calibration` that ``default()`` of :func:`use_defaults` returns (the one
      shipped for cpu until something else is installed).
    """
    return _defaults["default"]()


def _for_auto(primitive: str, n: int) -> Calibration:
    return _defaults["for_auto"](primitive, n)


def auto_candidates(primitive: str) -> list[str]:
    """The algorithms ``auto`` chooses from for ``primitive`` (uncompressed, on one axis).

    Args:
      primitive: the collective's name ("allreduce", "allgather", ...).

    Returns:
      A list of the algorithms' names, sorted.
    """
    return [name for name in sorted(SCHEDULES[primitive])
            if _ranked(SCHEDULES[primitive][name], None, None)]


def _fit_line(sizes, seconds) -> tuple[float, float]:
    """t = a + b·s fitted to relative errors (sizes span decades: a plain least-squares fit
    lets the largest, noisiest point decide a), both clipped at 0: (a, b)."""
    seconds = np.asarray(seconds, float)
    slope, intercept = np.polyfit(np.asarray(sizes, float), seconds, 1, w=1 / seconds)
    return max(float(intercept), 0.0), max(float(slope), 0.0)


def schedule_bytes(primitive: str, input_bytes: int, n: int) -> int:
    """The buffer :func:`cost` is given for an input of ``input_bytes`` per rank.

    Args:
      primitive: the collective's name ("allreduce", "allgather", ...).
      input_bytes: the input per rank in bytes.
      n: the number of ranks.

    Returns:
      The buffer in bytes, the output for allgather and gather (n times the input), the input
      otherwise.
    """
    record = RECORDS[primitive]
    grows = (record.rows_in, record.rows_out) == ("1", "n")  # allgather, gather
    return input_bytes * (n if grows else 1)


# ----------------------------------------------------------------------------- choosing

MAX_MODEL_PIECES = 64  # a pipelined schedule's rounds (a few per piece) stay a few hundred


def chain_pieces(n: int, nbytes: float, calibration_: Calibration | None = None) -> int:
    """The pieces a pipelined chain cuts ``nbytes`` into on n ranks.

    Args:
      n: the number of ranks.
      nbytes: the bytes the chain moves (N).
      calibration_: the α and β to price with; None: :func:`default_calibration`.

    Returns:
      The number of pieces, an int, sqrt((n-2)·N·β/α) (the minimum of (n - 2 + k)(α + N/k·β))
      between 1 and MAX_MODEL_PIECES (:func:`model_pieces` for broadcast's "chain").
    """
    return model_pieces("broadcast", "chain", n, nbytes, calibration_)


def model_pieces(primitive: str, algorithm: str, n: int, nbytes: float,
                 calibration_: Calibration | None = None) -> int:
    """The pieces the model finds fastest for a pipelined ``algorithm``.

    With k pieces it runs F + c·k rounds (F and c read off its schedules for 1 and 2 pieces) of
    α + N/k·β each, whose minimum is at k = sqrt(F·N·β / (c·α)).

    Args:
      primitive: the collective's name ("allreduce", "broadcast", ...).
      algorithm: the name of one of its pipelined algorithms.
      n: the number of ranks.
      nbytes: the bytes it moves (N).
      calibration_: the α and β to price with; None: :func:`default_calibration`.

    Returns:
      The number of pieces, an int between 1 and MAX_MODEL_PIECES (1 where α is 0).

    Raises:
      ValueError: ``algorithm`` is not pipelined.
    """
    if not SCHEDULES[primitive][algorithm].pipelined:
        raise ValueError(f"model_pieces: {primitive} {algorithm!r} is not pipelined")
    cal = calibration_ or default_calibration()
    one, two = (build_schedule(primitive, algorithm, n, 0, k).n_rounds for k in (1, 2))
    per_piece = max(two - one, 1)
    fixed = max(one - per_piece, 0)
    best = np.sqrt(fixed * nbytes * cal.beta / (per_piece * cal.alpha)) if cal.alpha > 0 else 1.0
    return int(min(MAX_MODEL_PIECES, max(1, round(best))))


def pieces_for(primitive: str, algorithm: str, n: int, nbytes: float,
               calibration_: Calibration | None = None, by_model: bool = False) -> int:
    """The pieces ``algorithm`` runs ``nbytes`` in.

    Args:
      primitive: the collective's name ("allreduce", "broadcast", ...).
      algorithm: the name of one of its algorithms.
      n: the number of ranks.
      nbytes: the bytes it moves.
      calibration_: the α and β the model prices with; None: :func:`default_calibration`.
      by_model: take every pipelined algorithm's pieces from the model, not the chain's alone.

    Returns:
      The number of pieces, an int; the chain's (every pipelined one's if ``by_model``) from
      the model (:func:`model_pieces`), the pipelined trees' from the size
      (``pipeline_pieces``: on fake CPU devices more pieces measured slower), 1 for the others.
    """
    entry = SCHEDULES[primitive][algorithm]
    if entry.model_pieces or (by_model and entry.pipelined):
        return model_pieces(primitive, algorithm, n, nbytes, calibration_)
    return pipeline_pieces(int(nbytes)) if entry.pipelined else 1


def _priced(primitive: str, algorithm: str, n: int, nbytes: float, cal: Calibration,
            topology: Topology | None = None) -> tuple[Cost, float]:
    """The plain α-β-γ cost of ``algorithm`` on n ranks and ``nbytes`` (pipelined trees with
    their usual piece count), and its α part: what the per-algorithm factors multiply, the
    same when they are fitted (calibrate) and when they are applied (ranking). On a
    ``topology``: its time is :func:`~jaxcoll.analysis.topology.simulate`'s, and the α part 0."""
    schedule = schedule_for(primitive, algorithm, n, nbytes, cal, topology)
    if topology is None and cal.links == "port":
        c = cost(schedule, nbytes, alpha=cal.alpha, beta=cal.beta, gamma=cal.gamma)
        return c, c.messages * cal.alpha
    links = topology or cal.topology(n)
    counts = cost(schedule, nbytes, alpha=0.0, beta=0.0)
    seconds = simulate(schedule, nbytes, links).seconds
    latency_part = 0.0 if topology else simulate(schedule, 0.0, links).seconds
    return replace(counts, seconds=seconds, alpha=_cheapest_message(links),
                   beta=float(links.beta.max()), gamma=links.gamma), latency_part


def schedule_for(primitive: str, algorithm: str, n: int, nbytes: float,
                 calibration_: Calibration | None = None,
                 topology: Topology | None = None) -> Schedule:
    """The schedule ``auto`` would run for ``nbytes`` on n ranks.

    Args:
      primitive: the collective's name ("allreduce", "allgather", ...).
      algorithm: the name of one of its algorithms.
      n: the number of ranks.
      nbytes: the bytes it moves.
      calibration_: the α and β that cut a pipelined one's pieces; None:
        :func:`default_calibration` (unused on a ``topology``).
      topology: a :class:`~jaxcoll.analysis.topology.Topology` whose links cut every
        pipelined one's pieces, and on whose levels a hierarchical one is built; None: none.

    Returns:
      The :class:`~jaxcoll.ir.schedules.Schedule`, with its usual pieces (on a topology, every
      pipelined one's from the model); a hierarchical one on the topology's levels (a torus's
      dimensions, nodes' (n_nodes, gpus)).

    Raises:
      ValueError: ``algorithm`` is hierarchical (two-level) and ``topology`` is None or has no
        levels.
    """
    entry = SCHEDULES[primitive][algorithm]
    if entry.two_level:
        if topology is None or not topology.levels:
            raise ValueError(f"schedule_for: {algorithm!r} needs a topology with levels "
                             "(nodes, a torus)")
        return build_schedule(primitive, algorithm, topology.levels)
    if topology is None:
        count = pieces_for(primitive, algorithm, n, nbytes, calibration_)
    else:
        count = pieces_for(primitive, algorithm, n, nbytes, _on_links(topology), by_model=True)
    return build_schedule(primitive, algorithm, n, 0, count)


def _from_rank_0(topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    """(α of each message from rank 0 to every other rank, the links those messages cross)."""
    others = np.arange(1, topology.n)
    route = topology.routes(np.zeros_like(others), others)  # (n-1, hops)
    return np.where(route >= 0, topology.alpha[route], 0.0).sum(axis=1), route[route >= 0]


def _on_links(topology: Topology) -> Calibration:
    """α of the cheapest message and β of the slowest link rank 0's messages cross: what a
    pipelined schedule's pieces are cut for on ``topology``."""
    _, crossed = _from_rank_0(topology)
    return Calibration(_cheapest_message(topology), float(topology.beta[crossed].max(initial=0.0)),
                       topology.gamma, "topology", topology.name)


def _cheapest_message(topology: Topology) -> float:
    """The least α a message from rank 0 pays on ``topology`` (the presets are symmetric)."""
    alphas, _ = _from_rank_0(topology)
    return float(alphas.min(initial=np.inf)) if len(alphas) else 0.0


def ranking(primitive: str, n: int, nbytes: float, calibration_: Calibration | None = None,
            compress: Compress | None = None,
            topology: Topology | None = None) -> list[tuple[str, Cost]]:
    """Every algorithm of ``primitive`` with its predicted cost, cheapest first.

    The cost is on n ranks for ``nbytes`` of input per rank (what ``auto`` sees; :func:`cost`
    prices allgather and gather on their output, n times it: :func:`schedule_bytes`), pipelined
    trees with their usual piece count, the calibration's per-algorithm factors applied, where
    it has them. Two-level algorithms need the axis' shape and are left out (without a
    ``topology``): ``auto`` never picks them. A calibration with ``timings`` for ``primitive``
    on n ranks (uncompressed, no topology): the algorithms timed are ranked by
    :meth:`Calibration.measured`, the others left out.

    Args:
      primitive: the collective's name ("allreduce", "allgather", ...).
      n: the number of ranks.
      nbytes: the input per rank in bytes (on a ``topology``, the schedule's buffer, as
        :func:`simulate` takes it).
      calibration_: the α, β, γ to price with; None: :func:`default_calibration`.
      compress: a :class:`~jaxcoll.analysis.compression.Compress`, or None: priced on the
        encoded bytes, and only the algorithms whose error bound (compression.py) is within
        1.5x of the smallest are ranked, two_shot and pairwise among them (without compression
        ``auto`` leaves those two out: they are the ring's bytes in the same number of rounds,
        with no calibration of their own).
      topology: a :class:`~jaxcoll.analysis.topology.Topology`, or None: the answer on paper
        for those links (:func:`~jaxcoll.analysis.topology.simulate`, every round's transfers
        at once): every algorithm is ranked, hierarchical ones on the topology's levels (k for
        a k-D torus), and no per-algorithm factor applies (they measure a runtime).

    Returns:
      A list of (algorithm's name, :class:`Cost`) pairs, cheapest first; a tie goes to the
      algorithm not priced by a relative's factors.
    """
    cal = calibration_ or default_calibration()
    wire = 1.0 if compress is None else compress.wire_bytes(1 << 20) / (4 << 20)
    timed = _timed(cal, primitive, n, nbytes) if compress is None and topology is None else {}
    buffer = _buffer(primitive, n, nbytes, topology)
    costs, bounds = [], {}
    for name in sorted(SCHEDULES[primitive]):
        if not _ranked(SCHEDULES[primitive][name], compress, topology) or (
                timed and name not in timed):
            continue
        c, latency_part = _priced(primitive, name, n, buffer * wire, cal, topology)
        latency, bandwidth = (1.0, 1.0) if topology else cal.factors(primitive, name)
        seconds = timed.get(name, latency * latency_part + bandwidth * (c.seconds - latency_part))
        costs.append((name, replace(c, seconds=seconds)))
        if compress is not None:
            schedule = schedule_for(primitive, name, n, nbytes, cal, topology)
            settle = RECORDS[primitive].replicated
            bounds[name] = error_bound(compress, quantizations(schedule, settle), n, 1.0)
    if bounds:
        costs = [(name, c) for name, c in costs if bounds[name] <= 1.5 * min(bounds.values())]
    # a tie (the same rounds and bytes, up to rounding) goes to the algorithm that is not
    # priced by a relative's factors: nothing says the newcomer is faster
    newcomer = {name for name, _ in costs
                if (primitive, name) in RELATIVES and not timed and topology is None}
    return sorted(costs, key=lambda item: item[1].seconds * (1 + 1e-9 * (item[0] in newcomer)))


def _buffer(primitive: str, n: int, nbytes: float, topology: Topology | None) -> float:
    """The bytes :func:`cost` and :func:`bounds` take for :func:`ranking`'s ``nbytes``."""
    return nbytes if topology is not None else schedule_bytes(primitive, nbytes, n)


def _timed(cal: Calibration, primitive: str, n: int, nbytes: float) -> dict[str, float]:
    """{algorithm: seconds} from ``cal``'s timings for ``primitive`` on n ranks ({}: none)."""
    timed = {name: cal.measured(primitive, n, name, nbytes) for name in SCHEDULES[primitive]}
    return {name: seconds for name, seconds in timed.items() if seconds is not None}


def _ranked(entry, compress: Compress | None, topology: Topology | None) -> bool:
    """Whether :func:`ranking` prices this algorithm (see there)."""
    if entry.two_level:  # on the topology's levels, if more than the innermost has ranks
        return bool(topology and topology.levels and topology.n > topology.levels[-1])
    compressed = compress is not None and entry.auto_when_compressed
    return entry.auto or compressed or topology is not None


def choose(primitive: str, n: int, nbytes: float, calibration_: Calibration | None = None,
           compress: Compress | None = None, topology: Topology | None = None) -> str:
    """The algorithm ``auto`` runs: the cheapest by the model.

    The cheapest with the current calibration (compressed: among those with the smallest
    error bounds; on a ``topology``: on paper), the first of :func:`ranking`.

    Without ``calibration_``, ``compress`` and ``topology`` (what ``auto`` asks), the
    calibration of this machine: measured the first time
    (:mod:`jaxcoll.tools.calibration_cache`).

    Args:
      primitive: the collective's name ("allreduce", "allgather", ...), as
        :func:`jaxcoll.schedule` takes it.
      n: the number of ranks it runs on (the size of the axis it runs
        over).
      nbytes: the input per rank in bytes (allgather and gather are priced on their
        output, n times it: :func:`schedule_bytes`; on a ``topology``, the buffer).
      ``calibration_``: the α, β, γ to price with; None: this machine's, as above (or
        :func:`default_calibration` when ``compress`` or ``topology`` is given).
      compress: price on the encoded bytes (a :class:`~jaxcoll.analysis.compression.Compress`)
        and rank only the algorithms whose error bound is within 1.5x of the smallest.
      topology: answer on paper for these links
        (:func:`~jaxcoll.analysis.topology.simulate`): every algorithm is ranked.

    Returns:
      The algorithm's name, e.g. "ring".

    Examples:
      >>> import jaxcoll
      >>> cal = jaxcoll.Calibration(alpha=1e-6, beta=1e-9, gamma=0.0, backend="example")
      >>> jaxcoll.choose("allreduce", 8, 1 << 20, cal)
      'halving_doubling'
      >>> jaxcoll.choose("allreduce", 8, 1 << 10, cal)  # small: latency decides
      'recursive_doubling'
    """
    if calibration_ is None and compress is None and topology is None:
        calibration_ = _for_auto(primitive, n)
    return ranking(primitive, n, nbytes, calibration_, compress, topology)[0][0]


@dataclass(frozen=True)
class Bounds:
    """What no algorithm of a primitive can beat on n ranks, in the model's terms.

    ``rounds`` of messages one after another (latency), and the bytes sent and reduced one
    after another on the critical path (bandwidth: :func:`cost` with β = 1, or γ = 1, alone).
    On a topology, ``limit`` names what the bandwidth bound is set by (a rank's ports, or a
    node's NICs). What :func:`bounds` returns.

    Attributes:
      rounds: rounds of messages one after another: ceil(log2 n) (0 for one
        rank).
      path_bytes: bytes sent one after another: the β coefficient (bytes through the
        limit).
      path_reduced: bytes reduced one after another: the γ coefficient ((n-1)/n·N for
        the reducing collectives, else 0).
      seconds: the bound in seconds: latency_seconds + bandwidth_seconds +
        path_reduced·γ.
      latency_seconds: the rounds' α part: ``rounds`` x α (on a topology, the α of
        the cheapest message).
      bandwidth_seconds: the bytes' β part: ``path_bytes`` through ``limit`` (on a
        topology, through all of its links at once).
      limit: what the bandwidth bound is set by ("a rank's port", rank 0's port
        links, node 0's NICs, or the one shared medium).
    """

    rounds: int
    path_bytes: float
    path_reduced: float
    seconds: float
    latency_seconds: float = 0.0
    bandwidth_seconds: float = 0.0
    limit: str = "a rank's port"


def _must_send(primitive: str, n: int, nbytes: float) -> float:
    """Bytes some rank must send (or the root send or receive) when n ranks hold ``nbytes``:
    (n-1)/n·N for reduce_scatter, allgather, alltoall, gather and scatter; 2(n-1)/n·N for
    allreduce (Patarasuk and Yuan, 2009); N for broadcast and reduce
    (CollectiveRecord.must_send)."""
    return RECORDS[primitive].must_send(n, nbytes)


def _must_cross(primitive: str, n: int, nbytes: float) -> float:
    """Bytes that must move between ranks in all: what every rank must send, from each, for
    the unrooted ones; N to each of n-1 ranks (broadcast) or from each (reduce); the root's
    share alone for gather and scatter."""
    record = RECORDS[primitive]
    if record.rooted and record.layout == "whole":  # broadcast, reduce
        return (n - 1) * nbytes
    one = _must_send(primitive, n, nbytes)
    return one if record.rooted else n * one


def bounds(primitive: str, n: int, nbytes: float, calibration_: Calibration | None = None,
           topology: Topology | None = None) -> Bounds:
    """The latency and bandwidth lower bounds of ``primitive`` on n ranks.

    For ``nbytes`` per rank (as :func:`cost` counts them), priced with the calibration, or on
    ``topology``.

    Rounds: ceil(log2 n): the ranks that hold a value, or have contributed to one, at most
    double per round. Bytes: what a rank must send (``_must_send``: (n-1)/n·N for
    reduce_scatter, allgather, alltoall, gather and scatter; 2(n-1)/n·N for allreduce; N for
    broadcast and reduce), through one port at β; on a topology through all of rank 0's ports
    at once, and, across nodes, what a node must send (the same rule with n = nodes) through
    all of its NICs. Bytes reduced: (n-1)/n·N for the reducing ones (the n-1 other
    contributions to a rank's 1/n share). So the bound is

        ceil(log2 n)·α + (bytes a rank must send)·β + (n-1)/n·N·γ.

    Args:
      primitive: the collective's name ("allreduce", "allgather", ...), as
        :func:`jaxcoll.schedule` takes it.
      n: the number of ranks (with 1 or fewer nothing moves: every bound is
        0).
      nbytes: the buffer per rank, as :func:`cost` takes it (the output for allgather
        and gather).
      ``calibration_``: the α, β, γ to price with; None: :func:`default_calibration`
        (a "shared" one prices on its one medium).
      topology: price on these links instead: α of rank 0's cheapest message, β of its
        ports and, across nodes, of its node's NICs (the presets are symmetric).

    Returns:
      A :class:`Bounds` — the rounds, the bytes on the critical path, and the seconds
      no algorithm can beat.

    Examples:
      >>> import jaxcoll
      >>> cal = jaxcoll.Calibration(alpha=1e-6, beta=1e-9, gamma=0.0, backend="example")
      >>> b = jaxcoll.bounds("allreduce", 8, 1 << 20, cal)
      >>> b.rounds, b.path_bytes  # ceil(log2 8), 2(n-1)/n·N
      (3, 1835008.0)
      >>> print(f"{b.seconds * 1e6:.1f} µs")  # the ring's cost: 1849.0 µs
      1838.0 µs
    """
    cal = calibration_ or default_calibration()
    topology = topology or cal.topology(n)
    if n <= 1:
        return Bounds(0, 0.0, 0.0, 0.0)
    rounds = int(np.ceil(np.log2(n)))
    path = _must_send(primitive, n, nbytes)
    reduced = (n - 1) / n * nbytes if RECORDS[primitive].reduces else 0.0
    if topology is None:
        latency, bandwidth, limit = rounds * cal.alpha, path * cal.beta, "a rank's port"
        gamma = cal.gamma
    else:
        latency = rounds * _cheapest_message(topology)
        bandwidth, limit, path = _bandwidth_bound(primitive, nbytes, topology)
        gamma = topology.gamma
    return Bounds(rounds, path, reduced, latency + bandwidth + reduced * gamma,
                  latency, bandwidth, limit)


def _bandwidth_bound(primitive: str, nbytes: float,
                     topology: Topology) -> tuple[float, str, float]:
    """(seconds, what sets them, bytes through it): the slower of rank 0's ports and, on a
    topology of nodes, node 0's NICs; on one shared medium, every rank's bytes through it and
    a message from all ranks but one (the presets are symmetric: rank 0 stands for all)."""
    sent = _must_send(primitive, topology.n, nbytes)
    if len(topology.link_names) == 1:  # one medium: all bytes and messages cross it
        messages = (topology.n - 1) * (0.0 if topology.overhead is None else topology.overhead[0])
        total = _must_cross(primitive, topology.n, nbytes)
        return total * topology.beta[0] + messages, "the one shared medium", total
    ports = topology.first_links(0)
    best = (sent / np.sum(1 / topology.beta[ports]), f"rank 0's {len(ports)} port link(s)", sent)
    if topology.node_of is not None and topology.node_of.max() > 0:
        n_nodes = int(topology.node_of.max()) + 1
        inside = np.flatnonzero(topology.node_of == 0)
        outside = np.flatnonzero(topology.node_of == 1)[0]
        nics = np.unique(topology.routes(inside, np.full_like(inside, outside))[:, 0])
        node_sent = _must_send(primitive, n_nodes, nbytes)
        across = node_sent / np.sum(1 / topology.beta[nics])
        if across > best[0]:
            best = (across, f"node 0's {len(nics)} NIC(s)", node_sent)
    return best


def explain(primitive: str, n: int, nbytes: float, calibration_: Calibration | None = None,
            topology: Topology | None = None) -> list[tuple[str, Cost]]:
    """Print the ranking ``auto`` chooses from, with each algorithm's gap to the bounds.

    The ranking (or, on ``topology``, every algorithm on paper), with predicted times and
    each algorithm's gap to the lower bounds (:func:`bounds`); return it.

    Args:
      primitive: the collective's name ("allreduce", "allgather", ...), as
        :func:`jaxcoll.schedule` takes it.
      n: the number of ranks it runs on (the size of the axis it runs
        over).
      nbytes: the input per rank in bytes (allgather and gather are priced on their
        output, n times it; on a ``topology``, the buffer).
      ``calibration_``: the α, β, γ (and per-algorithm factors, or timings) to price with;
        None: :func:`default_calibration`.
      topology: answer on paper for these links
        (:func:`~jaxcoll.analysis.topology.simulate`): every algorithm is ranked.

    Returns:
      What it printed — :func:`ranking`'s list of (algorithm, :class:`Cost`), cheapest
      first.
    """
    cal = calibration_ or default_calibration()
    ranked = ranking(primitive, n, nbytes, cal, topology=topology)
    best = ranked[0][1].seconds or 1e-30
    buffer = _buffer(primitive, n, nbytes, topology)
    bound = bounds(primitive, n, buffer, cal, topology)
    links = topology or cal.topology(n)
    where = (f"on {links.name} ({links.assumptions})" if links else
             f"α={cal.alpha:.3g} s, β={cal.beta:.3g} s/B, γ={cal.gamma:.3g} s/B")
    where += "" if topology else f" ({cal.backend}: {cal.source})"
    print(f"{primitive}, n={n}, {nbytes:.0f} bytes per rank"
          f"{'' if topology else ' in'}; {where}; lower bounds: "
          f"{bound.rounds} rounds, {bound.path_bytes:.0f} B through {bound.limit}, "
          f"{bound.seconds * 1e6:.1f} µs")
    for name, c in ranked:
        latency, bandwidth = (1.0, 1.0) if topology else cal.factors(primitive, name)
        own = any(tuple(row[:2]) == (primitive, name) for row in cal.per_algorithm)
        whose = "measured" if own else f"{RELATIVES.get((primitive, name))}'s"
        measured = (f"   ({whose} factors: α x{latency:g}, β γ x{bandwidth:g})"
                    if (latency, bandwidth) != (1.0, 1.0) else "")
        if not topology and cal.measured(primitive, n, name, nbytes) is not None:
            measured = "   (time measured on this machine)"
        schedule = schedule_for(primitive, name, n, nbytes, cal, topology)
        if links is None:
            path = cost(schedule, buffer, alpha=0.0, beta=1.0).seconds
            gap = f"bytes x{path / bound.path_bytes:.2f}" if bound.path_bytes else ""
        else:
            gap = f"time x{c.seconds / bound.seconds:.2f}" if bound.seconds else ""
        gaps = (f"gap to the bounds: rounds x{schedule.n_rounds / bound.rounds:.2f}, {gap}"
                if bound.rounds else "")
        print(f"  {name:<22} {c.seconds * 1e6:12.1f} µs  x{c.seconds / best:7.2f}   "
              f"{c.messages} messages, {c.bytes_sent:.0f} B sent, "
              f"{c.bytes_reduced:.0f} B reduced; {gaps}{measured}")
    return ranked
