"""Calibration, the algorithm ranking behind auto, and auto end to end."""

import jax.numpy as jnp
import pytest

import jaxcoll
from helpers import AXIS, assert_same, exact_inputs, ours_and_reference, per_rank
from jaxcoll.tools import auto
from jaxcoll.analysis.model import Calibration

LATENCY_BOUND = Calibration(alpha=1e-3, beta=1e-15, gamma=0.0, backend="test")
BANDWIDTH_BOUND = Calibration(alpha=1e-12, beta=1e-6, gamma=0.0, backend="test")


def test_calibrate_measures_positive_numbers_and_round_trips(tmp_path):
    cal = jaxcoll.calibrate(4, sizes=(1 << 8, 1 << 22), steps=2, repeats=3)
    assert cal.backend == "cpu" and cal.alpha >= 0 and cal.beta > 0 and cal.gamma >= 0
    assert Calibration.load(cal.save(tmp_path / "cal.json")) == cal


def test_shipped_calibrations_load():
    """One per transport: one process of fake devices, processes over gloo, GPUs; this one
    process is "cpu"."""
    for backend in ("cpu", "gloo", "gpu"):
        cal = jaxcoll.calibration(backend)
        assert cal.alpha > 0 and cal.beta > 0 and cal.source and cal.backend == backend
    assert jaxcoll.calibration("gloo").links == "shared"
    assert jaxcoll.tools.distributed.transport() == "cpu"
    assert jaxcoll.calibration() is jaxcoll.calibration("cpu")


def test_set_calibration_is_used_for_its_backend():
    before = jaxcoll.calibration("test")
    jaxcoll.set_calibration(LATENCY_BOUND)
    try:
        assert jaxcoll.calibration("test") is LATENCY_BOUND
    finally:
        auto._current.pop("test")
    assert jaxcoll.calibration("test") == before


def test_ranking_follows_the_textbook():
    # Latency-bound: fewest messages win (binomial broadcast, recursive doubling allreduce,
    # Bruck allgather); bandwidth-bound: the bandwidth-optimal ones (scatter_allgather
    # broadcast: auto leaves the chain out; ring allreduce, which moves halving_doubling's bytes
    # in one message a round).
    assert jaxcoll.choose("broadcast", 8, 1024, LATENCY_BOUND) == "binomial"
    assert jaxcoll.choose("broadcast", 8, 1 << 24, BANDWIDTH_BOUND) == "scatter_allgather"
    assert jaxcoll.choose("allreduce", 8, 1024, LATENCY_BOUND) == "recursive_doubling"
    assert jaxcoll.choose("allreduce", 8, 1 << 24, BANDWIDTH_BOUND) in ("ring", "halving_doubling")
    assert jaxcoll.choose("allgather", 6, 1024, LATENCY_BOUND) == "bruck"


def test_timings_rank_by_interpolated_measurements(tmp_path, capsys):
    """Recursive doubling 0.5 -> 4 ms and the ring 1 -> 2 ms from 1 KiB to 1 MiB: lines (exact
    for α + bytes·β) that cross at a fifth of the way; below 1 KiB the times of 1 KiB, above
    1 MiB times that grow with the bytes; algorithms without timings are left out."""
    timed = Calibration(alpha=1e-12, beta=1e-6, gamma=0.0, backend="test", timings=(
        ("allreduce", 8, "recursive_doubling", 1 << 10, 0.5e-3),
        ("allreduce", 8, "recursive_doubling", 1 << 20, 4e-3),
        ("allreduce", 8, "ring", 1 << 10, 1e-3), ("allreduce", 8, "ring", 1 << 20, 2e-3)))
    halfway = ((1 << 10) + (1 << 20)) / 2
    assert timed.measured("allreduce", 8, "ring", halfway) == pytest.approx(1.5e-3)
    assert timed.measured("allreduce", 8, "ring", 1 << 22) == pytest.approx(8e-3)
    assert timed.measured("allreduce", 8, "ring", 1) == pytest.approx(1e-3)
    assert timed.measured("allreduce", 4, "ring", 1024) is None
    picks = [jaxcoll.choose("allreduce", 8, size, timed) for size in (1, 1 << 16, 1 << 19, 1 << 24)]
    assert picks == ["recursive_doubling", "recursive_doubling", "ring", "ring"]
    assert [name for name, _ in jaxcoll.analysis.model.ranking("allreduce", 8, 1 << 19, timed)] == [
        "ring", "recursive_doubling"]
    assert jaxcoll.choose("allreduce", 8, 1 << 16, timed.plain()) != "recursive_doubling"
    assert jaxcoll.choose("allreduce", 4, 1, timed) == jaxcoll.choose("allreduce", 4, 1, timed.plain())
    jaxcoll.explain("allreduce", 8, 1 << 16, timed)
    assert "(time measured on this machine)" in capsys.readouterr().out
    assert Calibration.load(timed.save(tmp_path / "timed.json")) == timed


