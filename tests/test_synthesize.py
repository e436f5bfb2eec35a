"""jaxcoll.synthesize: searched schedules are verified, priced at or below the best registered
algorithm on the presets (and above the bound), deterministic, and run against lax."""

import jax
import numpy as np
import pytest
from jax import lax

import jaxcoll
from jaxcoll.analysis.topology import nodes, ring, switch, torus

from helpers import AXIS, assert_same, exact_inputs, per_rank

PRESETS = {
    "ring": ring(8, alpha=1e-6, beta=1 / 45e9),
    "torus 4x4": torus(4, 4, alpha=1e-6, beta=1 / 45e9),
    "nodes 2x4": nodes(2, 4, nvlink=(3e-6, 1 / 370e9), nic=(1e-5, 1 / 50e9)),
    "switch": switch(8, alpha=5e-6, beta=1 / 370e9),
}
CANDIDATES = 12  # policies searched per call: keeps each call well under a second


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("primitive", ("allgather", "reduce_scatter", "allreduce"))
def test_synthesized_is_verified_and_no_slower_than_registered(preset, primitive):
    """The result verifies, simulate prices it as reported, never above the best registered
    algorithm's time nor below the bound."""
    topology = PRESETS[preset]
    for nbytes in (64 << 10, 64 << 20):
        found = jaxcoll.synthesize(primitive, topology, nbytes, candidates=CANDIDATES)
        jaxcoll.verify(found.schedule)
        assert found.schedule.collective == primitive
        assert found.seconds == jaxcoll.simulate(found.schedule, nbytes, topology).seconds
        assert found.seconds <= found.registered_seconds
        registered = jaxcoll.schedule(primitive, found.best_registered, topology.n) if \
            found.best_registered not in ("hierarchical", "tree", "double_tree") else None
        if registered is not None:  # the ranking's first, priced here independently
            assert found.registered_seconds <= jaxcoll.simulate(
                registered, nbytes, topology).seconds * (1 + 1e-9)
        assert found.seconds >= found.bound.seconds * (1 - 1e-9)
        assert found.speedup >= 1 and found.gap >= 1 - 1e-9


def test_search_beats_the_registered_on_ring_torus_and_nodes():
    """Where links are neighbours only (ring, torus) or two kinds (nodes), the search's own
    schedule is faster than every registered one: by more than 1.2x in these cases."""
    for preset, primitive, nbytes in (("ring", "allgather", 64 << 10),
                                      ("torus 4x4", "reduce_scatter", 64 << 20),
                                      ("nodes 2x4", "allreduce", 64 << 20)):
        found = jaxcoll.synthesize(primitive, PRESETS[preset], nbytes, candidates=CANDIDATES)
        assert found.origin.startswith("search"), (preset, primitive, str(found))
        assert found.registered_seconds > 1.2 * found.searched_seconds, str(found)


def test_deterministic_and_bounded_by_candidates():
    """The same arguments give the same schedule; ``candidates`` bounds the work."""
    topology = PRESETS["torus 4x4"]
    first = jaxcoll.synthesize("allgather", topology, 1 << 20, candidates=5, seed=3)
    again = jaxcoll.synthesize("allgather", topology, 1 << 20, candidates=5, seed=3)
    assert first.schedule == again.schedule and first.candidates == 6  # 5 searched + 1


# ----------------------------------------------------------------------------- running

TOPOLOGY = PRESETS["nodes 2x4"]
FOUND = {primitive: jaxcoll.synthesize(primitive, TOPOLOGY, 64 << 20, candidates=CANDIDATES)
         for primitive in ("allgather", "reduce_scatter", "allreduce")}


def _ours_and_lax(x):
    """Each synthesized schedule and its lax reference on this rank's (8·3,) input."""
    return ((jaxcoll.allgather(x, AXIS, algorithm=FOUND["allgather"].schedule),
             lax.all_gather(x, AXIS)),
            (jaxcoll.reduce_scatter(x, AXIS, tiled=True,
                                    algorithm=FOUND["reduce_scatter"].schedule),
             lax.psum_scatter(x, AXIS, tiled=True)),
            (jaxcoll.allreduce(x, AXIS, algorithm=FOUND["allreduce"].schedule),
             lax.psum(x, AXIS)))


def test_synthesized_schedules_run_like_lax_on_8_devices():
    """The searched schedules (not registered fallbacks) run inside shard_map and match lax
    exactly."""
    assert all(found.origin.startswith("search") for found in FOUND.values())
    x = exact_inputs(8, (8 * 3,), np.float32)
    for ours, reference in jax.device_get(per_rank(_ours_and_lax, 8)(x)):
        assert_same(ours, reference)


def test_bad_arguments_name_themselves():
    topology = PRESETS["ring"]
    with pytest.raises(ValueError, match="primitive='alltoall'"):
        jaxcoll.synthesize("alltoall", topology, 1024)
    with pytest.raises(TypeError, match="topology="):
        jaxcoll.synthesize("allgather", "ring", 1024)
    with pytest.raises(ValueError, match="n=4.*8 ranks"):
        jaxcoll.synthesize("allgather", topology, 1024, n=4)
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="nbytes="):
            jaxcoll.synthesize("allgather", topology, bad)
    with pytest.raises(TypeError, match="nbytes="):
        jaxcoll.synthesize("allgather", topology, "1KiB")
    with pytest.raises(ValueError, match="candidates=0"):
        jaxcoll.synthesize("allgather", topology, 1024, candidates=0)
