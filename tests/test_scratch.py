"""Scratch chunks, local transfers and out-of-place schedules (what MSCCL's buffers need):
verified, priced, drawn and run like any other schedule, and equal to lax."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, assert_same, exact_inputs, mesh
from jaxcoll import Round, Schedule, ScheduleError, Transfer
from jaxcoll.tools import pictures
from jaxcoll.analysis import topology
from jaxcoll.ir.symbolic import dual


def allpairs_allreduce(n: int) -> Schedule:
    """An out-of-place all-pairs allreduce in MSCCL's style: chunks [o_0..o_n-1 | i_0..i_n-1 |
    s_0..s_n-2]; every rank sends input chunk c to rank c's scratch slot and copies its own into
    its output, adds the n - 1 slots in (local reduces), then sends its finished chunk to all."""
    out, inp, slot = 0, n, 2 * n
    receive = [Transfer(r, c, inp + c, False, into=slot + (r if r < c else r - 1))
               for r in range(n) for c in range(n) if c != r]
    own = [Transfer(r, r, inp + r, False, into=out + r) for r in range(n)]
    add = [Transfer(r, r, slot + j, True, into=out + r) for r in range(n) for j in range(n - 1)]
    share = [Transfer(r, c, out + r, False) for r in range(n) for c in range(n) if c != r]
    return Schedule(f"all-pairs allreduce {n}", n, n, (Round(receive + own), Round(add),
                                                       Round(share)), "allreduce",
                    n_scratch=2 * n - 1, input_at=n)


def _run(schedule, x, primitive="allreduce", **kwargs):
    fn = getattr(jaxcoll, primitive)
    body = jax.shard_map(lambda b: fn(b[0], AXIS, algorithm=schedule, **kwargs)[None],
                         mesh=mesh(schedule.n_ranks), in_specs=P(AXIS), out_specs=P(AXIS))
    return jax.jit(body)(x)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_an_out_of_place_schedule_with_scratch_runs_as_psum(n):
    """Verified, equal to psum, and its gradient (the same schedule on the cotangent) equal to
    psum's."""
    schedule = allpairs_allreduce(n)
    jaxcoll.verify(schedule)
    x = exact_inputs(n, (7,), jnp.float32)
    psum = jax.jit(jax.shard_map(lambda b: lax.psum(b[0], AXIS)[None], mesh=mesh(n),
                                 in_specs=P(AXIS), out_specs=P(AXIS)))
    assert_same(_run(schedule, x), psum(x))
    loss = lambda f: lambda v: jnp.sum(jnp.sin(f(v)))  # noqa: E731
    np.testing.assert_allclose(jax.grad(loss(lambda v: _run(schedule, v)))(x),
                               jax.grad(loss(psum))(x), rtol=1e-6)


def test_local_transfers_cross_no_link():
    """A local copy or reduce costs no α or β (a reduce its γ) and loads no link."""
    schedule = allpairs_allreduce(4)
    priced = jaxcoll.cost(schedule, 4096, alpha=1e-6, beta=1e-9, gamma=1e-10)
    # rounds 0 and 2: one ppermute per matching of remote transfers; round 1 is local only
    assert priced.messages == 3 + 3 and priced.bytes_sent == 3 * 1024 + 3 * 1024
    local = Schedule("local", 4, 4, (Round([Transfer(0, 0, 1, True, into=2)]),), "",
                     n_scratch=0)
    assert jaxcoll.cost(local, 4096, alpha=1e-6, beta=1e-9).seconds == 0.0
    sim = topology.simulate(local, 4096, topology.switch(4, alpha=1e-6, beta=1e-9))
    assert sim.seconds == 0.0 and not sim.link_bytes().any()