def test_allgather_and_gather_are_priced_on_their_output():
    """auto passes one rank's input; allgather's and gather's schedules move n times it: the
    ring allgather's busiest rank sends n - 1 inputs, a naive gather's one, as cost() of their
    schedules on the output."""
    n, nbytes = 8, 1 << 20
    for primitive, name, sends in (("allgather", "ring", n - 1), ("gather", "naive", 1)):
        ranked = dict(jaxcoll.analysis.model.ranking(primitive, n, nbytes, BANDWIDTH_BOUND))
        on_output = jaxcoll.cost(jaxcoll.schedule(primitive, name, n), n * nbytes,
                                 alpha=BANDWIDTH_BOUND.alpha, beta=BANDWIDTH_BOUND.beta)
        assert ranked[name].seconds == pytest.approx(on_output.seconds)
        assert ranked[name].bytes_sent == pytest.approx(sends * nbytes)


def test_swing_and_pat_take_their_relatives_factors():
    """Without factors of their own, Swing is priced with halving-doubling's and PAT with
    Bruck's (its reduce_scatter with halving-doubling's); where the model prices them the same
    as another algorithm, auto keeps to the other (nothing says the newcomer is faster)."""
    cpu = jaxcoll.analysis.model.shipped("cpu")
    for primitive, name, relative in (("allreduce", "swing", "halving_doubling"),
                                      ("allgather", "pat", "bruck"),
                                      ("reduce_scatter", "pat", "halving_doubling")):
        assert name in jaxcoll.analysis.model.auto_candidates(primitive)
        assert cpu.factors(primitive, name) == cpu.factors(primitive, relative) != (1.0, 1.0)
        assert cpu.plain().factors(primitive, name) == (1.0, 1.0)
    ranked = dict(jaxcoll.analysis.model.ranking("allgather", 6, 1024, LATENCY_BOUND))
    assert ranked["pat"].seconds == pytest.approx(ranked["bruck"].seconds)
    assert jaxcoll.choose("allgather", 6, 1024, LATENCY_BOUND) == "bruck"
    assert jaxcoll.choose("allreduce", 8, 1 << 20, cpu) != "swing"


def test_explain_prints_the_ranking(capsys):
    ranked = jaxcoll.explain("allreduce", 8, 1 << 20, BANDWIDTH_BOUND)
    out = capsys.readouterr().out
    assert [name for name, _ in ranked] == [line.split()[0] for line in out.splitlines()[1:]]
    assert ranked[0][1].seconds <= ranked[-1][1].seconds


@pytest.mark.parametrize("count", [7, 300_000])
def test_auto_matches_reference(count):
    n = 8
    x = exact_inputs(n, (count,), jnp.float32)
    calls = {"allreduce": lambda v, a: jaxcoll.allreduce(v, AXIS, algorithm=a),
             "broadcast": lambda v, a: jaxcoll.broadcast(v, AXIS, root=5, algorithm=a),
             "reduce": lambda v, a: jaxcoll.reduce(v, AXIS, root=2, algorithm=a)}
    program = per_rank(lambda b: ours_and_reference(list(calls), [b] * 3,
                                                    lambda p, v: calls[p](v, "auto"),
                                                    lambda p, v: calls[p](v, "xla")), n)
    for got, want in program(x):
        assert_same(got, want)


