"""NCCL's tuner on paper (jaxcoll.analysis.nccl): its interface, its refusals, nccl-tests'
bandwidths, and its errors against published nccl-tests/rccl-tests runs (bench/published/),
held to today's numbers (bench/MODEL.md, "Published curves against NCCL's model").

``python tests/test_nccl_model.py`` prints that section's table."""

import csv
import statistics
from pathlib import Path

import pytest

from jaxcoll.analysis import nccl
from jaxcoll.analysis.nccl import Prediction, predict
from jaxcoll.analysis.systems import cluster, dgx

pytestmark = pytest.mark.jax_free  # runs no JAX: plain arithmetic

PUBLISHED = Path(__file__).resolve().parent.parent / "bench" / "published"
MiB = 1 << 20

# Every run cluster() can describe: its arguments, and NCCL_ALGO where the run forced one. What
# the CSV headers do not state is the vendors' public instance specs (named in bench/MODEL.md).
RUNS = {
    "nvidia-dgxc-h100-1x8-allreduce": dict(gpu="h100"),
    "azure-nda100v4-1x8-allreduce": dict(gpu="a100"),
    "azure-ndh100v5-1x8-allreduce": dict(gpu="h100"),
    "azure-ndh200v5-1x8-allreduce": dict(gpu="h200"),
    "azure-ndgb200v6-1x4-allreduce": dict(gpu="b200", gpus_per_node=4, algorithm="ring"),
    "oci-gb300-1x4-allreduce": dict(gpu="b200", gpus_per_node=4),
    "oci-gb300-2x4-allreduce": dict(gpu="b200", gpus_per_node=8),
    "oci-gb300-16x4-allreduce": dict(gpu="b200", gpus_per_node=64),
    "coreweave-gb200-nvl72-18x4-allreduce-partial": dict(gpu="b200", gpus_per_node=72),
    "oci-gb300-32x4-allreduce": dict(gpu="b200", n_nodes=2, gpus_per_node=64, nics=128),
    "amd-blog-mi300x-1x8-allreduce": dict(gpu="mi300x"),
    "amd-blog-mi300x-1x8-allreduce-graph": dict(gpu="mi300x"),
    "amd-aac8-mi300x-1x8-allreduce": dict(gpu="mi300x"),
    "amd-aac11-mi325x-1x8-allreduce-partial": dict(gpu="mi300x", algorithm="ring"),
    "amd-aac10-mi300x-2x8-allreduce": dict(gpu="mi300x", n_nodes=2),
    "amd-aac11-mi325x-8x8-allreduce-partial": dict(gpu="mi300x", n_nodes=8, algorithm="ring"),
    "gcp-a3mega-h100-2x8-allreduce": dict(gpu="h100", n_nodes=2, nic_gbps=200),
    "aws-p4de-a100-2x8-allreduce": dict(gpu="a100", n_nodes=2, nics=4, nic_gbps=100,
                                        cpu="intel"),
    "aws-p5-h100-2x8-allreduce": dict(gpu="h100", n_nodes=2, nics=32, nic_gbps=100, cpu="amd"),
    "redhat-dell-h200-2x8-allreduce": dict(gpu="h200", n_nodes=2),
    "nccl-tests-issue119-a100-3x8-allreduce-partial": dict(gpu="a100", n_nodes=3, nics=4,
                                                           nic_gbps=200),
    "gke-a4-b200-2x8-allgather": dict(gpu="b200", n_nodes=2),
    "coreweave-h100-12x8-allreduce-sharp-partial": dict(gpu="h100", n_nodes=12, sharp=True,
                                                        algorithm="collnet_chain"),
}
NOT_MODELLED = {
    "amd-aac14-mi355x-pollara-2x8-allreduce": "MI355X (gfx950): no RCCL tuning model for it in "
                                              "the stored RCCL",
    "oci-mi355x-pollara-4x8-allreduce-partial": "MI355X (gfx950): as above",
    "coreweave-gb200-2rack-32x4-allreduce-partial": "GB200 over 2 racks: NICs per tray not "
                                                    "stated, nor how 128 ranks split",
    "coreweave-gb200-20rack-360x4-allreduce-partial": "GB200 over 20 racks: NICs not stated",
    "oci-gb200-48x4-allreduce-partial": "GB200 over 3 racks: NICs not stated for the run",
}

