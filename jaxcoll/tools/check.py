"""The main job: every primitive x algorithm x a few sizes against the ``xla`` reference;
``hierarchical`` on two levels, and its allreduce on three as well where n has three prime
factors.

Inputs are small integers stored as float32, so every sum is exact in any order and a correct
algorithm matches the built-in with zero error (the nccl-tests "#wrong" convention).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxcoll import collectives
from jaxcoll.ir.families import SCHEDULES, two_level
from jaxcoll.ir.records import RECORDS
from jaxcoll.lowering._compat import serialize_collectives
from jaxcoll.lowering.execute import after
from jaxcoll.tools.distributed import local_blocks

AXIS = "ranks"  # the axis the check's meshes name
LEVELS = ("outer", "inner")  # the tuple axis two-level algorithms run on
THREE_LEVELS = ("pod", "node", "gpu")  # and the one of their three-level case
ROOTED = tuple(name for name, record in RECORDS.items() if record.rooted)
# x is cut into n blocks (reduce_scatter, scatter, alltoall): element counts are rounded up to
# a multiple of n
SCATTERING = tuple(name for name, record in RECORDS.items() if record.rows_in == "n")


@dataclass(frozen=True)
class Row:
    primitive: str
    algorithm: str
    n: int
    nbytes: int  # per rank, input
    max_error: float
    levels: tuple[int, ...] = ()  # the mesh's shape, of a three-level case only

    @property
    def ok(self) -> bool:
        return self.max_error == 0.0

    @property
    def label(self) -> str:
        """The algorithm, with the levels' sizes for a three-level case: hierarchical 2x2x2."""
        return " ".join([self.algorithm, "x".join(map(str, self.levels))]).strip()


def call_collective(primitive: str, algorithm: str, x, axis, root: int = 0, compress=None):
    """``primitive`` on ``x``: rooted ones from ``root``, scattering ones tiled (x cut in n),
    alltoall split and concatenated along dimension 0; ``compress`` where given."""
    kwargs = {"root": root} if primitive in ROOTED else {}
    if compress is not None:
        kwargs["compress"] = compress
    if primitive in SCATTERING:
        kwargs["tiled"] = True
    if RECORDS[primitive].layout == "exchange":  # alltoall
        kwargs.update(split_dim=0, concat_dim=0)
    return getattr(collectives, primitive)(x, axis, algorithm=algorithm, **kwargs)


def level_shape(n: int, k: int = 2) -> tuple[int, ...]:
    """n ranks as k levels, outermost first: each outer level the smallest prime factor of
    what is left, the innermost the rest (8: 2 x 4 or 2 x 2 x 2, like nodes of GPUs; 5: 5 x 1)."""
    shape, rest = [], n
    for _ in range(k - 1):
        factor = next(f for f in range(2, rest + 1) if rest % f == 0) if rest > 1 else 1
        shape.append(factor)
        rest //= factor
    return (*shape, rest)


def _first(n: int, devices) -> list:
    """The first n of ``devices`` (default all); across processes, all of them in process
    order, so that the inner levels of a mesh lie inside a process where they fit."""
    devices = jax.devices() if devices is None else devices
    if jax.process_count() > 1 and n == len(devices):
        devices = sorted(devices, key=lambda device: (device.process_index, device.id))
    return list(devices[:n])