def test_fit_keeps_the_small_sizes_latency():
    """α comes from where it dominates: a noisy large point must not drag it to zero."""
    from jaxcoll.analysis.model import _fit_line

    sizes = [256, 4096, 65536, 1 << 20, 1 << 22]
    alpha, beta = 200e-6, 2e-9
    seconds = [alpha + beta * s for s in sizes]
    seconds[-1] *= 1.3  # the largest point 30% slow, as on a busy machine
    fitted_alpha, fitted_beta = _fit_line(sizes, seconds)
    assert abs(fitted_alpha - alpha) / alpha < 0.1
    assert abs(fitted_beta - beta) / beta < 0.35


def test_per_algorithm_factors_are_measured_saved_and_used(tmp_path):
    cal = jaxcoll.calibrate(4, sizes=(1 << 8, 1 << 16), steps=2, repeats=2,
                            primitives=("broadcast",), algorithm_sizes=(1 << 10, 1 << 14))
    measured = {algorithm: (latency, bandwidth)
                for primitive, algorithm, latency, bandwidth in cal.per_algorithm}
    assert set(measured) == set(jaxcoll.algorithms("broadcast")) - {"auto", "xla"}
    assert all(latency > 0 and bandwidth > 0 for latency, bandwidth in measured.values())
    assert Calibration.load(cal.save(tmp_path / "cal.json")) == cal
    assert cal.plain().per_algorithm == () and cal.factors("allreduce", "ring") == (1.0, 1.0)


def test_ranking_applies_the_factors():
    """A factor scales its algorithm's α part or its β-γ part, nothing else."""
    from jaxcoll.analysis.model import ranking

    slow_binomial = Calibration(alpha=1e-3, beta=1e-15, gamma=0.0, backend="test",
                                per_algorithm=(("broadcast", "binomial", 10.0, 1.0),))
    plain = dict(ranking("broadcast", 8, 1024, LATENCY_BOUND))
    scaled = dict(ranking("broadcast", 8, 1024, slow_binomial))
    assert jaxcoll.choose("broadcast", 8, 1024, LATENCY_BOUND) == "binomial"
    assert jaxcoll.choose("broadcast", 8, 1024, slow_binomial) != "binomial"
    latency_part = plain["binomial"].messages * 1e-3
    assert scaled["binomial"].seconds == pytest.approx(
        plain["binomial"].seconds + 9 * latency_part)
    assert scaled["tree"].seconds == plain["tree"].seconds