# Today's numbers: per run, (median |error| below 1 MiB, worst |error| below, median at and
# above 1 MiB, worst above), error = model busbw / measured busbw - 1; None: no such sizes.
# A ratchet: a change may lower them (then write the new ones here), never raise them.
TODAY = {
    "nvidia-dgxc-h100-1x8-allreduce": (0.133, 3.543, 0.099, 0.487),
    "azure-nda100v4-1x8-allreduce": (1.733, 1.983, 0.249, 0.549),
    "azure-ndh100v5-1x8-allreduce": (0.992, 1.666, 0.163, 0.527),
    "azure-ndh200v5-1x8-allreduce": (0.989, 1.071, 0.136, 0.445),
    "azure-ndgb200v6-1x4-allreduce": (0.583, 0.645, 0.136, 0.334),
    "oci-gb300-1x4-allreduce": (0.380, 0.380, 0.110, 0.281),
    "oci-gb300-2x4-allreduce": (0.660, 0.660, 0.145, 0.674),
    "oci-gb300-16x4-allreduce": (1.537, 1.537, 0.741, 1.454),
    "coreweave-gb200-nvl72-18x4-allreduce-partial": (None, None, 0.204, 0.533),
    "oci-gb300-32x4-allreduce": (7.996, 7.996, 1.765, 6.067),
    "amd-blog-mi300x-1x8-allreduce": (0.437, 0.581, 0.070, 0.471),
    "amd-blog-mi300x-1x8-allreduce-graph": (0.680, 0.745, 0.067, 0.626),
    "amd-aac8-mi300x-1x8-allreduce": (0.412, 0.566, 0.070, 0.453),
    "amd-aac11-mi325x-1x8-allreduce-partial": (None, None, 0.054, 0.058),
    "amd-aac10-mi300x-2x8-allreduce": (3.792, 4.624, 0.273, 1.772),
    "amd-aac11-mi325x-8x8-allreduce-partial": (None, None, 0.139, 0.206),
    "gcp-a3mega-h100-2x8-allreduce": (3.966, 4.824, 1.115, 4.571),
    "aws-p4de-a100-2x8-allreduce": (5.429, 6.684, 0.477, 2.356),
    "aws-p5-h100-2x8-allreduce": (1.882, 2.870, 0.214, 1.115),
    "redhat-dell-h200-2x8-allreduce": (0.815, 1.352, 0.194, 1.255),
    "nccl-tests-issue119-a100-3x8-allreduce-partial": (None, None, 0.145, 0.149),
    "gke-a4-b200-2x8-allgather": (11.137, 14.316, 4.829, 32.919),
    "coreweave-h100-12x8-allreduce-sharp-partial": (None, None, 0.018, 0.042),
}
# The model's pick per run: "algorithm/protocol@first size" at each change
PICKS = {
    "nvidia-dgxc-h100-1x8-allreduce":
        "ring/LL@8 nvls/Simple@2M",
    "azure-nda100v4-1x8-allreduce":
        "ring/LL@1K ring/LL128@4M ring/Simple@32M",
    "azure-ndh100v5-1x8-allreduce":
        "ring/LL@1K nvls/Simple@2M",
    "azure-ndh200v5-1x8-allreduce":
        "ring/LL@1K nvls/Simple@2M",
    "azure-ndgb200v6-1x4-allreduce":
        "ring/LL@1K ring/LL128@8M ring/Simple@32M",
    "oci-gb300-1x4-allreduce":
        "ring/LL@512K ring/LL128@8M ring/Simple@32M",
    "oci-gb300-2x4-allreduce":
        "ring/LL@512K nvls/Simple@4M",
    "oci-gb300-16x4-allreduce":
        "nvls/Simple@512K",
    "coreweave-gb200-nvl72-18x4-allreduce-partial":
        "nvls/Simple@512M",
    "oci-gb300-32x4-allreduce":
        "nvls_tree/Simple@512K",
    "amd-blog-mi300x-1x8-allreduce":
        "ring/LL@8 ring/Simple@512K",
    "amd-blog-mi300x-1x8-allreduce-graph":
        "ring/LL@8 ring/Simple@512K",
    "amd-aac8-mi300x-1x8-allreduce":
        "ring/LL@8 ring/Simple@512K",
    "amd-aac11-mi325x-1x8-allreduce-partial":
        "ring/Simple@4G",
    "amd-aac10-mi300x-2x8-allreduce":
        "tree/LL@8 tree/Simple@4M ring/Simple@512M",
    "amd-aac11-mi325x-8x8-allreduce-partial":
        "ring/Simple@4G",
    "gcp-a3mega-h100-2x8-allreduce":
        "tree/LL@8 tree/LL128@256K nvls_tree/Simple@32M tree/Simple@512M",
    "aws-p4de-a100-2x8-allreduce":
        "tree/LL@8 tree/LL128@256K tree/Simple@512M",
    "aws-p5-h100-2x8-allreduce":
        "tree/LL@8 tree/LL128@256K ring/LL128@32M ring/Simple@512M",
    "redhat-dell-h200-2x8-allreduce":
        "tree/LL@1K tree/LL128@256K nvls_tree/Simple@4M",
    "nccl-tests-issue119-a100-3x8-allreduce-partial":
        "ring/Simple@127926280",
    "gke-a4-b200-2x8-allgather":
        "ring/LL@1K ring/LL128@1M ring/Simple@32M",
    "coreweave-h100-12x8-allreduce-sharp-partial":
        "collnet_chain/Simple@512M",
}