def two_level_mesh(n: int, devices=None) -> Mesh:
    """The first n devices (of ``devices``, default all) as an (outer, inner) mesh; across
    processes, all of them as (process, local device): the inner level inside a process."""
    shape = level_shape(n)
    if jax.process_count() > 1 and n == len(jax.devices() if devices is None else devices):
        shape = (jax.process_count(), n // jax.process_count())  # row p: process p's devices
    return Mesh(np.array(_first(n, devices)).reshape(shape), LEVELS)


def three_level_mesh(n: int, devices=None) -> Mesh:
    """The first n devices as a (pod, node, gpu) mesh of ``level_shape(n, 3)``."""
    return Mesh(np.array(_first(n, devices)).reshape(level_shape(n, 3)), THREE_LEVELS)


# --quick: each collective by its ring (or binomial tree), and the allreduce's folding of a
# rank count that is no power of two, its tree and its two levels
QUICK = {("allreduce", "recursive_doubling"), ("allreduce", "tree"),
         ("allreduce", "hierarchical"), ("broadcast", "tree")}


def cases(n: int, quick: bool = False) -> list[tuple[str, str, int]]:
    """The main job's (primitive, algorithm, levels) on n ranks: every registered algorithm
    (levels 1; hierarchical 2), and the two-level ones of a collective built of others (the
    hierarchical allreduce: its reduce_scatter and allgather in one) on 3 levels too where n
    has three prime factors (2 x 2 x 2 for 8). ``quick``: a representative few (``QUICK``,
    and each collective's ``ring``, else ``binomial``)."""
    three = min(level_shape(n, 3)) > 1
    found = []
    for primitive, schedules in SCHEDULES.items():
        first = next(a for a in ("ring", "binomial", "naive") if a in schedules)
        for algorithm in sorted(schedules):
            if quick and algorithm != first and (primitive, algorithm) not in QUICK:
                continue
            levels = 2 if two_level(primitive, algorithm) else 1
            found.append((primitive, algorithm, levels))
            if levels == 2 and three and RECORDS[primitive].composed_of:
                found.append((primitive, algorithm, 3))
    return found


def ours_and_reference(cases, inputs, ours, reference) -> list:
    """``[(ours(case, x), reference(case, x))]`` for many independent collectives in one
    program; on jaxlib 0.10 CPU each waits for the one before (docs/guide/typing.md)."""
    chain = after if serialize_collectives() else (lambda x, _: x)
    results, previous = [], ()
    for case, x in zip(cases, inputs):
        mine = ours(case, chain(x, previous))
        previous = reference(case, chain(x, mine))
        results.append((mine, previous))
    return results


def _program(primitive: str, algorithm: str, n: int, levels: int = 1):
    """One jitted program on the first n devices: (ours, reference) for each input, every
    rank's results stacked. ``levels``: 2 on the (outer, inner) tuple axis, 3 on
    (pod, node, gpu)."""
    if levels == 3:
        mesh, axis = three_level_mesh(n), THREE_LEVELS
    elif levels == 2:
        mesh, axis = two_level_mesh(n), LEVELS
    else:
        mesh, axis = Mesh(np.array(jax.devices()[:n]), (AXIS,)), AXIS

    def body(xs):
        # Rooted collectives use the last rank as root, so relabelling is exercised.
        pairs = ours_and_reference(
            range(len(xs)), [x[0] for x in xs],
            lambda _, x: call_collective(primitive, algorithm, x, axis, root=n - 1),
            lambda _, x: call_collective(primitive, "xla", x, axis, root=n - 1))
        return jax.tree_util.tree_map(lambda y: y[None], pairs)

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(axis), out_specs=P(axis)))


def _inputs(primitive: str, n: int, counts: list[int], rng) -> list:
    """(n ranks, count) small integers as float32, so sums are exact in any order.

    reduce_scatter, scatter and alltoall need a multiple of n per rank: their counts are
    rounded up.
    """
    if primitive in SCATTERING:
        counts = [-(-count // n) * n for count in counts]
    return [jnp.asarray(rng.integers(-8, 9, size=(n, count)), jnp.float32) for count in counts]


def run_checks(n: int, counts: list[int], seed: int = 0, quick: bool = False) -> list[Row]:
    """Check each of :func:`cases` on the first ``n`` devices at ``counts`` elements."""
    return [row for rows in iter_checks(n, counts, seed, quick) for row in rows]


def iter_checks(n: int, counts: list[int], seed: int = 0, quick: bool = False):
    """:func:`run_checks` as it goes: each case's rows (one per count) as soon as its program
    has run."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for primitive, algorithm, levels in cases(n, quick):
        if primitive not in inputs:
            inputs[primitive] = _inputs(primitive, n, counts, rng)
        results = _program(primitive, algorithm, n, levels)(inputs[primitive])
        shape = level_shape(n, 3) if levels == 3 else ()
        yield [Row(primitive, algorithm, n, x[0].nbytes, _largest_difference(ours, reference),
                   shape) for x, (ours, reference) in zip(inputs[primitive], results)]


def _largest_difference(ours, reference) -> float:
    """max |ours - reference| over the blocks this process holds (across processes, each
    process checks its own ranks' results)."""
    pairs = zip(local_blocks(ours), local_blocks(reference))
    return max((float(np.max(np.abs(a - b), initial=0.0)) for a, b in pairs), default=0.0)


HEADER = f"{'primitive':<16}{'algorithm':<22}{'n':>4}{'bytes':>12}{'max error':>12}  ok"


def format_row(r: Row) -> str:
    return (f"{r.primitive:<16}{r.label:<22}{r.n:>4}{r.nbytes:>12}{r.max_error:>12.3g}  "
            f"{'yes' if r.ok else 'NO'}")


def format_table(rows: list[Row]) -> str:
    return "\n".join([HEADER, "-" * len(HEADER)] + [format_row(r) for r in rows])
