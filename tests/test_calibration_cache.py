"""auto's calibration of this machine: measured once, cached, reused; ignored when broken;
off by an environment variable; written by ``python -m jaxcoll calibrate``."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcoll
from helpers import AXIS, assert_same, exact_inputs, per_rank
from jaxcoll.tools import calibration_cache as cache
from jaxcoll.tools.cli import main

N = 2  # broadcast on 2 ranks: the fewest algorithms to compile


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """Measuring on (quiet), a cache directory of its own, the tiniest sweep; and a count of
    the measurements: ``fresh_cache.calls``."""
    forget()
    monkeypatch.setenv(cache.MODE, "quiet")
    monkeypatch.setenv(cache.CACHE_DIR, str(tmp_path))
    monkeypatch.setattr(cache, "SIZES", (1 << 10,))
    monkeypatch.setattr(cache, "REPEATS", 1)
    monkeypatch.setattr(cache, "BUDGET", 0.0)
    calls = []
    real = cache.measure

    def counted(primitive, mesh, *args, **kwargs):
        calls.append((primitive, mesh.size))
        return real(primitive, mesh, cache.SIZES, cache.REPEATS, *args[2:], **kwargs)

    monkeypatch.setattr(cache, "measure", counted)
    monkeypatch.setattr(cache, "calls", calls, raising=False)
    yield cache
    forget()


def fake_timings(primitive: str, mesh, *_, **__):
    """Made-up times: each algorithm its rank in sorted order in ms, so the first is fastest."""
    names = jaxcoll.analysis.model.auto_candidates(primitive)
    return [[name, 1024, (k + 1) * 1e-3] for k, name in enumerate(names)]


FASTEST = jaxcoll.analysis.model.auto_candidates("allreduce")[0]  # fake_timings' fastest


def forget():
    """Drop what this process remembers of the cache files (as a new process would)."""
    cache._entries.clear(), cache._cached.clear(), cache._settled.clear()


def fastest_measured(primitive: str, n: int, nbytes: int) -> str:
    entry = cache.read(cache.cache_path(), cache.fingerprint())[f"{primitive} n={n}"]
    times = {a: s for a, b, s in entry["timings"] if b == nbytes}
    return min(times, key=times.get)


def test_auto_calibrates_once_inside_a_trace_then_reuses(fresh_cache):
    x = exact_inputs(N, (256,), jnp.float32)  # 1 KiB per rank
    program = per_rank(lambda v: jaxcoll.broadcast(v, AXIS, root=1), N)
    assert_same(program(x), jnp.broadcast_to(x[1], x.shape))  # auto measured while tracing
    assert fresh_cache.calls == [("broadcast", N)]
    assert cache.cache_path().exists()
    picked = fastest_measured("broadcast", N, 1024)
    assert jaxcoll.choose("broadcast", N, 1024) == picked
    forget()  # as in a new process: read from the file, not measured again
    assert jaxcoll.choose("broadcast", N, 1024) == picked
    assert jaxcoll.calibration().measured("broadcast", N, picked, 1024) > 0
    assert fresh_cache.calls == [("broadcast", N)]


def test_broken_or_old_cache_files_are_ignored_with_a_warning(fresh_cache, monkeypatch):
    monkeypatch.setattr(cache, "measure", fake_timings)
    path = cache.cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    print_ = cache.fingerprint()
    good = {"format": cache.FORMAT, "fingerprint": print_, "entries": {}}
    for content, why in [("{not json", "unreadable"),
                         (json.dumps(dict(good, format=0)), "format 0"),
                         (json.dumps(dict(good, fingerprint=dict(print_, jax="0.0.1"))),
                          "another machine")]:
        path.write_text(content)
        forget()
        with pytest.warns(UserWarning, match=why):
            assert jaxcoll.calibration() is jaxcoll.analysis.model.shipped("cpu")
        forget()
        with pytest.warns(UserWarning, match=why):
            assert jaxcoll.choose("allreduce", 8, 1024) == FASTEST  # measured
        assert cache.read(path, print_)["allreduce n=8"]["timings"][0][0] == FASTEST


def test_an_entry_for_other_algorithms_is_measured_again(fresh_cache, monkeypatch):
    monkeypatch.setattr(cache, "measure", fake_timings)
    stale = dict(primitive="allreduce", n=8, algorithms=["ring", "retired"],
                 timings=[["ring", 1024, 1e-3], ["retired", 1024, 1e-4]])
    cache._write(cache.cache_path(), cache.fingerprint(), {"allreduce n=8": stale})
    with pytest.warns(UserWarning, match="other algorithms"):
        assert jaxcoll.choose("allreduce", 8, 1024) == FASTEST
    assert "retired" not in cache.read(cache.cache_path(), cache.fingerprint())[
        "allreduce n=8"]["algorithms"]


def test_turned_off_it_measures_nothing_and_reads_no_cache(fresh_cache, monkeypatch):
    monkeypatch.setattr(cache, "measure", fake_timings)
    jaxcoll.choose("allreduce", 8, 1024)  # a cache with timings of this machine
    forget()
    monkeypatch.setenv(cache.MODE, "0")
    monkeypatch.setattr(cache, "measure", lambda *_, **__: pytest.fail("measured"))
    shipped = jaxcoll.analysis.model.shipped("cpu")
    assert jaxcoll.calibration() is shipped
    assert jaxcoll.choose("allreduce", 8, 4096) == jaxcoll.choose("allreduce", 8, 4096, shipped)


def test_the_command_line_writes_the_cache(fresh_cache, capsys):
    assert main(["calibrate", "--op", "broadcast", "--ranks", str(N), "--sizes", "1K",
                 "--repeats", "1", "-q"]) == 0
    out = capsys.readouterr().out
    entry = cache.read(cache.cache_path(), cache.fingerprint())[f"broadcast n={N}"]
    assert entry["algorithms"] == jaxcoll.analysis.model.auto_candidates("broadcast")
    assert {a for a, _, _ in entry["timings"]} <= set(entry["algorithms"])  # the contenders
    assert f"wrote {cache.cache_path()}" in out and fastest_measured("broadcast", N, 1024) in out
    forget()
    assert jaxcoll.choose("broadcast", N, 1024) == fastest_measured("broadcast", N, 1024)
    assert fresh_cache.calls == [("broadcast", N)]  # the command's: auto measured nothing


def test_input_bytes_follow_the_bench_sizes():
    """S is the larger buffer: allgather's and gather's input is S / n, the others' S."""
    assert cache.input_bytes("allreduce", 1 << 20, 8) == 1 << 20
    assert cache.input_bytes("reduce_scatter", 1000, 8) == 992  # whole blocks of 8 float32
    assert cache.input_bytes("allgather", 1 << 20, 8) == 1 << 17
    assert np.all([cache.input_bytes("gather", s, 5) % 20 == 0 for s in (100, 4096, 1 << 20)])


