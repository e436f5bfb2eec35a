"""NCCL's choice of algorithm and protocol and its own time estimate, repeated from its source.

Version: NVIDIA/nccl **v2.28.9-1** (commit dbc86fd06e8b0c4517b95d8958a09ccacf9520c9); every
constant below names its file and symbol there. MI300X runs RCCL's tuner instead: ROCm/rccl commit
0cbce2a7571c907554199fad7e905f16ec0a565c (RCCL 2.21.5, 2024-10-24, the newest the store holds;
the published MI300X runs used RCCL 2.22.3).
Nothing here is fitted to measurements.

What NCCL does, and :func:`predict` repeats:

1. At init, ``ncclTopoCompute`` (``src/graph/search.cc``) finds, per pattern (ring, balanced
   tree, NVLS, CollNet), channels and a speed per channel from a fixed array per GPU generation:
   the most channels x speed the links carry, then doubled channels at half the speed
   (``ncclTopoDupChannels``), then faster speeds where they still fit (its "pass 2"). Here the
   same walk over the same arrays, with the links' capacity counted per kind (NVLink per GPU,
   each NIC, each GPU's PCIe) instead of NCCL's path-by-path search (:func:`_fits`): exact on
   the symmetric, rail-optimised nodes :func:`~jaxcoll.analysis.systems.cluster` describes.
2. ``ncclTopoTuneModel`` (``src/graph/tuning.cc``) turns each pattern's channels x speed into a
   bandwidth and a latency per collective x algorithm x protocol (:func:`_table`).
3. Per call, ``ncclTopoGetAlgoTime`` prices time = latency + bytes / (1000 x bandwidth) µs, with
   the tree's correction factors and the ring's plateau, and ``topoGetAlgoInfo``
   (``src/enqueue.cc``) takes the fastest enabled pair (:func:`predict`).

Not modelled: launch and host overheads (NCCL's table leaves them out; bench/MODEL.md shows the
miss), NCCL_ALGO/NCCL_PROTO lists beyond one forced pair, tuner plugins, buffer registration and
symmetric kernels, the CTA policy, fp8, several NICs per GPU being grouped by a network plugin,
RCCL's MSCCL/MSCCL++ kernels on MI300X (which replace the tuner for the sizes they cover).
Alltoall is send/recv in NCCL, not through the tuner; it is priced here from the same tables
(:func:`_alltoall`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from jaxcoll.analysis.protocols import BASE_LAT, HW_LAT, PROTOCOLS
from jaxcoll.analysis.systems import System
from jaxcoll.ir.records import RECORDS

FUNCTIONS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall")
# how NCCL's tuner groups its ncclFunc_t (tuning.cc): nsteps 2(n-1); n-1 (and no tree); n, ring
# only; send/recv (alltoall, not tuned)
FUNC_ALLREDUCE, FUNC_GATHER, FUNC_ROOTED, FUNC_P2P = range(4)
_KIND = dict(zip(FUNCTIONS, (FUNC_ALLREDUCE, FUNC_GATHER, FUNC_GATHER, FUNC_ROOTED, FUNC_ROOTED,
                             FUNC_P2P)))
# NCCL's order, src/include/plugin/nccl_tuner.h NCCL_ALGO_* (ties go to the first); its
# protocols and their latencies: jaxcoll/analysis/protocols.py
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
_GEN = {80: 1, 90: 2, 100: 3}  # tuning.cc compCapIndex: Volta 0, Ampere 1, Hopper 2, Blackwell 3

# tuning.cc ncclTunerConstantsDefaults, GB/s, [Volta, Ampere, Hopper, Blackwell][N1, N2, N4]
# (nodes: 1, 2, more); llMaxBws' rows past one node are the CPU's: [Intel, AMD]
LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
PER_CH_MAX_RING_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (73.4, 34.6, 73.4))
PER_CH_MAX_TREE_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
PER_CH_MAX_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
PER_CH_MAX_NVLS_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (0.0, 57.7, 45.5),
                        (0.0, 96.0, 43.8))
NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)  # tuning.cc nvlsEfficiency
# tuning.cc treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MiB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9))
# search.cc speedArrayIntra/Inter, sm90SpeedArray*, sm100SpeedArray*: GB/s per channel tried
SPEEDS = {
    ("intra", 80): (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    ("inter", 80): (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
                    3.0, 2.4, 1.2, 0.24, 0.12),
    ("intra", 90): (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    ("inter", 90): (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0,
                    2.4, 1.2, 0.24, 0.12),
    ("intra", 100): (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
    ("inter", 100): (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                     3.0, 2.4, 1.2, 0.24, 0.12),
}
MAXCHANNELS = 64  # src/include/device.h
NCCL_MAX_NVLS_ARITY, NCCL_MAX_DIRECT_ARITY = 32, 7  # device.h
# device.h NCCL_LL_MAX_NTHREADS 512, NCCL_LL128_MAX_NTHREADS 640, NCCL_SIMPLE_MAX_NTHREADS 512,
# NCCL_MAX_NTHREADS 640 (NVLS, CollNet); comm.h NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD 8, 8, 64
THREADS, THRESHOLD = (512, 640, 512), (8, 8, 64)
NVLS_CHANNELS = {90: 16, 100: (24, 32)}  # transport/nvls.cc NVLS_NCHANNELS_SM90, _SM100_NVL/_SM100

# RCCL (ROCm/rccl 0cbce2a7, src/graph/tuning.cc) for MI300X (gfx942): baseLat, and
# tuning_model_5 (the one rome_models.cc gives the 8-GPU, 7-link MI300X models 79 and 81):
# hwLat [NVLINK or NET], bwRatio [<= 2 nodes, more], tree/ring correction factors [27]
R_BASE_LAT = {"tree": (12.0, 12.0, 17.0), "ring": (12.0, 12.0, 17.0)}
R_HW_LAT = {"nvlink": {"tree": (0.9, 0.0, 2.3), "ring": (0.8, 0.0, 2.1)},
            "net": {"tree": (10.5, 0.0, 25.0), "ring": (9.5, 0.0, 320.0)}}
R_BW_RATIO = ({"tree": (.06, 0, .11), "ring": (.08, 0, 1.0)},
              {"tree": (.06, 0, .59), "ring": (.08, 0, 1.0)})
R_TREE_CORRECTION = (
    (.1,) * 6 + (1.0,) * 5 + (.6, 1.0, .9, 1.0, 1.0) + (.1,) * 11, (0.0,) * 27,
    (.1,) * 15 + (.7,) + (1.0,) * 10 + (.8,))
R_RING_CORRECTION = (
    (.1,) * 11 + (1.0, .2, 1.0, .4, .4, .1, .2, .2) + (.1,) * 8, (0.0,) * 27,
    (.1,) * 23 + (.8, 1.0, 1.0, 1.0))
# rome_models.cc: model 79 (one node) lists 28 rings, model 81 (8 NICs) 16; parseGraph gives each
# totalBw / nChannels (7 x 48 GB/s / channels)
R_RINGS = {False: 28, True: 16}


@dataclass(frozen=True)
class Prediction:
    """NCCL's pick for one call and its time, with nccl-tests' bandwidths.

    Attributes:
      collective: which one.
      nbytes: nccl-tests' ``size`` (see :func:`predict`).
      n: ranks.
      seconds: the predicted time.
      algorithm: NCCL's algorithm ("p2p" for alltoall).
      protocol: "LL", "LL128" or "Simple".
      channels: the channels NCCL runs it on (the comm's for alltoall; for RCCL, its rings).
    """

    collective: str
    nbytes: int
    n: int
    seconds: float
    algorithm: str
    protocol: str
    channels: int

    @property
    def algbw(self) -> float:
        """nccl-tests' algbw, GB/s: size / time."""
        return self.nbytes / self.seconds / 1e9

    @property
    def busbw(self) -> float:
        """nccl-tests' busbw, GB/s: algbw x 2(n-1)/n (allreduce), x (n-1)/n (allgather,
        reduce_scatter, alltoall), x 1 (broadcast, reduce): the records' ``busbw_factor``."""
        return self.algbw * RECORDS[self.collective].busbw_factor(self.n)


@dataclass(frozen=True)
class _Graph:
    """One pattern's search result (search.cc's ncclTopoGraph): channels and GB/s each."""

    channels: int = 0
    intra: float = 0.0
    inter: float = 0.0


def predict(collective: str, nbytes: int, topology, *, algorithm: str | None = None,
            protocol: str | None = None) -> Prediction:
    """NCCL's algorithm, protocol and time for one call on a real system (v2.28.9 tuner).

    Args:
      collective: "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce" or
        "alltoall".
      nbytes: nccl-tests' ``size`` column: the buffer for allreduce, broadcast and reduce; the
        whole output for allgather (n x each rank's input); the whole input for
        reduce_scatter (n x each rank's output); each rank's whole send buffer for alltoall.
        NCCL's tuner prices exactly this (enqueue.cc, ``ncclFuncMaxSendRecvCount``).
      topology: from :func:`jaxcoll.analysis.systems.cluster` (it carries the ``system``).
      algorithm: force one, as ``NCCL_ALGO`` would: "ring", "tree", "nvls", "nvls_tree",
        "collnet_direct", "collnet_chain" or "pat" (any case); None: the tuner's pick.
      protocol: force "LL", "LL128" or "Simple" (any case), as ``NCCL_PROTO``; None: the
        tuner's pick.

    Returns:
      A :class:`Prediction`: ``seconds``, ``algbw``, ``busbw``, ``algorithm``, ``protocol``,
      ``channels``.

    Raises:
      ValueError: the topology has no system (not from ``cluster``), fewer than 2 ranks, an
        unknown collective, a negative size, or an algorithm or protocol this system or
        collective does not run (NVLS without NVLS hardware, CollNet without SHARP, PAT but
        for allgather/reduce_scatter with one GPU per node, tree but for allreduce, ...).

    Examples:
      >>> from jaxcoll.analysis.systems import cluster
      >>> p = predict("allreduce", 8 << 30, cluster("h100"))
      >>> p.algorithm, p.protocol, round(p.busbw)
      ('nvls', 'Simple', 476)
    """
    system = getattr(topology, "system", None)
    if not isinstance(system, System):
        raise ValueError(f"predict: the topology {getattr(topology, 'name', topology)!r} says "
                         "nothing of its system: build it with "
                         "jaxcoll.analysis.systems.cluster(...)")
    if collective not in FUNCTIONS:
        raise ValueError(f"predict: collective={collective!r}, must be one of {FUNCTIONS}")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"predict: nbytes={nbytes!r}, must be an int >= 0 (nccl-tests' size)")
    if system.n < 2:
        raise ValueError("predict: one rank communicates nothing; NCCL needs >= 2")
    algorithm = _name(algorithm, ALGORITHMS + ("p2p",), "algorithm")
    protocol = _name(protocol, PROTOCOLS, "protocol")
    rccl = system.gpu.name == "mi300x"
    if rccl and (system.gpus_per_node != 8 or system.n_nodes > 1 and system.nics != 8):
        raise ValueError("predict: RCCL's MI300X tuning (rome_models.cc models 79, 81) is for "
                         "8 GPUs per node and 8 NICs per node across nodes")
    kind = _KIND[collective]
    if kind == FUNC_P2P:
        if algorithm not in (None, "p2p") or protocol not in (None, "Simple"):
            raise ValueError("predict: alltoall is NCCL's send/recv (Simple), not a tuned "
                             "algorithm: leave algorithm and protocol None")
        return _alltoall(system, collective, nbytes)
    table = (_rccl_table if rccl else _table)(system, kind)
    times = {}
    for (a, p), (lat, bw) in table.items():
        if bw > 0 and algorithm in (None, a) and protocol in (None, p):
            times[a, p] = (_rccl_time if rccl else _time)(system, kind, a, p, nbytes, lat, bw)
    if not times:
        offered = sorted({f"{a}/{p}" for (a, p), (_, bw) in table.items() if bw > 0})
        raise ValueError(f"predict: {algorithm or 'any algorithm'} with "
                         f"{protocol or 'any protocol'} does not run {collective} on "
                         f"{topology.name} (NCCL would refuse it); it runs: {', '.join(offered)}")
    (a, p), us = min(times.items(), key=lambda item: item[1])  # first minimum, NCCL's order
    return Prediction(collective, nbytes, system.n, us * 1e-6, a, p,
                      _channels(system, a, p, nbytes, rccl))


