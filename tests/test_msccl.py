"""MSCCL's XML in and out (jaxcoll/ir/msccl/): the shapes of RCCL's library, written by our own
generators (tests/msccl_fixtures.py), load, verify and run equal to lax; every registered
schedule's dump runs right under an independent reading of the runtimes' rules
(tests/msccl_checker.py) and loads back to the same transfers; files the runtimes would refuse
are refused, naming the gpu, threadblock and step."""

from collections import Counter

import jax
import jax.numpy as jnp
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
import msccl_checker
import msccl_fixtures as fixtures
from helpers import AXIS, assert_same, exact_inputs, mesh
from jaxcoll.ir import msccl
from jaxcoll.ir.msccl import dumping
from jaxcoll.tools.check import SCATTERING, call_collective
from jaxcoll.ir.families import SCHEDULES, build_schedule
from msccl_fixtures import step, two_gpus

ONE_LEVEL = [(p, a) for p, algorithms in SCHEDULES.items() for a, e in algorithms.items()
             if not e.two_level]


def moves(schedule) -> Counter:
    """Every chunk a schedule moves, as (src, dst, chunk, into, reduce), however grouped."""
    return Counter((t.src, t.dst, c, i, t.reduce) for r in schedule.rounds for t in r
                   for c, i in zip(t.chunks, t.into))


# ----------------------------------------------------------------------------- in