def _rows(run: str) -> list[tuple[int, float | None, float | None]]:
    """(size, time µs or None, busbw GB/s or None) of a published run, as printed."""
    lines = [line for line in (PUBLISHED / f"{run}.csv").read_text().splitlines()
             if line and not line.startswith("#")]
    return [(int(r["size_bytes"]), float(r["time_us"]) if r["time_us"] else None,
             float(r["busbw_gbs"]) if r["busbw_gbs"] else None) for r in csv.DictReader(lines)]


def _compare(run: str) -> list[tuple[int, float, Prediction]]:
    """(size, error, prediction) per printed size: error = model busbw / measured - 1, from the
    times where printed (the same ratio), else from busbw (Azure: in-place busbw only); sizes
    whose busbw printed as 0 are left out."""
    spec = dict(RUNS[run])
    gpu, algorithm = spec.pop("gpu"), spec.pop("algorithm", None)
    topology = cluster(gpu, **spec)
    collective = "allgather" if "allgather" in run else "allreduce"
    out = []
    for size, time, busbw in _rows(run):
        p = predict(collective, size, topology, algorithm=algorithm)
        if time:
            out.append((size, time / (p.seconds * 1e6) - 1, p))
        elif busbw:
            out.append((size, p.busbw / busbw - 1, p))
    return out


def _stats(run: str) -> tuple:
    """TODAY's four numbers for a run."""
    rows = _compare(run)
    out = ()
    for part in ([e for s, e, _ in rows if s < MiB], [e for s, e, _ in rows if s >= MiB]):
        out += ((round(statistics.median(abs(e) for e in part), 3),
                 round(max(abs(e) for e in part), 3)) if part else (None, None))
    return out


def _picks(run: str) -> str:
    """PICKS' string for a run."""
    out, last = [], None
    for size, _, p in _compare(run):
        pick = f"{p.algorithm}/{p.protocol}"
        if pick != last:
            out.append(f"{pick}@{_size(size)}")
            last = pick
    return " ".join(out)