def _name(value, choices, what):
    """``value`` spelled as in ``choices`` (any case), or None."""
    if value is None:
        return None
    found = {c.lower(): c for c in choices}.get(str(value).lower())
    if found is None:
        raise ValueError(f"predict: {what}={value!r}, must be one of {choices} (any case) or None")
    return found


# ----------------------------------------------------------------------------- the search

def _fits(system: System, pattern: str, intra: float, inter: float) -> int:
    """Channels of ``pattern`` the links carry at ``intra``/``inter`` GB/s each (search.cc's
    ncclTopoSearchRec, counted per link kind): each channel takes its speed from every NVLink
    port it crosses, from the NIC it starts at (net.bw) and from the PCIe links it crosses."""
    g, nv = system.gpus_per_node, system.nvlink_gbs
    eps = 1e-6  # search.cc SUB_ROUND: bandwidths kept to 1e-3
    if system.n_nodes == 1:  # system->inter == 0: GPUs only
        per_gpu = int(nv / intra + eps)  # a ring/chain crosses every GPU's port once each way
        return max(per_gpu - 1, 0) if pattern == "nvls" else per_gpu  # NVLS: its head twice
    path = min(system.gpu.pcie_gbs, system.nic_gbps / 8)  # GPU -> PCIe -> NIC -> NET
    if path + eps < inter:
        return 0
    if pattern in ("nvls", "collnet_direct"):  # one head per NIC, GPUs never shared
        heads = min(system.nics, g)
        if pattern == "nvls":
            return min(heads, max(int(nv / intra + eps) - 1, 0))
        return min(heads, int(1 + (nv / intra - 1) * (g - 1) + eps) if g > 1 else 1)
    nics = system.nics * int(path / inter + eps)  # each channel starts at one NIC
    pcie = g * int(system.gpu.pcie_gbs / inter + eps)  # ... and enters one GPU by PCIe
    nvlink = int(nv * g / ((g - 1) * intra) + eps) if g > 1 else nics  # g - 1 hops of g
    return min(nics, pcie, nvlink)