def test_no_schedule_beats_the_lower_bounds():
    """Every registered schedule, every primitive, n = 1..24 (hierarchical ones on 2 x n/2,
    and on 2 x 2 x n/4 too): at least ceil(log2 n) rounds, and at least the bounds' bytes sent
    and reduced on the critical path (the model's β and γ coefficients); the ring reaches the
    bandwidth bound, recursive doubling the latency bound at powers of two."""
    from jaxcoll.ir.families import SCHEDULES, build_schedule
    for primitive, entries in SCHEDULES.items():
        for algorithm, entry in entries.items():
            for n, shape in ((n, shape) for n in range(1, 25) for shape in (
                    [(2, n // 2)] * (n % 2 == 0) + [(2, 2, n // 4)] * (n % 4 == 0)
                    if entry.two_level else [n])):
                schedule = build_schedule(primitive, algorithm, shape)
                bound = jaxcoll.bounds(primitive, n, 1.0, BANDWIDTH_BOUND)
                beta = jaxcoll.cost(schedule, 1.0, alpha=0.0, beta=1.0).seconds
                gamma = jaxcoll.cost(schedule, 1.0, alpha=0.0, beta=0.0, gamma=1.0).seconds
                what = (primitive, algorithm, n)
                assert schedule.n_rounds >= bound.rounds, what
                assert beta >= bound.path_bytes * (1 - 1e-12), what
                assert gamma >= bound.path_reduced * (1 - 1e-12), what
    for n in (2, 5, 8):
        ring = build_schedule("allreduce", "ring", n)
        assert jaxcoll.cost(ring, 1.0, alpha=0.0, beta=1.0).seconds == pytest.approx(
            jaxcoll.bounds("allreduce", n, 1.0).path_bytes)
    assert build_schedule("allreduce", "recursive_doubling", 16).n_rounds == 4


def test_chain_pieces_minimise_the_model():
    """The chain's piece count is the model's minimum of (n - 2 + k)(α + N/k·β) (checked
    against every k from 1 to 64), and its time approaches the bandwidth bound N·β."""
    from jaxcoll.ir.families import build_schedule
    from jaxcoll.analysis.model import MAX_MODEL_PIECES, chain_pieces
    gpu = jaxcoll.calibration("gpu")
    for n, nbytes in ((8, 1 << 20), (8, 1 << 24), (16, 1 << 26), (3, 1 << 20)):
        def seconds(k):
            return jaxcoll.cost(build_schedule("broadcast", "chain", n, 0, k), nbytes,
                                alpha=gpu.alpha, beta=gpu.beta).seconds
        chosen = chain_pieces(n, nbytes, gpu)
        best = min(range(1, MAX_MODEL_PIECES + 1), key=seconds)
        assert seconds(chosen) <= 1.01 * seconds(best), (n, nbytes, chosen, best)
    k = chain_pieces(8, 1 << 32, gpu)
    chain = jaxcoll.cost(build_schedule("broadcast", "chain", 8, 0, k), 1 << 32,
                         alpha=gpu.alpha, beta=gpu.beta).seconds
    assert chain < 1.3 * jaxcoll.bounds("broadcast", 8, 1 << 32, gpu).seconds


def test_a_shared_host_is_fitted_from_the_algorithms_times():
    """links="shared": α per round, overhead per message and β per byte of one medium, fitted
    to every algorithm's time (here made by that model: recovered exactly), then used by
    ranking and bounds with no per-algorithm factors; a misnamed links is refused."""
    from jaxcoll.tools.timing import _shared_fit
    from jaxcoll.analysis.topology import shared, simulate
    truth = Calibration(alpha=3e-4, beta=5e-10, gamma=0.0, backend="gloo", links="shared",
                        overhead=6e-5)
    n, points = 8, {}
    for primitive in ("allreduce", "broadcast"):
        points[primitive] = [
            (name, nbytes, simulate(jaxcoll.schedule(primitive, name, n), nbytes,
                                    shared(n, alpha=3e-4, beta=5e-10, overhead=6e-5)).seconds)
            for name in ("ring", "recursive_doubling", "naive") if name in
            jaxcoll.algorithms(primitive) for nbytes in (4096.0, 1 << 20, 1 << 24)]
    plain = Calibration(alpha=1.0, beta=1.0, gamma=0.0, backend="gloo")
    fitted = _shared_fit(plain, n, points)
    assert (fitted.links, fitted.per_algorithm) == ("shared", ())
    assert (fitted.alpha, fitted.overhead, fitted.beta) == pytest.approx(
        (truth.alpha, truth.overhead, truth.beta), rel=1e-6)
    ranked = dict(jaxcoll.analysis.model.ranking("allreduce", n, 1 << 24, fitted))
    ring = jaxcoll.schedule("allreduce", "ring", n)
    on_host = simulate(ring, 1 << 24, fitted.topology(n)).seconds
    assert ranked["ring"].seconds == pytest.approx(on_host)
    assert jaxcoll.bounds("allreduce", n, 1 << 24, fitted).seconds <= ranked["ring"].seconds
    with pytest.raises(ValueError, match="links='bus'"):
        jaxcoll.calibrate(4, links="bus")
    with pytest.raises(ValueError, match="'shared' with primitives"):
        jaxcoll.calibrate(4, links="shared")