FILES = {  # name: (text, the modes it may run in)
    "fused ring 2": (fixtures.fused_ring_allreduce(2), (True, False)),
    "fused ring 5": (fixtures.fused_ring_allreduce(5), (True, False)),
    "all-pairs 4": (fixtures.allpairs_allreduce(4), (True,)),
    "direct alltoall 3x2": (fixtures.direct_alltoall(3, per=2), (False,)),
    "ring allgather 5": (fixtures.ring_allgather(5), (True,)),
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_the_library_shapes_load_verify_and_match_the_checker(name):
    """rrs that forwards without storing, rrcs, rcs; scratch with nop chains and a fused run of
    re; out-of-place only; k > 1 chunks per alltoall block; in place by aliasing. Each loads in
    every mode the file allows, verifies, and the independent checker agrees it is right."""
    text, modes = FILES[name]
    for inplace in modes:
        schedule = msccl.load(text, inplace=inplace)
        jaxcoll.verify(schedule)
        msccl_checker.check(text, inplace=inplace)
        assert schedule.in_place == inplace


def test_rounds_are_as_early_as_the_data_allow():
    """The all-pairs file's local threadblock adds chunk by chunk in order, but no chunk waits
    for another: one round of sends, one of the fused adds, except that the parser ends a
    chain of re at the threadblock's 16th re (chunk 5's first add at n = 4: the other two
    chain again, in a round of their own after it); the fused ring's rrs forwards in the
    round after it receives, after a local copy of X where R op X is formed."""
    pairs = msccl.load(FILES["all-pairs 4"][0])
    assert pairs.n_rounds == 3 and all(t.src == t.dst for t in pairs.rounds[1])
    assert {(t.chunks, t.into) for t in pairs.rounds[2]} == {((21,), (5,)), ((29,), (5,))}
    ring = msccl.load(FILES["fused ring 5"][0], inplace=True)
    assert ring.n_rounds == 2 * (5 - 1) + 1  # the ring's, and the copies of X for R op X
    assert all(t.src == t.dst and not t.reduce for t in ring.rounds[0])


def _lax_of(primitive: str):
    return {"allreduce": lambda x: lax.psum(x, AXIS),
            "allgather": lambda x: lax.all_gather(x, AXIS),
            "alltoall": lambda x: lax.all_to_all(x, AXIS, 0, 0, tiled=True)}[primitive]


@pytest.mark.parametrize("name", ["fused ring 5", "all-pairs 4", "direct alltoall 3x2",
                                  "ring allgather 5"])
def test_loaded_files_run_equal_to_lax(name):
    text, modes = FILES[name]
    schedules = [msccl.load(text, inplace=inplace) for inplace in modes]
    n, primitive = schedules[0].n_ranks, schedules[0].collective
    x = exact_inputs(n, (2 * n * 3 if primitive in SCATTERING else 7,), jnp.float32)

    def body(b):
        ours = [call_collective(primitive, s, b[0], AXIS) for s in schedules]
        return [o[None] for o in ours] + [_lax_of(primitive)(b[0])[None]]
    out = jax.jit(jax.shard_map(body, mesh=mesh(n), in_specs=P(AXIS), out_specs=P(AXIS)))(x)
    for got in out[:-1]:
        assert_same(got, out[-1], name)


def test_cost_simulate_and_pictures_take_a_loaded_file():
    schedule = msccl.load(FILES["all-pairs 4"][0])
    priced = jaxcoll.cost(schedule, 1 << 20, alpha=1e-6, beta=1e-9)
    assert priced.messages == 3  # one ppermute per peer distance; the adds are local
    topology = jaxcoll.analysis.topology.switch(4, alpha=1e-6, beta=1e-9)
    assert jaxcoll.simulate(schedule, 1 << 20, topology).seconds > 0
    assert "all-pairs" in jaxcoll.tools.pictures.html(schedule).text


def test_a_chain_of_re_runs_with_its_last_count_as_in_the_runtimes():
    """The runtimes' parser fuses ``re s[0] cnt=2 -> i[0]`` and ``re s[2] cnt=1 -> i[0]`` (one
    dst, one srcbuf, no depid) into one reduction of cnt=1: read step by step the file is a
    right allreduce, as the runtimes run it chunk 1 misses a peer. load warns and reads it as
    they run it, so verify refuses it, and so does the checker, written from the runtimes'
    source."""
    text = fixtures.uneven_chain_allreduce(3)
    with pytest.warns(msccl.MscclWarning, match=r"steps 3, 4 \(step 3's cnt=2 runs as 1\)"):
        schedule = msccl.load(text)
    with pytest.raises(jaxcoll.ScheduleError, match=r"rank 0 chunk 1 .* missing \[\(1, 1\)\]"):
        jaxcoll.verify(schedule)
    with pytest.raises(msccl_checker.Wrong, match=r"gpu 0 o\[1\]"):
        msccl_checker.check(text, inplace=True)


def _nop_inside_a_chain(chained: bool = True) -> str:
    """gpu 0 sends i[0] and receives into s[1] (threadblock 0); its local threadblock copies
    i[1] to s[0], adds s[0] into i[0] once the send is done, then (a nop waiting for the
    receive) adds s[1] into i[0]: an re the parser chains to the one before it, or, with
    ``chained=False``, one that carries the receive's wait itself."""
    text = two_gpus([step(0, "s", "i", 0, "s", 0, hasdep=1),
                     step(1, "r", "i", 0, "s", 1, hasdep=1)],
                    [step(0, "r", "i", 0, "s", 0, hasdep=1), step(1, "s", "i", 0, "s", 1)])
    steps = [step(0, "cpy", "i", 1, "s", 0), step(1, "re", "s", 0, "i", 0, depid=0, deps=0)]
    steps += ([step(2, "nop", depid=0, deps=1), step(3, "re", "s", 1, "i", 0)] if chained
              else [step(2, "re", "s", 1, "i", 0, depid=0, deps=1)])
    local = ('    <tb id="1" send="-1" recv="-1" chan="0">\n      ' + "\n      ".join(steps)
             + "\n    </tb>\n  </gpu>")
    return text.replace("  </gpu>", local, 1)


def test_a_nops_wait_before_a_chained_re_goes_past_it():
    """The parser hands a nop's wait before an re it chains to the next step it does not
    chain (here none: the wait is dropped), so the chained re reads s[1] while the receive
    may still write it (or not yet have written it): both readings find the race. Carried
    by the re itself, the wait holds and the file loads."""
    with pytest.raises(msccl.MscclError, match=r"a race on gpu 0's s\[1\].*step 3 \(re\)"):
        msccl.load(_nop_inside_a_chain())
    for seed in range(4):  # the receive's write races the re's read, or comes after it
        with pytest.raises(msccl_checker.Wrong, match="race|reads garbage"):
            msccl_checker.run(_nop_inside_a_chain(), inplace=True, seed=seed)
    msccl_checker.run(_nop_inside_a_chain(chained=False), inplace=True)
    assert msccl.load(_nop_inside_a_chain(chained=False)).n_rounds >= 1


# ----------------------------------------------------------------------------- out

def _variants(request):
    """(n, fused, inplace) to dump: n = 1, 2, 3, 5, 8 every way and 16 RCCL's way in place
    (with --deep: n = 1..8, 16 and 24 every way)."""
    every = [(fused, inplace) for fused in (False, True) for inplace in (None, False)]
    if request.config.getoption("--deep"):
        return [(n, *way) for n in (1, 2, 3, 4, 5, 6, 7, 8, 16, 24) for way in every]
    return [(n, *way) for n in (1, 2, 3, 5, 8) for way in every] + [(16, False, None)]


def test_every_registered_schedule_dumps_and_loads_back(request):
    """For every registered schedule, in place and out of place, with RCCL's ops and with the
    fused ones: the independent checker runs the file right, and it loads back (in place) to
    the same chunk moves, with no scratch left."""
    for n, fused, inplace in _variants(request):
        for primitive, algorithm in ONE_LEVEL:
            schedule = build_schedule(primitive, algorithm, n, 0, 1)
            text = msccl.dump(schedule, fused=fused, inplace=inplace)
            in_place = 'inplace="1"' in text
            msccl_checker.check(text, inplace=in_place, seeds=(n,))
            back = msccl.load(text)
            jaxcoll.verify(back)
            if in_place:
                assert moves(back) == moves(schedule.explicit()) and not back.n_scratch, (
                    f"{schedule!r} fused={fused}")


def test_rccl_runs_what_dump_writes_by_default():
    """Only s, r, cpy, re and nop (RCCL has no fused ops now); every attribute the runtimes
    require; one element a line; no tab, no declaration, no zero-padded number."""
    text = msccl.dump(build_schedule("allreduce", "ring", 4))
    types = {line.split('type="')[1].split('"')[0] for line in text.splitlines() if "<step" in line}
    assert types <= {"s", "r", "cpy", "re", "nop"} and "\t" not in text and "<?xml" not in text
    assert all(f' {name}="' in text for name in msccl.ALGO_ATTRIBUTES)
    assert ' 07"' not in text and '="00' not in text
    fused = msccl.dump(build_schedule("allreduce", "ring", 4), fused=True)
    assert 'type="rrc"' in fused


def test_a_broken_dump_is_caught_by_both_readings():
    """Drop one dependency from a dump (a receive that must wait for the send of what it
    overwrites): the checker finds the race, and load refuses it."""
    text = msccl.dump(build_schedule("allreduce", "recursive_doubling", 4), fused=True)
    lines = text.splitlines()
    at = next(k for k, line in enumerate(lines)
              if 'type="rrc"' in line and 'depid="-1"' not in line)
    depid = lines[at].split('depid="')[1].split('"')[0]
    deps = lines[at].split('deps="')[1].split('"')[0]
    lines[at] = lines[at].replace(f'depid="{depid}" deps="{deps}"', 'depid="-1" deps="-1"')
    broken = "\n".join(lines)
    with pytest.raises(msccl_checker.Wrong, match="race"):
        msccl_checker.check(broken, inplace=True, seeds=range(8))
    with pytest.raises(msccl.MscclError, match="a race on gpu"):
        msccl.load(broken)


def test_dump_refuses_what_it_cannot_write():
    with pytest.raises(msccl.MscclError, match="rooted at 2"):
        msccl.dump(build_schedule("broadcast", "binomial", 4, 2))
    with pytest.raises(msccl.MscclError, match="does not verify"):
        half = build_schedule("allreduce", "ring", 4)
        msccl.dump(jaxcoll.Schedule("half", 4, 4, half.rounds[:3], "allreduce"))
    with pytest.raises(msccl.MscclError, match="cannot run in place .an alltoall"):
        msccl.dump(build_schedule("alltoall", "bruck", 4), inplace=True)
    out_of_place = msccl.load(FILES["fused ring 5"][0], inplace=False)
    with pytest.raises(msccl.MscclError, match="is out of place: its input .chunk 5. and "
                       "output .chunk 0. are apart"):
        msccl.dump(out_of_place, inplace=True)
    with pytest.raises(msccl.MscclError, match="needs 66 steps, more than the runtimes' 64"):
        msccl.dump(build_schedule("allreduce", "ring", 34))


def _pairs_with_local_adds(rounds_of_adds) -> jaxcoll.Schedule:
    """A 3-rank all-pairs allreduce of 2 chunks: every rank sends both to both peers (into
    scratch [2,3] and [4,5]), copies [4,5] to [6,7], then adds, round by round, the local
    reductions ``rounds_of_adds`` gives as (chunks, into) pairs."""
    from jaxcoll.ir.schedules import Round, Transfer

    sends = [Transfer(r, p, [0, 1], False, into=[2 + 2 * j, 3 + 2 * j]) for r in range(3)
             for p in range(3) if p != r
             for j in [[q for q in range(3) if q != p].index(r)]]
    copies = [Transfer(r, r, [4, 5], False, into=[6, 7]) for r in range(3)]
    adds = [Round([Transfer(r, r, chunks, True, into=into) for r in range(3)
                   for chunks, into in pairs]) for pairs in rounds_of_adds]
    return jaxcoll.Schedule("pairs", 3, 2, (Round(sends), Round(copies), *adds), "allreduce",
                            n_scratch=6)


def test_dump_never_writes_a_chain_that_changes_the_sum():
    """Local adds [2,3]>[0,1]+, then [6]>[0]+, then [7]>[1]+ are three re steps of the local
    threadblock, the second without a dependency: the parser would chain the first two with
    cnt=1 and chunk 1 would miss a peer. dump ends the chain (hasdep=1 on the first); the
    checker runs the file right and it loads back to a schedule that verifies."""
    schedule = _pairs_with_local_adds([[([2, 3], [0, 1])], [([6], [0])], [([7], [1])]])
    jaxcoll.verify(schedule)
    text = msccl.dump(schedule)
    adds = [line for line in text.split("<gpu")[1].splitlines() if 'type="re"' in line]
    assert 'cnt="2"' in adds[0] and 'hasdep="1"' in adds[0] and 'depid="-1"' in adds[1]
    msccl_checker.check(text, inplace=True)
    jaxcoll.verify(msccl.load(text))


def test_two_adds_into_one_chunk_in_a_round_commute():
    """[2,3]>[0,1]+ and [6]>[0]+ in one round: both add into chunk 0, in either order; dump
    had refused them as a cycle needing scratch."""
    schedule = _pairs_with_local_adds([[([2, 3], [0, 1]), ([6], [0])], [([7], [1])]])
    text = msccl.dump(schedule)
    msccl_checker.check(text, inplace=True)
    jaxcoll.verify(msccl.load(text))


def test_a_chain_that_reads_what_it_writes_is_ended():
    """Chained re steps read every X before they write Y: where one's X is the chain's Y, one
    after the other is another sum, so dump ends the chain there."""
    a, b, c = (dumping._Action(0, ("local", -1), "re", ("s", at), ("s", 4), 2) for at in (0, 2, 5))
    for action in (a, b, c):
        action.deps = []
    dumping._break_chains([a, b, c])
    assert (a.signals, b.signals) == (False, True)  # a and b chain; c reads s[5] of their Y


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_file_that_loads_and_verifies_dumps_back(name):
    """load -> dump round-trips for files from outside: the fused ring's rrs and rrcs, the
    all-pairs fused adds (several reduces into one chunk in a round), the alltoall's blocks;
    the dump runs right under the checker and loads back to a schedule that verifies."""
    text, modes = FILES[name]
    for inplace in modes:
        schedule = msccl.load(text, inplace=inplace)
        again = msccl.dump(schedule, inplace=inplace)
        msccl_checker.check(again, inplace=inplace)
        jaxcoll.verify(msccl.load(again, inplace=inplace))


# ----------------------------------------------------------------------------- refused

SEND = step(0, "s", "i", 0, "o", 0)
RECEIVE = step(0, "r", "i", 0, "o", 0)

REFUSED = [  # (file, what the error says)
    ("<algo", "malformed XML"),
    (two_gpus([SEND], [RECEIVE]).replace(' outofplace="0"', ""),
     "attribute 'outofplace' of <algo> not found"),
    (two_gpus([SEND], [RECEIVE], coll="custom"), "coll='custom' has no jaxcoll primitive"),
    (two_gpus([step(0, "rrr", "i", 0, "o", 0)], []), "gpu 0, threadblock 0, step 0: "
     "type='rrr' is not a step type"),
    (two_gpus([SEND, step(1, "s", "i", 1, "o", 1)], [RECEIVE]),
     "gpu 0, threadblock 0, step 1: an unpaired send"),
    (two_gpus([], [RECEIVE]), "gpu 1, threadblock 0, step 0: an unpaired receive"),
    (two_gpus([step(0, "s", "i", 0, "o", 0, cnt=2)], [RECEIVE]), "sends 2 chunks; its "
     "receive, gpu 1, threadblock 0, step 0, takes 1"),
    (two_gpus([step(0, "s", "i", 1, "o", 0, cnt=2)], [step(0, "r", dstoff=1, cnt=2)]),
     r"src i\[1..2\] is outside the 2 chunks"),
    (two_gpus([step(1, "s", "i", 0, "o", 0)], [RECEIVE]), "s=1, but it is step 0"),
    (two_gpus([SEND], [RECEIVE], tb0={"send": -1, "recv": 1}), "a 's' step in a threadblock "
     "with no send peer"),
    (two_gpus([step(0, "nop", cnt=0), step(1, "s", "i", 0, "o", 0)], [RECEIVE]),
     "a nop without a dependency"),
    (two_gpus([step(0, "s", "s", 0, "o", 0)], [RECEIVE]), "gpu 0, threadblock 0, step 0 "
     r"\(s\) reads gpu 0's s\[0\], which nothing wrote"),
    (two_gpus([SEND], [step(0, "r", "i", 0, "o", 0)], inplace=0, outofplace=1)
     .replace('<step s="0" type="s" srcbuf="i"', '<step s="0" type="s" srcbuf="o"'),
     "reads gpu 0's o\\[0\\], which nothing wrote"),
    (two_gpus([SEND], [RECEIVE], inplace=0, outofplace=1), None),  # fine: to load in place
]


def _overlapping_copy() -> str:
    """gpu 0: ``cpy i[0..1] -> o[1..2]`` in place, where i and o are one buffer."""
    text = two_gpus([SEND], [RECEIVE], k=3)
    local = ('    <tb id="1" send="-1" recv="-1" chan="0">\n      '
             + step(0, "cpy", "i", 0, "o", 1, cnt=2, depid=0, deps=0) + "\n    </tb>\n  </gpu>")
    return text.replace(SEND, step(0, "s", "i", 0, "o", 0, hasdep=1)).replace(
        "  </gpu>", local, 1)


def _two_threadblocks_on_one_channel() -> str:
    text = two_gpus([SEND], [RECEIVE, step(1, "r", "i", 1, "o", 1)])
    extra = ('    <tb id="1" send="1" recv="-1" chan="0">\n      '
             + step(0, "s", "i", 1, "o", 1) + "\n    </tb>\n  </gpu>")
    return text.replace("  </gpu>", extra, 1)


def _race() -> str:
    """gpu 0: threadblock 1 overwrites i[0] while threadblock 0 sends it, in no order."""
    text = two_gpus([SEND], [RECEIVE])
    local = ('    <tb id="1" send="-1" recv="-1" chan="0">\n      '
             + step(0, "cpy", "i", 1, "i", 0) + "\n    </tb>\n  </gpu>")
    return text.replace("  </gpu>", local, 1)


def _waits_for_ever() -> str:
    text = two_gpus([SEND], [RECEIVE])
    local = ('    <tb id="1" send="-1" recv="-1" chan="0">\n      '
             + step(0, "cpy", "i", 1, "o", 1, depid=0, deps=0) + "\n    </tb>\n  </gpu>")
    return text.replace("  </gpu>", local, 1)


@pytest.mark.parametrize("text, message", REFUSED + [
    (_two_threadblocks_on_one_channel(), "gpu 0: threadblocks 0 and 1 both send to gpu 1 on "
     "channel 0: they would share one FIFO"),
    (_race(), "a race on gpu 0's i\\[0\\]: gpu 0, threadblock 0, step 0 \\(s\\) and gpu 0, "
     "threadblock 1, step 0 \\(cpy\\)"),
    (_overlapping_copy(), "gpu 0, threadblock 1, step 0 \\(cpy\\): its src i\\[0..\\] and dst "
     "o\\[1..\\] overlap at different offsets"),
    (_waits_for_ever(), "gpu 0, threadblock 1, step 0: waits for step 0 of threadblock 0, but "
     "no step of it at or after that one signals"),
], ids=lambda v: str(v)[:40] if isinstance(v, str) and not v.startswith("<") else None)
def test_files_the_runtimes_would_not_run_are_refused(text, message):
    if message is None:
        with pytest.raises(msccl.MscclError, match="inplace=0, so the runtimes never run it"):
            msccl.load(text, inplace=True)
        return
    with pytest.raises(msccl.MscclError, match=message):
        msccl.load(text)


def _nops_before_a_chained_re() -> str:
    """gpu 0's local threadblock: an re, a nop, an re the parser chains to the first (so the
    nop's wait goes to the next step, and the kernel's step counter falls one behind the
    file's), then a cpy that carries a wait and publishes."""
    text = two_gpus([step(0, "s", "i", 0, "s", 0, hasdep=1),
                     step(1, "r", "i", 0, "s", 1, hasdep=1)],
                    [step(0, "r", "i", 0, "s", 0, hasdep=1), step(1, "s", "i", 0, "s", 1)])
    local = ('    <tb id="1" send="-1" recv="-1" chan="0">\n      '
             + "\n      ".join([step(0, "re", "s", 0, "i", 0, depid=0, deps=0),
                                 step(1, "nop", depid=0, deps=1),
                                 step(2, "re", "s", 0, "i", 0),
                                 step(3, "cpy", "s", 1, "o", 1, depid=0, deps=1, hasdep=1),
                                 step(4, "nop", depid=0, deps=1)]) + "\n    </tb>\n  </gpu>")
    return text.replace("  </gpu>", local, 1)


def test_every_rule_the_checker_models_is_exercised_by_a_file():
    """The checker's rules (msccl_checker.RULES, from the runtimes' parser and kernel) each
    change what some file here runs to, or whether it runs: none is modelled untested."""
    msccl_checker.EXERCISED.clear()
    runs = [(text, modes) for text, modes in FILES.values()] + [
        (fixtures.uneven_chain_allreduce(3), (True,)), (_nops_before_a_chained_re(), (True,)),
        (msccl.dump(_pairs_with_local_adds([[([2, 3], [0, 1])], [([6], [0])], [([7], [1])]])),
         (True,)),
        (two_gpus([step(0, "nop", depid=0, deps=0), SEND], [RECEIVE]), (True,)),
        (_race(), (True,)), (_waits_for_ever(), (True,)), (REFUSED[-3][0], (True,)),
        (_overlapping_copy(), (True,))]
    for text, modes in runs:
        for inplace in modes:
            try:
                msccl_checker.run(text, inplace=inplace, seed=0)
            except msccl_checker.Wrong:
                pass
    missing = sorted(set(msccl_checker.RULES) - {k for k, v in msccl_checker.EXERCISED.items()
                                                 if v})
    assert not missing, missing


def test_nops_after_the_last_step_wait_for_nothing():
    """The parser makes no transmission for trailing nops, so their waits never hold anything
    back: a file whose last nop waits for a step that never signals runs, and loads."""
    text = two_gpus([SEND], [RECEIVE])
    local = ('    <tb id="1" send="-1" recv="-1" chan="0">\n      '
             + step(0, "cpy", "i", 1, "s", 0) + "\n      " + step(1, "nop", depid=0, deps=7)
             + "\n    </tb>\n  </gpu>")
    text = text.replace("  </gpu>", local, 1)
    msccl_checker.run(text, inplace=True)
    assert msccl.load(text).n_rounds == 1


def test_in_place_a_step_onto_its_own_chunks_runs_as_the_kernel_runs_it():
    """In place i[c] and o[c] are one chunk: ``cpy i[0] -> o[0]`` does nothing and
    ``re i[1] -> o[1]`` doubles chunk 1 (a schedule cannot move a chunk onto itself: load had
    crashed with a plain ScheduleError). Both readings agree."""
    text = two_gpus([SEND], [RECEIVE])
    local = ('    <tb id="1" send="-1" recv="-1" chan="0">\n      '
             + step(0, "cpy", "i", 0, "o", 0, depid=0, deps=0) + "\n      "
             + step(1, "re", "i", 1, "o", 1) + "\n    </tb>\n  </gpu>")
    text = text.replace(SEND, step(0, "s", "i", 0, "o", 0, hasdep=1)).replace(
        "  </gpu>", local, 1)
    assert msccl_checker.run(text, inplace=True)[0] == {0: ((0, 0),), 1: ((0, 1), (0, 1))}
    schedule = msccl.load(text)
    local_moves = [(t.chunks, t.into, t.reduce) for r in schedule.rounds for t in r
                   if t.src == t.dst]
    aside = schedule.n_chunks  # the first scratch chunk
    assert local_moves == [((1,), (aside,), False), ((aside,), (1,), True)]


def test_attributes_msccl_tools_leaves_out_can_be_assumed():
    """msccl-tools' writer leaves out outofplace, minBytes and maxBytes: refused as the
    runtimes refuse it, loaded where the caller says what to assume."""
    text = fixtures.ring_allgather(3).replace(' outofplace="0" minBytes="0" maxBytes="0"', "")
    with pytest.raises(msccl.MscclError, match="'outofplace' of <algo> not found"):
        msccl.load(text)
    jaxcoll.verify(msccl.load(text, assume={"outofplace": 0, "minBytes": 0, "maxBytes": 0}))


def test_the_command_line_reads_prices_and_draws_a_file(tmp_path, capsys):
    """``python -m jaxcoll msccl FILE...`` says what each file is, whether it verifies, its gap
    to the bounds and its time; a refused file sets the exit status; ``draw FILE.xml`` pages."""
    from jaxcoll.tools.cli import draw_main, msccl_main

    good, bad = tmp_path / "pairs.xml", tmp_path / "bad.xml"
    good.write_text(FILES["all-pairs 4"][0])
    bad.write_text(two_gpus([SEND], []))
    assert msccl_main([str(good)]) == 0
    out = capsys.readouterr().out
    assert "allreduce on 4 GPUs" in out and "in place: 3 rounds of 3 ppermutes" in out
    assert "verified" in out and "x2.00" in out and "µs on 4 x MI300X" in out
    assert msccl_main([str(good), str(bad)]) == 1
    assert "refused: msccl: gpu 0, threadblock 0, step 0: an unpaired send" in (
        capsys.readouterr().out)
    page = tmp_path / "pairs.html"
    assert draw_main([str(good), "-o", str(page)]) == 0 and "all-pairs" in page.read_text()
