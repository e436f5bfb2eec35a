"""Shared meshes, cached jitted shard_maps, exact comparisons and a watchdog for the tests."""

import contextlib
import faulthandler
import re
import sys
import threading
import time
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, PartitionSpec as P

from jaxcoll.lowering import _compat
from jaxcoll.tools.check import ours_and_reference  # noqa: F401 (re-exported for the tests)

AXIS = "i"
DTYPES = (jnp.float32, jnp.bfloat16, jnp.int32)
COUNTS = (0, 1, 4, 7, 100, 10000)  # elements per rank: empty, one, fewer and more than n, odd
HLO_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")


@lru_cache(maxsize=None)
def mesh(n: int, shape: tuple[int, ...] | None = None, names: tuple[str, ...] = (AXIS,)) -> Mesh:
    """A mesh of the first n CPU devices (reshaped to ``shape`` when given)."""
    devices = np.array(jax.devices()[:n]).reshape(shape or (n,))
    return Mesh(devices, names)


@lru_cache(maxsize=None)
def per_rank(fn, n: int, check_vma: bool = True):
    """jit(shard_map(fn)) over n ranks: every argument and result has a leading rank axis.

    ``fn`` sees each argument (a pytree) without its rank axis and returns a pytree of
    per-rank arrays.
    """
    def body(*args):
        out = fn(*jax.tree_util.tree_map(lambda a: a[0], args))
        return jax.tree_util.tree_map(lambda y: y[None], out)

    return jax.jit(jax.shard_map(body, mesh=mesh(n), in_specs=P(AXIS), out_specs=P(AXIS),
                                 check_vma=check_vma))


def exact_inputs(n: int, shape, dtype, seed: int = 0) -> jnp.ndarray:
    """(n, *shape) small integers in ``dtype``: every sum of them is exact in any order."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(-8, 9, size=(n, *shape)), dtype=dtype)


def assert_same(got, want, what: str = "") -> None:
    """Equal shapes, dtypes and values, bit for bit."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
    np.testing.assert_array_equal(got, want, err_msg=what)


def ours_vs_xla(cases, call, algorithm: str, n: int):
    """One jitted program on n ranks: (call(case, algorithm, x), call(case, "xla", x)) for
    each case and its input."""
    def fn(xs):
        return ours_and_reference(cases, xs, lambda c, x: call(c, algorithm, x),
                                  lambda c, x: call(c, "xla", x))
    return per_rank(fn, n)


def count_permutes(hlo: str) -> int:
    """collective-permute ops in compiled HLO text."""
    return len(re.findall(r"= \S+ collective-permute(?:-start)?\(", hlo))


def other_collectives(hlo: str) -> list[str]:
    """The collective ops other than collective-permute in compiled HLO text."""
    return [op for op in HLO_COLLECTIVES if re.search(rf"\b{op}(-start)?\(", hlo)]


def grad_of(fn, grid: Mesh, axes):
    """jit(grad) of a scalar loss of ``fn`` run per rank over ``axes`` of ``grid`` (fn sees each
    rank's row of the (ranks, ...) input)."""
    collective = jax.shard_map(lambda x: fn(x[0])[None], mesh=grid, in_specs=P(axes),
                               out_specs=P(axes))

    def loss(x):
        out = collective(x)
        return jnp.sum(jnp.sin(out) * jnp.cos(jnp.arange(out.size).reshape(out.shape)))

    return jax.jit(jax.grad(loss))


# the last-resort deadlines (time.monotonic()) of the watchdogs open now, innermost last
_BACKSTOPS: list[float] = []


def _arm_backstop() -> None:
    """faulthandler's one timer set to the nearest open deadline (or cancelled: none open)."""
    if _BACKSTOPS:
        faulthandler.dump_traceback_later(max(min(_BACKSTOPS) - time.monotonic(), 0.001),
                                          exit=True, file=sys.__stderr__)
    else:
        faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def watchdog(seconds: float, what: str = "the call", grace: float = 60.0):
    """Fail the test if the body runs past ``seconds``, instead of hanging the test run.

    A thread cannot be killed, and a hung interpreted kernel waits in the interpreter's own
    threads: from the bound on, a timer thread fails every kernel Pallas's interpret mode runs
    (``_compat.interpreter_abort``: each simulated device raises at its next semaphore wait,
    a kernel started later at its first step), so the call waiting on them raises in the
    test's thread; the watchdog then waits for their callbacks to end, resets the interpreter
    and fails the test (pytest.fail, also from a fixture's teardown). A hang that this cannot
    end (outside the interpreter) meets the last resort ``grace`` seconds later: faulthandler
    writes every thread's stack to stderr and ends the process (pytest-xdist, as CI runs the
    tests, reports the test as crashed and goes on with a new worker; without xdist the run
    stops there). Watchdogs nest.

    Args:
      seconds: the bound on the body's wall time.
      what: the body, as the failure names it.
      grace: seconds after the bound before the last resort.

    Raises:
      pytest.fail.Exception: the body ran past ``seconds``.
    """
    fired, ended = threading.Event(), threading.Event()

    def abort_until_ended():
        if ended.wait(seconds):
            return
        fired.set()
        while not ended.is_set():
            _compat.interpreter_abort(TimeoutError(f"watchdog: {what} ran past {seconds:g} s"))
            ended.wait(0.1)

    timer = threading.Thread(target=abort_until_ended, daemon=True)
    _BACKSTOPS.append(time.monotonic() + seconds + grace)
    _arm_backstop()
    timer.start()
    error = None
    try:
        yield
    except Exception as raised:  # noqa: BLE001 (raised again below unless past the bound)
        error = raised
    finally:
        ended.set()
        timer.join()
        try:
            if fired.is_set():
                _compat.effects_settled()  # the failed kernels' callbacks have ended
                pltpu.reset_tpu_interpret_mode_state()
        finally:
            _BACKSTOPS.pop()
            _arm_backstop()
    if fired.is_set():
        cause = "" if error is None else f"; it raised {type(error).__name__}"
        pytest.fail(f"watchdog: {what} ran past {seconds:g} s (its interpreted kernels were "
                    f"failed to end it{cause})", pytrace=False)
    if error is not None:
        raise error