def _search(system: System, pattern: str, min_ch: int, max_ch: int) -> _Graph:
    """search.cc ncclTopoCompute for one pattern: pass 1 (the best channels x speed, speeds
    decreasing while > .49 of the best), ncclTopoDupChannels, pass 2 (faster where it fits)."""
    cc, g, single = system.gpu.arch, system.gpus_per_node, system.n_nodes == 1
    speeds = SPEEDS["intra" if single else "inter", cc]
    max_bw = system.nvlink_gbs if single else min(system.gpu.pcie_gbs, system.nic_gbps / 8)
    total = system.nvlink_gbs  # search.cc getTotalBw: the GPU's NVLink ports
    if single and pattern == "nvls":
        min_ch = max_ch  # "Force intra-node NVLS algorithm to pull evenly from all GPUs"
    budget = total * g / (g - 1) if g > 1 and pattern != "ring" else total
    i = 0
    while (speeds[i] > max_bw or speeds[i] * min_ch > budget) and i < len(speeds) - 1:
        i += 1
    best = _Graph()

    def better(c: _Graph) -> bool:  # search.cc ncclTopoCompareGraphs
        if pattern == "nvls":
            return (best.channels < c.channels <= g
                    or c.channels * c.inter > best.channels * best.inter)
        return c.channels * c.intra > best.channels * best.intra

    def attempt(intra, inter, low, high) -> bool:  # kept it, with as many channels as allowed
        nonlocal best
        k = min(_fits(system, pattern, intra, inter), high)
        candidate = _Graph(k, intra, inter)
        if k < max(low, 1) or not better(candidate):
            return False
        best = candidate
        return k == high

    while True:  # pass 1
        perfect = attempt(speeds[i], speeds[i], min_ch, max_ch)
        if perfect or best.channels * best.inter >= total:
            break
        if i < len(speeds) - 1 and (not best.channels or speeds[i + 1] / best.inter > .49):
            i += 1
            continue
        break
    if not best.channels:  # search.cc: "falling back to simple order" (not for NVLS)
        return _Graph() if pattern == "nvls" else _Graph(1, .1, .1)
    if pattern != "nvls" and best.intra >= 25 and not (cc > 80 and best.intra < 50
                                                        and best.channels > 4):
        dup = min(2 * best.channels, max_ch)  # ncclTopoDupChannels
        f = math.ceil(dup / best.channels)
        best = _Graph(dup, best.intra / f, best.inter / f)
    i = next((k for k, s in enumerate(speeds) if s <= best.inter), len(speeds) - 1)
    intra = inter = speeds[i]
    low, high = best.channels, max_ch
    while i > 0:  # pass 2
        if pattern == "ring":
            i -= 1
            intra = inter = speeds[i]
        elif pattern == "nvls" and inter == best.inter and inter < 2 * intra:
            low = high = best.channels
            i -= 1
            inter = speeds[i]
        elif intra == best.intra and intra < 2 * inter:  # trees: 2 nodes or CollNet
            i -= 1
            intra = speeds[i]
        else:
            break
        attempt(intra, inter, low, high)
    return best