def _size(size: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


# ----------------------------------------------------------------------------- interface

def test_interface_and_nccl_tests_bandwidths():
    h100 = cluster("h100")
    p = predict("allreduce", 1 << 30, h100)
    assert isinstance(p, Prediction) and p.n == 8 and p.nbytes == 1 << 30
    assert p.algbw == pytest.approx((1 << 30) / p.seconds / 1e9)
    assert p.busbw == pytest.approx(p.algbw * 2 * 7 / 8)
    for collective, factor in (("allgather", 7 / 8), ("reduce_scatter", 7 / 8),
                               ("alltoall", 7 / 8), ("broadcast", 1), ("reduce", 1)):
        q = predict(collective, 1 << 30, h100)
        assert q.busbw == pytest.approx(q.algbw * factor), collective
    with pytest.raises(Exception):
        p.seconds = 1.0  # frozen


def test_nccl_own_numbers():
    """Values NCCL's tables give by hand (tuning.cc, search.cc v2.28.9)."""
    # one H100 node: ring LL at 1 KiB = baseLat 6.6 + 14 steps x 0.6 µs
    small = predict("allreduce", 1024, cluster("h100"))
    assert (small.algorithm, small.protocol) == ("ring", "LL")
    assert small.seconds * 1e6 == pytest.approx(6.6 + 14 * .6 + 1024 / (1000 * 141 * 8 / 14))
    # NVLS: 8 channels x min(40 x .85 x 7/8 x 2, 60) GB/s = 476 GB/s busbw, 25 µs
    big = predict("allreduce", 8 << 30, cluster("h100"))
    assert (big.algorithm, big.protocol, big.channels) == ("nvls", "Simple", 16)
    assert big.seconds * 1e6 == pytest.approx(25 + (8 << 30) / (1000 * 476 * 8 / 14), rel=1e-6)
    # one A100 node: 12 rings x 20 GB/s = 240 GB/s busbw
    ring = predict("allreduce", 8 << 30, cluster("a100"), algorithm="ring", protocol="simple")
    assert ring.seconds * 1e6 == pytest.approx(8.4 + 14 * 3.4 + (8 << 30) / (1000 * 240 * 8 / 14))
    # nccl-tests #119: 3 nodes x 8 A100, 4 HDR NICs: 4 channels x 24 GB/s (PCIe Gen4) = 96
    assert predict("allreduce", 1 << 40, cluster("a100", 3, nics=4, nic_gbps=200),
                   algorithm="ring", protocol="Simple").busbw == pytest.approx(96, rel=1e-3)


def test_the_search_gives_what_nccl_printed():
    """The channels x GB/s NCCL's search printed (NCCL_DEBUG_SUBSYS=GRAPH "Pattern ..." lines):
    one H100 node, NVIDIA/nccl#1197 (ring and tree 12 x 30/30, NVLS 8 x 40/60); 2 x 8 H100
    with 8 x 400G RoCE NICs, a log quoted in a public write-up (ring 8 x 48/48, 16 channels);
    an H20 node's ``maxBw 48.0 totalBw 370.8`` (NVIDIA/nccl#1189): the PCIe and NVLink used here."""
    one = nccl._graphs(cluster("h100").system)
    assert [(one[k].channels, one[k].intra, one[k].inter) for k in ("ring", "tree", "nvls")] == \
        [(12, 30, 30), (12, 30, 30), (8, 40, 60)]
    two = cluster("h100", 2).system
    ring = nccl._graphs(two)["ring"]
    assert (ring.channels, ring.intra, ring.inter, nccl._comm_channels(two)) == (8, 48, 48, 16)
    assert min(two.gpu.pcie_gbs, two.nic_gbps / 8) == 48 and two.nvlink_gbs == 370.8


def test_forced_choices():
    two = cluster("h100", 2)
    for algorithm in ("ring", "tree", "nvls_tree", "RING", "Tree"):
        assert predict("allreduce", 1 << 26, two, algorithm=algorithm).algorithm == \
            algorithm.lower()
    for protocol in ("LL", "ll128", "SIMPLE"):
        p = predict("allreduce", 1 << 20, two, algorithm="ring", protocol=protocol)
        assert p.protocol.lower() == protocol.lower()
    assert predict("allgather", 1 << 20, cluster("h100", 4, gpus_per_node=1),
                   algorithm="pat").algorithm == "pat"
    sharp = cluster("h100", 4, sharp=True)
    for algorithm in ("collnet_chain", "collnet_direct", "nvls"):
        assert predict("allreduce", 1 << 28, sharp, algorithm=algorithm).protocol == "Simple"
    # forcing never beats the tuner's own pick
    free = predict("allreduce", 1 << 26, two)
    assert all(predict("allreduce", 1 << 26, two, algorithm=a).seconds >= free.seconds
               for a in ("ring", "tree", "nvls_tree"))


@pytest.mark.parametrize("call, match", [
    (lambda: predict("allreduce", 1, dgx()), "cluster"),
    (lambda: predict("allgatherv", 1, cluster("h100")), "collective"),
    (lambda: predict("allreduce", -1, cluster("h100")), "nbytes"),
    (lambda: predict("allreduce", 1, cluster("h100", gpus_per_node=1)), "one rank"),
    (lambda: predict("allreduce", 1, cluster("a100"), algorithm="nvls"), "ring/LL"),
    (lambda: predict("allreduce", 1, cluster("h100", 2), algorithm="collnet_chain"), "runs"),
    (lambda: predict("allgather", 1, cluster("h100", 2), algorithm="pat"), "runs"),
    (lambda: predict("allgather", 1, cluster("h100"), algorithm="tree"), "runs"),
    (lambda: predict("allreduce", 1, cluster("h100"), algorithm="nvls_tree"), "runs"),
    (lambda: predict("allreduce", 1, cluster("h100"), algorithm="nvls", protocol="LL"), "runs"),
    (lambda: predict("allreduce", 1, cluster("mi300x"), protocol="LL128"), "runs"),
    (lambda: predict("allreduce", 1, cluster("mi300x", gpus_per_node=4)), "8 GPUs"),
    (lambda: predict("alltoall", 1, cluster("h100"), algorithm="ring"), "send/recv"),
    (lambda: predict("allreduce", 1, cluster("h100"), algorithm="bruck"), "algorithm="),
    (lambda: predict("allreduce", 1, cluster("h100"), protocol="fast"), "protocol="),
    (lambda: cluster("v100"), "gpu="),
    (lambda: cluster("h100", 0), "n_nodes"),
    (lambda: cluster("h100", nic_gbps=0), "nic_gbps"),
])
def test_refusals_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _bound(system, collective: str) -> float:
    """busbw no schedule beats: what a GPU's ports take in (NVLink, and PCIe to its NIC across
    nodes; twice that for allreduce with NVLS, which reduces in the switch), and across m
    nodes each node's NICs carry (m-1)/m of the data each way: busbw <= NICs x m(n-1) /
    (n(m-1)) (x2 with SHARP, which reduces in the network)."""
    n, m = system.n, system.n_nodes
    ports = system.nvlink_gbs + (system.gpu.pcie_gbs if m > 1 else 0)
    bound = ports * (2 if system.gpu.nvls and collective == "allreduce" else 1)
    if m > 1:
        nics = system.nics * system.nic_gbps / 8 * (2 if system.sharp else 1)
        bound = min(bound, nics * m * (n - 1) / (n * (m - 1)))
    return bound


@pytest.mark.parametrize("gpu, args", [
    ("a100", {}), ("h100", {}), ("b200", dict(gpus_per_node=72)), ("mi300x", {}),
    ("h100", dict(n_nodes=2)), ("a100", dict(n_nodes=3, nics=4, nic_gbps=200)),
    ("b200", dict(n_nodes=4)), ("h200", dict(n_nodes=16, nic_gbps=200)),
    ("mi300x", dict(n_nodes=4)), ("h100", dict(n_nodes=8, gpus_per_node=1, nics=1)),
    ("h100", dict(n_nodes=4, sharp=True))])
def test_sane(gpu, args):
    """busbw never above the hardware's bound; time grows with size (nccl-tests' powers of
    two; not RCCL's across nodes, whose ring correction factors jump by 10x between sizes);
    more nodes never make a large allreduce faster."""
    topology = cluster(gpu, **args)
    monotone = gpu != "mi300x" or "n_nodes" not in args
    for collective in ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce",
                       "alltoall"):
        times = [predict(collective, 1 << k, topology).seconds for k in range(3, 35)]
        assert all(a <= b for a, b in zip(times, times[1:])) or not monotone, collective
        assert predict(collective, 1 << 34, topology).busbw <= \
            _bound(topology.system, collective) * (1 + 1e-9), collective
    bigger = cluster(gpu, **{**args, "n_nodes": 2 * args.get("n_nodes", 1)})
    assert predict("allreduce", 1 << 34, bigger).seconds >= \
        predict("allreduce", 1 << 34, topology).seconds * (1 - 1e-9)