def test_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.CACHE_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "jaxcoll"
    monkeypatch.setenv(cache.CACHE_DIR, str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"
    assert cache.cache_path().parent == tmp_path / "mine"
    assert jax.devices()[0].device_kind in json.dumps(cache.fingerprint())


def test_a_time_above_a_larger_sizes_is_lowered_to_it():
    measured = {1024: {"ring": 5.0, "tree": 1.0}, 4096: {"ring": 3.0, "tree": 2.0},
                16384: {"ring": 4.0}}
    cache._never_faster_when_larger(measured)
    assert measured == {1024: {"ring": 3.0, "tree": 1.0}, 4096: {"ring": 3.0, "tree": 2.0},
                        16384: {"ring": 4.0}}


def test_only_contenders_are_timed_and_auto_lands_near_the_fastest(monkeypatch):
    """On a made-up machine where each algorithm runs at its own multiple of the shipped
    model's time (the ring 0.6x, so it wins from smaller sizes than the model says), the sweep
    times a few algorithms per size, bisects where the fastest changes, and auto ranked by
    those times is within 1.15x of this machine's fastest at every size 1 KiB - 16 MiB."""
    n, primitive = 8, "allreduce"
    shipped = jaxcoll.analysis.model.shipped("cpu")
    speed = {"ring": 0.6, "bidirectional_ring": 1.3, "recursive_doubling": 1.1, "tree": 0.9}

    def truth(size):
        model = dict(jaxcoll.analysis.model.ranking(primitive, n, size, shipped))
        return {a: model[a].seconds * speed.get(a, 1.0) for a in model}

    timed = []

    def fake_time(mesh, primitive_, point, names, *_):
        timed.append((point, tuple(names)))
        return {name: truth(point)[name] for name in names}

    monkeypatch.setattr(cache, "time_algorithms", fake_time)
    rows = cache.measure(primitive, cache._mesh(n), progress=False)
    candidates = jaxcoll.analysis.model.auto_candidates(primitive)
    assert sum(len(names) for _, names in timed) < len(candidates) * len(timed) / 2
    assert len(timed) > len(cache.SIZES) - 1  # a size between two was bisected
    measured = dataclasses.replace(
        shipped, timings=tuple((primitive, n, a, b, s) for a, b, s in rows))
    for size in (1 << k for k in range(10, 25, 2)):
        picked, times = jaxcoll.choose(primitive, n, size, measured), truth(size)
        assert times[picked] <= 1.15 * min(times.values()), (size, picked)


def test_two_processes_writing_one_cache_keep_both_entries(fresh_cache):
    """A process that read the file before another wrote to it merges, not overwrites."""
    print_, path = cache.fingerprint(), cache.cache_path()
    cache._save("broadcast", 2, [["naive", 1024, 1e-3]], print_, path)
    forget()  # a second process, which read the file before the first one wrote
    cache._entries[path] = {}
    cache._save("allreduce", 2, [["ring", 1024, 1e-3]], print_, path)
    assert set(cache.read(path, print_)) == {"broadcast n=2", "allreduce n=2"}
    assert set(cache._entries[path]) == {"broadcast n=2", "allreduce n=2"}


def test_the_first_calibration_announces_itself_wherever_stderr_goes(monkeypatch, capsys):
    """One line saying what is timed and how to switch it off, on a terminal or not (a
    notebook, a log); nothing with JAXCOLL_CALIBRATE=quiet."""
    monkeypatch.setenv(cache.MODE, "1")
    cache._progress("allreduce", 4, 10, True)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "jaxcoll: timing every algorithm of allreduce on 4" in err
    assert f"{cache.MODE}=0 turns this off" in err
    monkeypatch.setenv(cache.MODE, "quiet")
    cache._progress("allreduce", 4, 10, True)
    assert capsys.readouterr().err == ""