@functools.lru_cache(maxsize=256)
def _graphs(system: System) -> dict[str, _Graph]:
    """init.cc's graphs: ring (1..MAXCHANNELS/2 channels), tree and CollNet chain (the ring's
    channels), CollNet direct (up to NCCL_MAX_DIRECT_ARITY + 1), NVLS (up to
    NCCL_MAX_NVLS_ARITY, with NVSwitch and compute capability >= 90: search.cc)."""
    g = system.gpus_per_node
    ring = _search(system, "ring", 1, MAXCHANNELS // 2)
    graphs = {"ring": ring, "tree": _search(system, "tree", ring.channels, ring.channels)}
    graphs["pat"] = graphs["tree"]  # init.cc: graphs[NCCL_ALGO_PAT] = treeGraph
    if system.sharp and system.n_nodes > 1:
        graphs["collnet_chain"] = _search(system, "tree", ring.channels, ring.channels)
        graphs["collnet_direct"] = _search(system, "collnet_direct", 1,
                                           min(NCCL_MAX_DIRECT_ARITY + 1, g))
    if system.gpu.nvls and g > 1:
        nvls = _search(system, "nvls", 1, min(NCCL_MAX_NVLS_ARITY, g))
        if nvls.channels:
            graphs["nvls"] = graphs["nvls_tree"] = nvls
    return graphs


# ----------------------------------------------------------------------------- the tuner

def _table(system: System, kind: int) -> dict[tuple[str, str], tuple[float, float]]:
    """tuning.cc ncclTopoTuneModel for one collective: (algorithm, protocol) -> (latency µs,
    bandwidth GB/s), 0 where NCCL disables it."""
    graphs = _graphs(system)
    n, nodes, g = system.n, system.n_nodes, system.gpus_per_node
    gen, index2 = _GEN[system.gpu.arch], min(nodes, 3) - 1
    index1 = gen if nodes == 1 else (1 if system.cpu == "amd" else 0)
    ll_max = LL_MAX_BWS[index1][index2]
    nsteps = _steps(kind, n)
    gather = kind == FUNC_GATHER
    table = {}
    for a in ALGORITHMS:
        graph = graphs.get(a)
        if graph is None or kind == FUNC_ROOTED and a != "ring":
            continue
        if gather and a not in ("pat", "ring", "nvls", "collnet_direct") or (
                kind == FUNC_ALLREDUCE and a == "pat"):
            continue
        if a == "pat" and (nodes != n or not gather):  # ncclPatEnable: 1 GPU per node
            continue
        if a == "nvls_tree" and nodes == 1 or a == "nvls" and nodes > 1 and not system.sharp:
            continue  # "Disable NVLS Tree on a single node"; multi-node NVLS needs CollNet
        if a in ("nvls", "nvls_tree") and gather and nodes > 1:
            continue  # NVLS allgather/reduce_scatter across nodes: needs CollNet's iallgather
        if a == "collnet_direct" and gather:
            continue  # needs CollNet's iallgather/ireducescatter and 1:1 GPU:NIC (not modelled)
        for p, proto in enumerate(PROTOCOLS):
            if a in ("nvls", "nvls_tree", "pat", "collnet_direct", "collnet_chain") and p != 2:
                continue
            bw = graph.intra if nodes <= 2 or a.startswith("collnet") else graph.inter
            if a in ("nvls", "nvls_tree"):
                if graph.channels < 2:
                    continue
                intra_bw = (graph.intra * NVLS_EFFICIENCY[gen] * (graph.channels - 1)
                            / graph.channels * (2.0 if kind == FUNC_ALLREDUCE else (g - 1) / g))
                inter_bw = graph.inter * (2 if nodes <= 2 and a == "nvls_tree" else 1)
                bw = min(intra_bw, inter_bw, PER_CH_MAX_NVLS_TREE[gen][index2]
                         if a == "nvls_tree" else math.inf)
            bus = graph.channels * bw
            if a == "ring" and p == 0:
                bus = min(ll_max, bus * .5)
            if a == "ring" and p == 1:
                bus = min(bus * .92, graph.channels * PER_CH_MAX_RING_LL128[gen][index2])
            if a == "tree" and kind == FUNC_ALLREDUCE:
                bus = min(bus * .92, graph.channels * PER_CH_MAX_TREE[gen][index2])
            if a == "tree" and p == 0:
                bus = min(bus / 3.8, ll_max)
            if a == "tree" and p == 1:
                bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128),
                          graph.channels * PER_CH_MAX_TREE_LL128[gen][index2])
            if a == "pat":
                bus *= .75
            if a == "collnet_direct":
                factor = g / graph.channels  # GPU/NIC ratio
                bus /= factor - (factor - 1) / 2
                bus *= .85 if gen >= 2 else 1.0
            if not (a != "ring" and gather):  # bus bandwidth to algorithm bandwidth
                bus *= n / nsteps if a in ("ring", "nvls", "nvls_tree") else .5
            table[a, proto] = (_latency(system, kind, a, p, nsteps), bus)
    return table