def test_the_output_starts_empty_out_of_place():
    """Out of place, the output chunks hold nothing before the first round: a schedule that
    sends one before writing it is refused (MSCCL's output buffer starts as garbage), as is
    one that leaves an output chunk unwritten; scratch is promised nothing."""
    n = 3
    schedule = allpairs_allreduce(n)
    early = Schedule("early", n, n, (Round([Transfer(0, 1, 0, False)]),) + schedule.rounds,
                     "allreduce", n_scratch=2 * n - 1, input_at=n)
    with pytest.raises(ScheduleError, match="rank 0 sends chunk 0 to rank 1 before it holds"):
        jaxcoll.verify(early)
    unshared = Schedule("unshared", n, n, schedule.rounds[:2], "allreduce",
                        n_scratch=2 * n - 1, input_at=n)
    with pytest.raises(ScheduleError, match="rank 0 chunk 1 holds \\[\\]"):
        jaxcoll.verify(unshared)
    with pytest.raises(ScheduleError, match="input_at=2 must be 0 .* or a run of 3 scratch"):
        Schedule("x", n, n, (), "allreduce", n_scratch=5, input_at=2)
    with pytest.raises(ScheduleError, match="moves a chunk onto itself"):
        Transfer(1, 1, [2, 3], False, into=[2, 4])


def test_out_of_place_reduce_scatter_and_its_dual():
    """An out-of-place ring reduce_scatter (its input in scratch, the ring's first round a
    local copy), and the dual schedule grad runs (an allgather from the output chunks back to
    the input's): both verified; values and gradient equal lax's."""
    n = 4
    ring = jaxcoll.schedule("reduce_scatter", "ring", n)
    copy = Round([Transfer(0, 0, list(range(n, 2 * n)), False, into=list(range(n)))],
                 jaxcoll.Symmetry("rotate", n, stride=0, modulus=2 * n))  # every rank: in -> out
    schedule = Schedule("out-of-place ring", n, n, (copy,) + ring.rounds, "reduce_scatter",
                        n_scratch=n, input_at=n)
    jaxcoll.verify(schedule)
    back = dual(schedule)
    assert (back.input_at, back.output_at) == (0, n) and back.collective == "allgather"
    jaxcoll.verify(back)
    x = exact_inputs(n, (n, 3), jnp.float32)

    def lax_rs(v):
        return jax.jit(jax.shard_map(lambda b: lax.psum_scatter(b[0], AXIS)[None], mesh=mesh(n),
                                     in_specs=P(AXIS), out_specs=P(AXIS)))(v)
    assert_same(_run(schedule, x, "reduce_scatter"), lax_rs(x))
    loss = lambda f: lambda v: jnp.sum(jnp.sin(f(v)))  # noqa: E731
    np.testing.assert_allclose(
        jax.grad(loss(lambda v: _run(schedule, v, "reduce_scatter")))(x),
        jax.grad(loss(lax_rs))(x), rtol=1e-6)


def test_alltoall_with_several_chunks_per_block():
    """alltoall's promise holds for k chunks per block (it assumed one): a pairwise exchange
    of 2-chunk blocks on 3 ranks verifies and runs equal to lax.all_to_all."""
    n, k = 3, 2
    half = n * k
    rounds = [Round([Transfer(r, (r + d) % n, [((r + d) % n) * k + j for j in range(k)], False,
                              into=[half + r * k + j for j in range(k)]) for r in range(n)])
              for d in range(1, n)]
    schedule = Schedule("2-chunk pairwise alltoall", n, 2 * half, tuple(rounds), "alltoall")
    jaxcoll.verify(schedule)
    x = exact_inputs(n, (n, 4), jnp.float32)
    want = jax.jit(jax.shard_map(lambda b: lax.all_to_all(b[0], AXIS, 0, 0)[None], mesh=mesh(n),
                                 in_specs=P(AXIS), out_specs=P(AXIS)))(x)
    assert_same(_run(schedule, x, "alltoall", split_dim=0, concat_dim=0), want)


def test_pictures_name_the_scratch_chunks():
    schedule = allpairs_allreduce(3)
    assert pictures.chunk_labels(schedule) == ["0", "1", "2", "in0", "in1", "in2", "s0", "s1"]
    assert "allreduce" in pictures.html(schedule).text