# ----------------------------------------------------------------------------- published runs

def test_every_published_run_is_placed():
    """Each CSV in bench/published is modelled or named as not (with why)."""
    files = {path.stem for path in PUBLISHED.glob("*.csv")}
    assert files == set(RUNS) | set(NOT_MODELLED)
    assert not set(RUNS) & set(NOT_MODELLED)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_published_errors_ratchet(run):
    """The model's errors on a published run: no worse than today's (TODAY), and the same
    picks (PICKS)."""
    for now, then in zip(_stats(run), TODAY[run]):
        assert (now is None) == (then is None)
        if now is not None:
            assert now <= then + 5e-4, (run, _stats(run), TODAY[run])
    assert _picks(run) == PICKS[run]


# the median over runs of each run's median |error|, below and at or above 1 MiB, today: the
# issue's aim (0.25, 0.10) is not met (bench/MODEL.md says where it misses)
AIM_TODAY = (0.990, 0.145)


def test_the_issue_aim_ratchet():
    """The median over the modelled runs of their medians, no worse than today's."""
    stats = [_stats(run) for run in RUNS]
    below = statistics.median(s[0] for s in stats if s[0] is not None)
    above = statistics.median(s[2] for s in stats if s[2] is not None)
    assert below <= AIM_TODAY[0] + 5e-4 and above <= AIM_TODAY[1] + 5e-4, (below, above)


def _table() -> str:
    """bench/MODEL.md's table: per run, median |error| / the worst error (signed) below and at
    or above 1 MiB, and the picks."""
    lines = []
    for run in RUNS:
        rows, cells = _compare(run), []
        for part in ([e for s, e, _ in rows if s < MiB], [e for s, e, _ in rows if s >= MiB]):
            cells.append(f"{statistics.median(abs(e) for e in part) * 100:.0f}% / "
                         f"{max(part, key=abs) * 100:+.0f}%" if part else "–")
        lines.append(f"| {run} | {' | '.join(cells)} | {_picks(run).replace(' ', ', ')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(_table())