def _latency(system: System, kind: int, a: str, p: int, nsteps: int) -> float:
    """tuning.cc ncclTopoTuneModel's latency for (collective, algorithm, protocol), µs."""
    n, nodes, ppn = system.n, system.n_nodes, system.gpus_per_node
    lat = BASE_LAT[a][p]
    intra = HW_LAT["nvlink"][a][p]
    inter = HW_LAT["net"]["tree" if ppn == 1 else a][p]  # graph latencyInter: 0 (IB)
    if a == "ring":
        if kind == FUNC_ROOTED:
            return lat + HW_LAT["nvlink" if nodes == 1 else "net"]["ring"][p]  # sameChannels
        overhead = 0.0 if nodes == 1 else (2.0 if system.cpu == "amd" else 1.0) * (
            3 if p == 2 else 1)  # getNetOverhead, x3 for Simple
        inter_steps = (0 if nodes == 1 else 2 * (nodes - 1) if kind == FUNC_ALLREDUCE
                       else nodes - 1)
        return lat + (nsteps - inter_steps) * max(intra, overhead) + inter_steps * inter
    if a == "tree":
        return lat + 2 * ((ppn - 1) * intra + _log2(nodes) * inter)
    if a == "collnet_direct":
        return lat + 2 * (min(1, ppn - 1) * intra + (ppn - 1) * .4) + inter
    if a == "collnet_chain":
        return lat + 2 * (ppn - 1) * intra + inter
    if a == "nvls":
        return intra + (inter if nodes > 1 else 0)
    if a == "nvls_tree":
        return lat + intra + 2 * _log2(nodes) * inter
    return lat + _log2(nodes) * inter / 3.5 + n * 2.8  # pat


