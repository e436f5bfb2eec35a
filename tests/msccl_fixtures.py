"""MSCCL XML algorithms written for the tests, in the runtimes' format (one element a line,
every attribute present): the shapes RCCL's library ships, by our own generators, and small
files written by hand that the runtimes would refuse. No file from another project is copied."""

from __future__ import annotations


def _algo(name, coll, n, k, *, channels=1, proto="Simple", inplace=1, outofplace=0,
          min_bytes=0, max_bytes=0) -> str:
    return (f'<algo name="{name}" proto="{proto}" nchannels="{channels}" nchunksperloop="{k}" '
            f'ngpus="{n}" coll="{coll}" inplace="{inplace}" outofplace="{outofplace}" '
            f'minBytes="{min_bytes}" maxBytes="{max_bytes}">')


def step(s, type_, srcbuf="i", srcoff=-1, dstbuf="o", dstoff=-1, cnt=1, depid=-1, deps=-1,
         hasdep=0) -> str:
    return (f'<step s="{s}" type="{type_}" srcbuf="{srcbuf}" srcoff="{srcoff}" '
            f'dstbuf="{dstbuf}" dstoff="{dstoff}" cnt="{cnt}" depid="{depid}" deps="{deps}" '
            f'hasdep="{hasdep}"/>')


def _program(head: str, gpus: list[tuple[dict, list[tuple[dict, list[str]]]]]) -> str:
    """``gpus``: per gpu (its attributes, [(threadblock attributes, step lines)])."""
    lines = ["<!-- written for jaxcoll's tests -->", head]
    for g, (attributes, tbs) in enumerate(gpus):
        lines.append(f'  <gpu id="{g}" i_chunks="{attributes["i"]}" o_chunks="{attributes["o"]}" '
                     f's_chunks="{attributes.get("s", 0)}">')
        for t, (tb, steps) in enumerate(tbs):
            lines.append(f'    <tb id="{t}" send="{tb.get("send", -1)}" '
                         f'recv="{tb.get("recv", -1)}" chan="{tb.get("chan", 0)}">')
            lines += [f"      {line}" for line in steps]
            lines.append("    </tb>")
        lines.append("  </gpu>")
    return "\n".join(lines + ["</algo>"])


def fused_ring_allreduce(n: int, inplace: int = 1, outofplace: int = 1) -> str:
    """A ring allreduce in the shape of RCCL's unit-test rings: one threadblock per gpu,
    ``s``, n - 2 ``rrs`` (receive, add, forward, store nothing), ``rrcs``, n - 2 ``rcs``, ``r``."""
    gpus = []
    for r in range(n):
        kinds = [("s", r)] + [("rrs", (r - k) % n) for k in range(1, n - 1)]
        kinds += [("rrcs", (r + 1) % n)] + [("rcs", (r - k) % n) for k in range(n - 2)]
        kinds += [("r", (r + 2) % n)]
        if n == 1:
            kinds = []
        elif n == 2:
            kinds = [("s", r), ("rrcs", (r + 1) % n), ("s", (r + 1) % n), ("r", r)]
            kinds = [("s", r), ("rrcs", (r + 1) % n), ("r", r)]
        steps = [step(s, kind, "i", c, "o", c) for s, (kind, c) in enumerate(kinds)]
        gpus.append(({"i": n, "o": n}, [({"send": (r + 1) % n, "recv": (r - 1) % n}, steps)]
                     if n > 1 else []))
    return _program(_algo("fused ring", "allreduce", n, n, inplace=inplace,
                          outofplace=outofplace), gpus)


def allpairs_allreduce(n: int, k_per_gpu: int = 2) -> str:
    """An all-pairs allreduce in the shape of RCCL's one-step files: every gpu sends its whole
    input to every peer, which receives it into scratch; a local threadblock waits (nops) for
    every send (the reduces overwrite what they read) and every receive, then adds each chunk's
    n - 1 copies in with a fused run of ``re``. In place only, as RCCL's."""
    k = n * k_per_gpu

    def adds(first_wait):  # re of chunk c from peer j: the first carries the last wait
        return [("s", j * k + c, c, 1, first_wait if c == j == 0 else (-1, -1))
                for c in range(k) for j in range(n - 1)]
    return _all_pairs("all-pairs", n, k, adds)


