"""The plain reference runner (jaxcoll/lowering/reference_runner.py: one ppermute per matching
of every round, no plan) is the oracle of the XLA executor: every registered schedule, rooted
ones from a root that is not 0, hierarchical ones on their levels, run both ways on the same
integer-valued inputs, agree bit for bit (n = 5 by default; 6, 5, 3, 4, 7 and 8 with --deep)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from helpers import AXIS, mesh
from jaxcoll.ir.families import SCHEDULES, build_schedule, two_level
from jaxcoll.lowering import reference_runner
from jaxcoll.lowering.execute import execute
from jaxcoll.tools.check import level_shape


def _schedules(n: int) -> list:
    """Every registered schedule on n ranks (two-level ones on level_shape(n)'s levels)."""
    found = []
    for primitive, algorithms in SCHEDULES.items():
        for algorithm, entry in algorithms.items():
            ranks = level_shape(n) if two_level(primitive, algorithm) else n
            found.append(build_schedule(primitive, algorithm, ranks, root=n - 1 if entry.rooted
                                        else 0, pieces=2))
    return found


def pytest_generate_tests(metafunc):
    if "n" in metafunc.fixturenames:
        deep = metafunc.config.getoption("--deep")
        metafunc.parametrize("n, ops", [(n, ops) for n in ((6, 5, 3, 4, 7, 8) if deep else (5,))
                                        for ops in ((("sum",), ("max",)) if deep
                                                    else (("sum", "max"),))])


def test_the_executor_runs_every_schedule_as_the_reference_runner_does(n, ops):
    """One program: schedule i combines with ops[i % len(ops)] (sum and max alternate by
    default, so both reach the executor's reduces; --deep runs each op over every schedule)."""
    schedules = _schedules(n)
    combines = [{"sum": lax.add, "max": lax.max}[ops[i % len(ops)]]
                for i in range(len(schedules))]
    rng = np.random.default_rng(n)
    xs = [jnp.asarray(rng.integers(-9, 10, size=(n, s.n_chunks, 3)), jnp.float32)
          for s in schedules]

    def body(*blocks):
        pairs = [(reference_runner.run(s, b[0], AXIS, c), execute(s, b[0], AXIS, c))
                 for s, b, c in zip(schedules, blocks, combines)]
        return [(ref[None], ours[None]) for ref, ours in pairs]

    program = jax.jit(jax.shard_map(body, mesh=mesh(n), in_specs=P(AXIS), out_specs=P(AXIS)))
    for schedule, x, combine, (ref, ours) in zip(schedules, xs, combines, program(*xs)):
        np.testing.assert_array_equal(ours, ref, err_msg=repr(schedule))
        if schedule.collective == "allreduce":  # the oracle itself against numpy
            reduced = (np.sum if combine is lax.add else np.max)(np.asarray(x), axis=0)
            np.testing.assert_array_equal(ref, np.broadcast_to(reduced, ref.shape),
                                          err_msg=repr(schedule))
