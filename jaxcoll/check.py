"""The main job: every primitive x algorithm x a few sizes against the ``xla`` reference.

Inputs are small integers stored as float32, so every sum is exact in any order and a correct
algorithm matches the built-in with zero error (the nccl-tests "#wrong" convention).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from . import collectives
from .families import SCHEDULES, two_level
from .distributed import local_blocks
from ._compat import serialize_collectives
from .execute import after
from .records import RECORDS

AXIS = "ranks"
LEVELS = ("outer", "inner")  # the tuple axis two-level algorithms run on
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

    @property
    def ok(self) -> bool:
        return self.max_error == 0.0


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


def two_level_shape(n: int) -> tuple[int, int]:
    """(outer, inner) for n ranks: outer is n's smallest prime factor (2 x 4 for 8, like 2
    nodes of 4 GPUs; 5 x 1 for 5)."""
    outer = next(f for f in range(2, n + 1) if n % f == 0) if n > 1 else 1
    return outer, n // outer


def two_level_mesh(n: int, devices=None) -> Mesh:
    """The first n devices (of ``devices``, default all) as an (outer, inner) mesh; across
    processes, all of them as (process, local device): the inner level inside a process."""
    devices = jax.devices() if devices is None else devices
    shape = two_level_shape(n)
    if jax.process_count() > 1 and n == len(devices):
        devices = sorted(devices, key=lambda device: (device.process_index, device.id))
        shape = (jax.process_count(), n // jax.process_count())  # row p: process p's devices
    return Mesh(np.array(devices[:n]).reshape(shape), LEVELS)


def ours_and_reference(cases, inputs, ours, reference) -> list:
    """``[(ours(case, x), reference(case, x))]`` for many independent collectives in one
    program; on jaxlib 0.10 CPU each waits for the one before (README: sharp bits)."""
    chain = after if serialize_collectives() else (lambda x, _: x)
    results, previous = [], ()
    for case, x in zip(cases, inputs):
        mine = ours(case, chain(x, previous))
        previous = reference(case, chain(x, mine))
        results.append((mine, previous))
    return results


def _program(primitive: str, algorithm: str, n: int):
    """One jitted program on the first n devices: (ours, reference) for each input, every
    rank's results stacked. Two-level algorithms run on the (outer, inner) tuple axis."""
    if two_level(primitive, algorithm):
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


def run_checks(n: int, counts: list[int], seed: int = 0) -> list[Row]:
    """Check every (primitive, algorithm) on the first ``n`` devices at ``counts`` elements."""
    rng = np.random.default_rng(seed)
    rows = []
    for primitive, schedules in SCHEDULES.items():
        inputs = _inputs(primitive, n, counts, rng)
        for algorithm in sorted(schedules):
            results = _program(primitive, algorithm, n)(inputs)
            for x, (ours, reference) in zip(inputs, results):
                rows.append(Row(primitive, algorithm, n, x[0].nbytes,
                                _largest_difference(ours, reference)))
    return rows


def _largest_difference(ours, reference) -> float:
    """max |ours - reference| over the blocks this process holds (across processes, each
    process checks its own ranks' results)."""
    pairs = zip(local_blocks(ours), local_blocks(reference))
    return max((float(np.max(np.abs(a - b), initial=0.0)) for a, b in pairs), default=0.0)


def format_table(rows: list[Row]) -> str:
    header = f"{'primitive':<16}{'algorithm':<22}{'n':>4}{'bytes':>12}{'max error':>12}  ok"
    lines = [header, "-" * len(header)]
    lines += [f"{r.primitive:<16}{r.algorithm:<22}{r.n:>4}{r.nbytes:>12}{r.max_error:>12.3g}  "
              f"{'yes' if r.ok else 'NO'}" for r in rows]
    return "\n".join(lines)