def _all_pairs(name: str, n: int, k: int, adds) -> str:
    """Every gpu sends its k chunks to every peer, into scratch (peer j's at s[j * k]); its
    local threadblock waits (nops) for every send and receive, then runs ``adds(last wait)``:
    re steps as (srcbuf, srcoff, dstoff, cnt, (depid, deps)) into i."""
    gpus = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        tbs = [({"send": p, "recv": p}, [step(0, "s", "i", 0, "s", 0, cnt=k, hasdep=1),
                                         step(1, "r", "i", 0, "s", j * k, cnt=k, hasdep=1)])
               for j, p in enumerate(peers)]
        waits = [(t + 1, s) for t in range(len(peers)) for s in (0, 1)]
        local = [step(position, "nop", depid=t, deps=s)
                 for position, (t, s) in enumerate(waits[:-1])]
        for srcbuf, srcoff, dstoff, cnt, (depid, deps) in adds(waits[-1] if waits else (-1, -1)):
            local.append(step(len(local), "re", srcbuf, srcoff, "i", dstoff, cnt=cnt,
                              depid=depid, deps=deps))
        gpus.append(({"i": k, "o": 0, "s": (n - 1) * k}, [({}, local)] + tbs))
    return _program(_algo(name, "allreduce", n, k, inplace=1, outofplace=0), gpus)


def direct_alltoall(n: int, per: int = 1) -> str:
    """A direct alltoall in the shape of RCCL's alltoall-8n files (``per`` chunks per block):
    a local ``cpy`` of the own block, a receiving threadblock and a sending one per peer. Out
    of place only, as RCCL's."""
    k = n * per
    gpus = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        tbs = [({}, [step(0, "cpy", "i", r * per, "o", r * per, cnt=per)])]
        tbs += [({"recv": p}, [step(0, "r", "i", r * per, "o", p * per, cnt=per)]) for p in peers]
        tbs += [({"send": p}, [step(0, "s", "i", p * per, "o", r * per, cnt=per)]) for p in peers]
        gpus.append(({"i": k, "o": k}, tbs))
    return _program(_algo("direct alltoall", "alltoall", n, k, inplace=0, outofplace=1), gpus)


def ring_allgather(n: int) -> str:
    """An in-place ring allgather: send the own chunk from o (i aliases it), forward with
    ``rcs``, end with ``r``."""
    gpus = []
    for r in range(n):
        kinds = [("s", r)] + [("rcs", (r - k) % n) for k in range(1, n - 1)] + [("r", (r + 1) % n)]
        steps = [step(s, kind, "o", c, "o", c) for s, (kind, c) in enumerate(kinds)]
        gpus.append(({"i": 1, "o": n}, [({"send": (r + 1) % n, "recv": (r - 1) % n}, steps)]))
    return _program(_algo("ring allgather", "allgather", n, n, inplace=1, outofplace=0), gpus)


def two_gpus(steps0: list[str], steps1: list[str], coll="allreduce", k=2, s_chunks=2,
             tb0=None, tb1=None, **algo) -> str:
    """A two-gpu program of one threadblock each (send to and receive from the other), by
    hand: for the files the runtimes refuse."""
    return _program(_algo("by hand", coll, 2, k, **algo), [
        ({"i": k, "o": k, "s": s_chunks}, [(tb0 or {"send": 1, "recv": 1}, steps0)]),
        ({"i": k, "o": k, "s": s_chunks}, [(tb1 or {"send": 0, "recv": 0}, steps1)])])


def uneven_chain_allreduce(n: int = 3) -> str:
    """An all-pairs allreduce of 2 chunks whose local adds are written ``re s[0] cnt=2 -> i[0]``
    (a peer's both chunks) then ``re s[2] cnt=1 -> i[0]`` and ``re s[3] cnt=1 -> i[1]`` (the
    next peer's, one by one). Read step by step it is a right allreduce; the runtimes' parser
    chains the first two (same dst and srcbuf, no dependency) into one reduction of the last
    step's count, so chunk 1 never gets the first peer's contribution."""
    def adds(first_wait):
        return [("s", 0, 0, 2, first_wait)] + [("s", j * 2 + c, c, 1, (-1, -1))
                                               for j in range(1, n - 1) for c in range(2)]
    return _all_pairs("uneven chain", n, 2, adds)