def _steps(kind: int, n: int) -> int:
    """tuning.cc nsteps: a ring's steps for the collective."""
    return 2 * (n - 1) if kind == FUNC_ALLREDUCE else n - 1 if kind == FUNC_GATHER else n


def _log2(x: int) -> int:
    """NCCL's log2i (bitops.h log2Down): floor(log2 x), -1 for 0."""
    return int(x).bit_length() - 1


def _time(system, kind, a, proto, nbytes, lat, bw) -> float:
    """tuning.cc ncclTopoGetAlgoTime, µs, one operation (numPipeOps 1)."""
    p = PROTOCOLS.index(proto)
    log_size = _log2(nbytes >> 6)
    if a == "tree" and kind == FUNC_ALLREDUCE and 0 <= log_size < 23:
        bw *= TREE_CORRECTION[p][log_size]
    if (a == "ring" and p == 2 and system.n_nodes > 1 and kind == FUNC_ALLREDUCE
            and nbytes // (_comm_channels(system) * system.n) >= 64):
        lat *= 1.4  # "Plateau effect of ring" (compute capability >= 80)
    return lat + nbytes / (1000 * bw)


def _comm_channels(system: System) -> int:
    """connect.cc ncclTopoPostset: the comm's channels (the ring's, doubled; doubled again on
    Hopper+ across nodes when the ring's speed is > 45 GB/s and the count < 16)."""
    graphs = _graphs(system)
    ring = graphs["ring"]
    channels = min(MAXCHANNELS, 2 * min(ring.channels, graphs["tree"].channels))
    chain = graphs.get("collnet_chain")
    if chain and chain.intra > chain.inter and system.gpus_per_node > 1:
        channels = min(MAXCHANNELS, channels + channels // 2)
    if system.gpu.arch >= 90 and system.n_nodes > 1 and ring.intra > 45 and channels < 16:
        channels *= 2
    return channels


def _channels(system: System, a: str, proto: str, nbytes: int, rccl: bool) -> int:
    """enqueue.cc topoGetAlgoInfo: channels launched for this call."""
    if rccl:
        return _rccl_ring(system).channels
    p = PROTOCOLS.index(proto)
    nc = _comm_channels(system)
    if a in ("nvls", "nvls_tree"):
        gen = NVLS_CHANNELS[system.gpu.arch]
        nvls = gen if isinstance(gen, int) else gen[system.n_nodes > 1]
        return min(nvls, nc) if a == "nvls" and system.n_nodes > 1 else nvls
    if a == "pat":
        return nc  # maxThreads[PAT] is never set: no reduction
    nt = 640 if a.startswith("collnet") else THREADS[p]
    threshold = 512 if a.startswith("collnet") else THRESHOLD[p] * (
        system.n if a == "ring" and p == 0 else 1)
    while nbytes < nc * nt * threshold and nc >= 2:
        nc -= 1
    return nc


def _alltoall(system: System, collective: str, nbytes: int) -> Prediction:
    """Alltoall as NCCL runs it: send/recv to every peer at once (Simple), no tuner. Priced
    from the same sources: each rank sends (g-1)/n of its buffer over NVLink at the ring graph's
    channels x speed, (n-g)/n over its node's NICs at the ring's channels x bwInter shared by g
    GPUs, both at once; latency: one ring step (baseLat + hwLat, Ring, Simple)."""
    n, g, rccl = system.n, system.gpus_per_node, system.gpu.name == "mi300x"
    ring = _rccl_ring(system) if rccl else _graphs(system)["ring"]
    base, hw = (R_BASE_LAT, R_HW_LAT) if rccl else (BASE_LAT, HW_LAT)
    lat = base["ring"][2] + hw["nvlink" if system.n_nodes == 1 else "net"]["ring"][2]
    intra = nbytes * (g - 1) / n / (1000 * ring.channels * ring.intra) if g > 1 else 0.0
    inter = nbytes * (n - g) / n / (1000 * ring.channels * ring.inter / g)
    channels = ring.channels if rccl else _comm_channels(system)
    return Prediction(collective, nbytes, n, (lat + max(intra, inter)) * 1e-6, "p2p", "Simple",
                      channels)


# ----------------------------------------------------------------------------- RCCL (MI300X)

def _rccl_table(system: System, kind: int) -> dict[tuple[str, str], tuple[float, float]]:
    """RCCL's ncclTopoTuneModel (HIP build) on an 8 x MI300X node: rings (and trees) from its
    rome model, bandwidth x bwRatio, LL128 off (enabled only on gfx90a), Tree/Simple skipped on
    one gfx94 node; latencies from baseLat and tuning_model_5."""
    n, nodes, ppn = system.n, system.n_nodes, system.gpus_per_node
    ring = _rccl_ring(system)
    nsteps = _steps(kind, n)
    inter_steps = ((2 * nodes if nodes > 1 else 0) if kind == FUNC_ALLREDUCE else
                   nodes - 1 if kind == FUNC_GATHER else nodes)  # RCCL's nInterSteps
    table = {}
    for a in ("tree", "ring"):
        if a == "tree" and kind != FUNC_ALLREDUCE:
            continue
        for p, proto in enumerate(PROTOCOLS):
            if a == "tree" and p == 2 and nodes == 1:
                continue
            bus = ring.channels * ring.intra * R_BW_RATIO[nodes > 2][a][p] * (
                1.65 if a == "ring" and p == 0 and kind == FUNC_ROOTED
                and nodes == 1 else 1)
            bus *= n / nsteps if a == "ring" else .5
            if p == 1:
                bus = 0.0  # LL128 disabled by default (tuning.cc: gfx90a only)
            lat = R_BASE_LAT[a][p]
            intra, inter = R_HW_LAT["nvlink"][a][p], R_HW_LAT["net"][a][p]
            if a == "ring" and kind == FUNC_ROOTED:
                lat += R_HW_LAT["nvlink" if nodes == 1 else "net"][a][p]
            elif a == "ring":
                overhead = 0.0 if nodes == 1 else (2.0 if system.cpu == "amd" else 1.0) * (
                    3 if p == 2 else 1)
                lat += (nsteps - inter_steps) * max(intra, overhead) + inter_steps * inter
            else:
                lat += 2 * ((ppn - 1) * intra + _log2(nodes) * inter)
            table[a, proto] = (lat, bus)
    return table


def _rccl_ring(system: System) -> _Graph:
    """RCCL's rings on MI300X: rome_models.cc's ring lists (R_RINGS), each at totalBw / nChannels
    (parseGraph: bwIntra = bwInter)."""
    channels = R_RINGS[system.n_nodes > 1]
    return _Graph(channels, system.nvlink_gbs / channels, system.nvlink_gbs / channels)


def _rccl_time(system, kind, a, proto, nbytes, lat, bw) -> float:
    """RCCL's ncclTopoGetAlgoTime (HIP build): tree and (across nodes) ring correction factors
    by log2(bytes / 64), the last one past 26; no ring plateau."""
    p = PROTOCOLS.index(proto)
    log_size = min(max(_log2(nbytes >> 6), 0), 26)  # RCCL indexes [-1] below 64 B: clamped
    if a == "tree":
        bw *= R_TREE_CORRECTION[p][log_size]
    elif system.n_nodes > 1:
        bw *= R_RING_CORRECTION[p][log_size]
    return lat + nbytes / (1000 * bw) if bw > 0 else math.inf
