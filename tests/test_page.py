"""The HTML page of a schedule (jaxcoll.tools.pictures.html): self-contained, showing the states
symbolic.states proves and the cost model's bytes and times; then driven in a real browser
(headless Chromium through Playwright: keys, buttons, slider, play) with the network cut off."""

import html as html_text
import itertools
import json
import os
import re
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

import jaxcoll
from jaxcoll import Schedule, Transfer
from jaxcoll.tools import pictures
from jaxcoll.tools.cli import main
from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.symbolic import ScheduleError, states
from jaxcoll.ir.symbolic import promised as symbolic_promised
from jaxcoll.analysis.systems import dgx
from jaxcoll.analysis.topology import ring, torus
from jaxcoll.ir.families import SCHEDULES as FAMILIES

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

CALIBRATION = jaxcoll.Calibration(alpha=5e-6, beta=1e-10, gamma=2e-11, backend="test")
MiB = 1 << 20


def by_hand_allgather(n: int = 3) -> Schedule:
    """A ring allgather written out by hand, labelled with its primitive (its name is not
    markup on the page)."""
    rounds = [[Transfer(r, (r + 1) % n, (r - step) % n, reduce=False) for r in range(n)]
              for step in range(n - 1)]
    built = Schedule.build("my <ring> allgather & __DATA__", n, n_chunks=n, rounds=rounds)
    return replace(built, collective="allgather")


SCHEDULES = {
    "ring allreduce n=4": lambda: jaxcoll.schedule("allreduce", "ring", 4),
    "binomial broadcast n=5 root 2": lambda: jaxcoll.schedule("broadcast", "binomial", 5, root=2),
    "hand-built allgather n=3": by_hand_allgather,
}


def page_data(text: str) -> dict:
    """The JSON the page's script draws from."""
    found = re.search(r'<script type="application/json" id="schedule-data">(.*?)</script>',
                      text, re.S)
    assert found, "the page embeds no schedule data"
    return json.loads(found.group(1))


def as_sets(history) -> list:
    """states(...) or the page's states as [step][rank][chunk] sets of (rank, chunk)."""
    return [[[{tuple(pair) for pair in cell or ()} for cell in row] for row in state]
            for state in history]


def promised(schedule: Schedule) -> dict:
    """{(rank, chunk): contributions} that verify demands after the last round (the
    primitive's record, not the page's code)."""
    return {(rank, chunk): {(r, origin) for r in range(schedule.n_ranks) if ranks >> r & 1}
            for rank, row in RECORDS[schedule.collective].promises(
                schedule.n_ranks, schedule.n_chunks, schedule.root)
            for chunk, origin, ranks in row}


# ----------------------------------------------------------------------------- no browser

@pytest.mark.parametrize("name", SCHEDULES)
def test_page_is_self_contained_and_embeds_the_proved_states(name, tmp_path):
    schedule = SCHEDULES[name]()
    path = pictures.html(schedule, tmp_path / "page.html", calibration=CALIBRATION)
    text = path.read_text(encoding="utf-8")
    for outside in ("http:", "https:", "//cdn", "<link", "@import", "fetch(", "XMLHttpRequest",
                    "<iframe", "<img"):
        assert outside not in text, f"the page reaches outside: {outside!r}"
    assert not re.search(r"(?<![\w-])(src|href)\s*=", text)  # no loaded resource at all
    assert set(re.findall(r"url\((.)", text)) <= {"#"}  # only the page's own arrow head
    data = page_data(text)
    assert as_sets(data["states"]) == as_sets(states(schedule))
    last = data["states"][-1]
    for (rank, chunk), want in promised(schedule).items():
        assert {tuple(pair) for pair in last[rank][chunk]} == want
    assert data["verdict"] == "ok"


def test_bytes_and_times_are_the_cost_models():
    n, schedule = 4, jaxcoll.schedule("allreduce", "ring", 4)
    rounds = page_data(pictures.html(schedule, nbytes=MiB, calibration=CALIBRATION).text)["rounds"]
    whole = jaxcoll.cost(schedule, MiB, alpha=CALIBRATION.alpha, beta=CALIBRATION.beta,
                         gamma=CALIBRATION.gamma)
    assert sum(r["seconds"] for r in rounds) == pytest.approx(whole.seconds)
    assert sum(r["bytes"] for r in rounds) == 2 * (n - 1) * MiB  # the ring's textbook traffic
    assert [r["busiest"] for r in rounds] == [MiB / n] * 2 * (n - 1)
    on_links = ring(n, alpha=1e-6, beta=2e-10)
    simulated = page_data(pictures.html(schedule, topology=on_links).text)
    assert sum(r["seconds"] for r in simulated["rounds"]) == pytest.approx(
        jaxcoll.simulate(schedule, MiB, on_links).seconds)
    assert on_links.name in simulated["model"]


def test_each_rounds_alpha_and_beta_are_the_models_terms():
    """Priced by the model, a round's α is its messages x α (jaxcoll.cost), the rest its β
    and γ; simulated, its α is the round's time with β = γ = 0: on two DGX H100 a ring round
    of 11.3 µs is 10 µs of α (the route's, through the NICs) and 1.3 µs of bytes."""
    schedule = jaxcoll.schedule("allreduce", "halving_doubling", 8)
    rounds = page_data(pictures.html(schedule, calibration=CALIBRATION).text)["rounds"]
    for round_, row in zip(schedule.rounds, rounds):
        alone = jaxcoll.cost(replace(schedule, rounds=(round_,)), MiB, alpha=CALIBRATION.alpha,
                             beta=CALIBRATION.beta, gamma=CALIBRATION.gamma)
        assert row["alpha_seconds"] == pytest.approx(alone.messages * CALIBRATION.alpha)
        assert row["rest_seconds"] == pytest.approx(alone.seconds - row["alpha_seconds"])
        assert row["rest_seconds"] > 0
    ring16, two_nodes = jaxcoll.schedule("allreduce", "ring", 16), dgx("h100", 2)
    rounds = page_data(pictures.html(ring16, topology=two_nodes).text)["rounds"]
    nic = two_nodes.alpha[[two_nodes.link_names.index(name) for name in two_nodes.route(7, 8)]]
    for row in rounds:
        assert row["time_text"] == "11.3 µs" and row["alpha_text"] == "10 µs"
        assert row["alpha_seconds"] == pytest.approx(nic.sum())  # the route's α
        assert row["alpha_seconds"] + row["rest_seconds"] == pytest.approx(row["seconds"])


@pytest.mark.parametrize("n", [5])
def test_the_counter_ends_at_the_busiest_ranks_bytes_against_the_bound(n):
    for schedule in all_schedules(n):
        data = page_data(pictures.html(schedule, nbytes=MiB).text)
        sent = [row["sent_so_far"] for row in data["rounds"]]
        assert sent == sorted(sent)  # a running count
        assert sent[-1] == pytest.approx(jaxcoll.cost(schedule, MiB, alpha=0, beta=0).bytes_sent)
        assert data["bound"]["bytes"] == pytest.approx(jaxcoll.bounds(
            schedule.collective, n, MiB, CALIBRATION).path_bytes)
    ring_ = page_data(pictures.html(jaxcoll.schedule("allreduce", "ring", n)).text)["bound"]
    assert ring_ == {"bytes": 2 * (n - 1) / n * MiB, "text": ring_["text"],
                     "rule": "2(n-1)/n·N"}


def partial_sums(schedule: Schedule, state) -> set:
    """The cells holding a partial sum: in a reducing collective, those not holding what they
    must end with that hold some chunk summed over 2 to n - 1 ranks."""
    if not RECORDS[schedule.collective].reduces:
        return set()
    want, n = symbolic_promised(schedule), schedule.n_ranks
    return {(r, c) for r, row in enumerate(state) for c, held in enumerate(row)
            if want.get((r, c)) != held
            and any(1 < sum(1 for _, k in held if k == chunk) < n for _, chunk in held)}


def test_compare_must_be_a_schedule_of_the_same_collective_and_ranks():
    ring8, naive8 = jaxcoll.schedule("allreduce", "ring", 8), jaxcoll.schedule("allreduce",
                                                                                "naive", 8)
    with pytest.raises(TypeError, match="compare must be a jaxcoll.Schedule"):
        pictures.html(ring8, compare="naive")
    with pytest.raises(ValueError, match=r"compare='ring reduce_scatter \+ ring allgather' "
                                         "has 4 ranks, the schedule 8"):
        pictures.html(ring8, compare=jaxcoll.schedule("allreduce", "ring", 4))
    with pytest.raises(ValueError, match="is a reduce schedule, the schedule a allreduce one"):
        pictures.html(ring8, compare=jaxcoll.schedule("reduce", "tree", 8))
    data = page_data(pictures.html(ring8, compare=naive8, calibration=CALIBRATION).text)
    assert data["name"] == ring8.name and data["compare"]["name"] == naive8.name
    assert as_sets(data["compare"]["states"]) == as_sets(states(naive8))
    assert page_data(pictures.html(ring8).text)["compare"] is None


def test_no_times_unless_a_calibration_or_topology_is_named(tmp_path):
    """Without either, rounds and bytes only (the fake-CPU α is no hardware's), and the page
    says so; ``draw --calibration`` names one on the command line."""
    schedule = jaxcoll.schedule("allreduce", "ring", 4)
    data = page_data(pictures.html(schedule, nbytes=MiB).text)
    assert [r["seconds"] for r in data["rounds"]] == [None] * schedule.n_rounds
    assert {r["time_text"] for r in data["rounds"]} == {"—"} and data["total_text"] is None
    assert data["model"].startswith("no times") and "calibration=" in data["model"]
    assert sum(r["bytes"] for r in data["rounds"]) == 6 * MiB  # bytes stay the schedule's
    out = tmp_path / "priced.html"
    assert main(["draw", "allreduce", "ring", "--n", "4", "--calibration", "cpu",
                 "-o", str(out)]) == 0
    priced = page_data(out.read_text(encoding="utf-8"))
    cpu = jaxcoll.calibration("cpu")
    assert sum(r["seconds"] for r in priced["rounds"]) == pytest.approx(jaxcoll.cost(
        schedule, MiB, alpha=cpu.alpha, beta=cpu.beta, gamma=cpu.gamma).seconds)
    assert "cpu calibration" in priced["model"]
    assert main(["draw", "allreduce", "ring", "--n", "16", "--topology", "dgx-h100",
                 "-o", str(out)]) == 0
    on_gpus = page_data(out.read_text(encoding="utf-8"))
    assert on_gpus["view"]["nodes"] and "DGX H100" in on_gpus["model"]
    assert sum(r["seconds"] for r in on_gpus["rounds"]) == pytest.approx(jaxcoll.simulate(
        jaxcoll.schedule("allreduce", "ring", 16), MiB, dgx("h100", 2)).seconds)
    with pytest.raises(SystemExit):
        main(["draw", "allreduce", "ring", "--n", "12", "--topology", "dgx-h100", "-o", str(out)])


def test_a_broken_or_unlabelled_schedule_is_drawn_with_what_verify_says():
    ring_ = jaxcoll.schedule("allreduce", "ring", 4)
    half = Schedule("half", 4, 4, ring_.rounds[:3], "allreduce")
    data = page_data(pictures.html(half, calibration=CALIBRATION).text)
    assert data["verdict"] == "bad" and "missing" in data["verdict_text"]
    assert as_sets(data["states"]) == as_sets(states(half))
    unlabelled = Schedule.build("hand-made", 4, n_chunks=4, rounds=ring_.rounds)
    data = page_data(pictures.html(unlabelled, calibration=CALIBRATION).text)
    assert data["verdict"] == "unverified"  # drawn from allreduce's start: all data everywhere
    assert as_sets(data["states"]) == as_sets(states(ring_))


def test_the_page_shows_inline_in_a_notebook():
    page = pictures.html(jaxcoll.schedule("reduce", "tree", 5, root=3), calibration=CALIBRATION)
    frame = page._repr_html_()
    assert frame.startswith("<iframe ") and 'sandbox="allow-scripts"' in frame
    srcdoc = re.search(r'srcdoc="([^"]*)"', frame).group(1)
    assert html_text.unescape(srcdoc) == page.text


def test_command_line_writes_the_page(tmp_path, capsys):
    out = tmp_path / "tree.html"
    assert main(["draw", "reduce", "tree", "--n", "6", "--root", "3", "-o", str(out)]) == 0
    assert "tree reduce" in capsys.readouterr().out
    schedule = jaxcoll.schedule("reduce", "tree", 6, root=3)
    data = page_data(out.read_text(encoding="utf-8"))
    assert as_sets(data["states"]) == as_sets(states(schedule)) and data["root"] == 3


def test_bad_input_is_named():
    schedule = jaxcoll.schedule("allreduce", "ring", 3)
    with pytest.raises(TypeError, match="schedule must be a jaxcoll.Schedule"):
        pictures.html("ring")
    with pytest.raises(ValueError, match=r"path='page.png' must end in .html"):
        pictures.html(schedule, "page.png")
    with pytest.raises(ValueError, match="nbytes=0 must be > 0"):
        pictures.html(schedule, nbytes=0)
    with pytest.raises(ValueError, match="unknown primitive 'allsum'"):
        pictures.html(replace(schedule, collective="allsum"))
    with pytest.raises(ValueError, match=r"round 0: transfer 0->5 \[0\]= names rank 5"):
        pictures.html(Schedule("bad", 3, 3, ((Transfer(0, 5, 0, False),),), "allreduce"))
    impossible = Schedule.build("early", 3, n_chunks=1, rounds=[[Transfer(1, 2, 0, False)]])
    with pytest.raises(ScheduleError, match="before it holds any data"):
        pictures.html(replace(impossible, collective="broadcast"))
    with pytest.raises(ValueError, match="the schedule has 3 ranks"):
        pictures.html(schedule, topology=ring(4, alpha=1e-6, beta=1e-10))


def parse_holding(text: str) -> set:
    """A cell's label read back: "a0–2,5+b3" -> {(0, 0), (1, 0), (2, 0), (5, 0), (3, 1)}."""
    held = set()
    for group in filter(None, text.split("+")):
        found = re.fullmatch(r"([a-z]|\[(\d+)\])([\d,–]+)", group)
        assert found, f"not a label: {group!r} in {text!r}"
        chunk = ord(found.group(1)) - ord("a") if found.group(2) is None else int(found.group(2))
        for part in found.group(3).split(","):
            first, _, last = part.partition("–")
            held |= {(r, chunk) for r in range(int(first), int(last or first) + 1)}
    return held


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_cells_label_reads_back_as_what_it_holds(name):
    schedule = SCHEDULES[name]()
    data = page_data(pictures.html(schedule).text)
    assert [[[parse_holding(text) for text in row] for row in step] for step in data["texts"]] \
        == as_sets(states(schedule))
    assert pictures.holding_text([(0, 0), (1, 0), (2, 0), (5, 0), (3, 1)]) == "a0–2,5+b3"
    assert pictures.holding_text([(3, 0), (4, 0)]) == "a3,4" and pictures.holding_text(None) == ""


@pytest.mark.parametrize("algorithm, named", [
    ("ring", ["reduce_scatter", "allgather"]),
    ("halving_doubling", ["reduce_scatter", "allgather"]),
    ("tree", ["reduce to rank 0", "broadcast from rank 0"]), ("recursive_doubling", ["allreduce"])])
def test_phases_are_named_by_what_they_leave(algorithm, named):
    schedule = jaxcoll.schedule("allreduce", algorithm, 8)
    found = pictures.phases(schedule, states(schedule))
    assert [p["name"] for p in found] == named
    assert [r for p in found for r in range(p["first"], p["last"] + 1)] == list(
        range(schedule.n_rounds))  # every round in one phase, in order
    for phase in found:  # a phase's rounds all reduce, or all copy
        assert len({t.reduce for r in schedule.rounds[phase["first"]:phase["last"] + 1]
                    for t in r}) == 1
    binomial = jaxcoll.schedule("broadcast", "binomial", 5, root=2)
    assert pictures.phases(binomial, states(binomial)) == [
        {"first": 0, "last": binomial.n_rounds - 1, "name": "broadcast"}]


def arc_points(d: str, samples: int = 40) -> list:
    """Points along an arc's quadratic pieces ("M x,y Q cx,cy x,y" each)."""
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
    assert numbers and len(numbers) % 6 == 0, d
    points = []
    for k in range(0, len(numbers), 6):
        (x0, y0, cx, cy, x1, y1), t = numbers[k:k + 6], [i / samples for i in range(samples + 1)]
        points += [((1 - u) ** 2 * x0 + 2 * (1 - u) * u * cx + u * u * x1,
                    (1 - u) ** 2 * y0 + 2 * (1 - u) * u * cy + u * u * y1) for u in t]
    return points


def crossed_ranks(view: dict, arc: dict, route: set) -> set:
    """The ranks (not on the arc's route) whose circle it passes through."""
    points = arc_points(arc["d"])
    return {r for r, (x, y) in enumerate(view["places"]) if r not in route and any(
        (px - x) ** 2 + (py - y) ** 2 < view["radius"] ** 2 for px, py in points)}


# A shape per n for hierarchical (its levels' sizes; the other algorithms take n alone).
SHAPES = {5: (5,), 8: (2, 4), 16: (4, 4)}


def all_schedules(n: int):
    """Every registered algorithm's schedule on n ranks (hierarchical on SHAPES[n])."""
    for primitive, algorithms in FAMILIES.items():
        for algorithm in algorithms:
            yield jaxcoll.schedule(primitive, algorithm,
                                   SHAPES[n] if algorithm == "hierarchical" else n)


@cache
def priced_pages(n: int) -> tuple:
    """(schedule, page text) of every registered algorithm on n ranks, priced by CALIBRATION
    (made once for the tests that read them)."""
    return tuple((schedule, pictures.html(schedule, calibration=CALIBRATION).text)
                 for schedule in all_schedules(n))


def expected_layout(schedule: Schedule) -> str:
    """The layout an algorithm is drawn in, by its name (the page goes by its structure); two
    algorithms one after the other ("binomial scatter + ring allgather") on the circle."""
    algorithms = {part.split()[0] for part in schedule.name.split(" + ")}
    algorithm = algorithms.pop() if len(algorithms) == 1 else "two"
    if algorithm == "hierarchical":
        return "bands"
    if algorithm in ("tree", "binomial", "chain", "double_tree"):
        return "tree"
    if algorithm in ("recursive_doubling", "halving", "halving_doubling", "doubling") \
            and schedule.n_ranks in (4, 8, 16):
        return "hypercube"
    return "circle"


@pytest.mark.parametrize("n", [5, 8, 16])
def test_arcs_miss_the_ranks_they_do_not_join(n):
    """In every algorithm's layout, every transfer's arc of every schedule leaves every other
    rank's circle (and the number in it) clear, inside the view; along a ring's or torus's
    links, those its route passes."""
    for schedule, text in priced_pages(n):  # the view is the same priced or not
        view = page_data(text)["view"]
        assert view["layout"] == expected_layout(schedule), schedule.name
        assert not view["links"]  # a switch: nothing to draw
        for round_ in view["rounds"]:
            for arc in round_["arcs"]:
                assert not crossed_ranks(view, arc, {arc["src"], arc["dst"]}), (
                    schedule.name, arc["text"])
                assert all(0 <= x <= view["width"] and 0 <= y <= view["height"]
                           for x, y in arc_points(arc["d"])), (schedule.name, arc["text"])
    for links in (ring(n, alpha=1e-6, beta=1e-10), torus(4, 4, alpha=1e-6, beta=1e-10)):
        if links.n != n:
            continue
        schedule = jaxcoll.schedule("allreduce", "recursive_doubling", n)
        view = page_data(pictures.html(schedule, topology=links).text)["view"]
        assert len(view["links"]) == len(links.link_names)  # every link drawn
        for round_, hops in zip(view["rounds"], schedule.rounds):
            for arc, t in zip(round_["arcs"], hops):
                route = {int(r) for name in links.route(t.src, t.dst)
                         for r in re.findall(r"\d+", name)}  # its links' ranks
                passed = {(t.src + k) % n for k in range(n)} if links.name.startswith("ring") \
                    else route | _torus_ranks(links, t.src, t.dst)
                assert not crossed_ranks(view, arc, passed | {t.src, t.dst}), arc["text"]


def _torus_ranks(links, src: int, dst: int) -> set:
    """The ranks a torus route visits (the owner of each link it crosses, and dst)."""
    return {int(name.split("->")[0]) for name in links.route(src, dst)} | {dst}


def test_the_view_places_ranks_on_their_topology_with_simulates_loads():
    schedule = jaxcoll.schedule("allreduce", "ring", 16)
    on = {"torus": torus(4, 4, alpha=1e-6, beta=1e-10), "nodes": dgx("h100", 2)}
    grid = page_data(pictures.html(schedule, topology=on["torus"]).text)["view"]
    assert grid["layout"] == "grid" and grid["name"] == "4x4 torus"
    rows = {y for _, y in grid["places"]}
    assert len(rows) == 4
    assert [sorted(y for _, y in grid["places"][4 * k:4 * k + 4]) for k in range(4)] == [
        [y] * 4 for y in sorted(rows)]  # rank r in row r // 4
    nodes = page_data(pictures.html(schedule, topology=on["nodes"]).text)["view"]
    assert nodes["nodes"] == [{"node": 0, "ranks": list(range(8))},
                              {"node": 1, "ranks": list(range(8, 16))}]
    for links in on.values():
        view = page_data(pictures.html(schedule, topology=links).text)["view"]
        for k in (0, 7, 15):
            alone = replace(schedule, rounds=(schedule.rounds[k],))
            want = jaxcoll.simulate(alone, MiB, links).round_links(0)
            loads = view["rounds"][k]["loads"]
            assert {name: nbytes for name, nbytes, _, _ in loads} == want
            busy = [row[3] for row in loads]
            assert busy == sorted(busy, reverse=True)  # the one busy longest first
            assert busy[0] == pytest.approx(max(  # simulate's busiest link, bytes x β
                nbytes * links.beta[links.link_names.index(name)] for name, nbytes in want.items()))
    slowest = page_data(pictures.html(schedule, topology=on["nodes"]).text)["view"]["rounds"][7]
    assert "nic" in slowest["loads"][0][0]  # the NICs between nodes, not NVLink, set the time
    assert {(a["src"], a["dst"]) for a in slowest["arcs"] if a["slow"]} == {(7, 8), (15, 0)}
    assert pictures.transfer_text(Transfer(0, 1, 3, True)) == "0->1 d+"
    assert pictures.transfer_text(Transfer(2, 2, (0, 1), False, into=(4, 5))) == "2->2 a,b>e,f="


# ----------------------------------------------------------------------------- in a browser

@pytest.fixture(scope="module")
def artefacts() -> Path:
    """Where the browser tests leave their screenshots: $JAXCOLL_TEST_ARTEFACTS, else
    .artefacts/ at the top of the checkout (ignored by git)."""
    folder = Path(os.environ.get("JAXCOLL_TEST_ARTEFACTS") or
                  Path(__file__).resolve().parent.parent / ".artefacts") / "page"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def tab(browser):
    """A fresh tab per test: what a failing test left routed or listening goes with it."""
    page = browser.new_page()
    yield page
    page.close()


class Opened:
    """A page loaded from file:// with every other request aborted and counted, and every
    console error and page error kept."""

    def __init__(self, tab, path: Path):
        self.url, self.blocked, self.errors, self.page = path.as_uri(), [], [], tab
        tab.route("**/*", self._route)
        tab.on("console", self._console)
        tab.on("pageerror", self._error)
        tab.goto(self.url)

    def _console(self, message):
        if message.type == "error":
            self.errors.append(message.text)

    def _error(self, error):
        self.errors.append(str(error))

    def _route(self, route):
        if route.request.url == self.url:
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def step(self) -> int:
        return int(self.page.get_attribute("#round", "data-step"))

    def cells(self) -> dict:
        """{(rank, chunk): contributions} as the drawing's cells say."""
        rows = self.page.eval_on_selector_all(
            "g.cell", "cells => cells.map(c => [c.dataset.rank, c.dataset.chunk, "
                      "c.dataset.contributions])")
        return {(int(r), int(c)): {tuple(map(int, p.split(":"))) for p in held.split()}
                for r, c, held in rows}

    def colours(self) -> list:
        """Every cell's stripe colours, in order."""
        return self.page.eval_on_selector_all(
            "g.cell", "cells => cells.map(c => [...c.querySelectorAll('rect')]"
                      ".map(r => r.getAttribute('fill')).join(' '))")

    def close(self) -> tuple[list, list]:
        """Leave the tab as it was; return (the requests blocked, the errors)."""
        self.page.unroute("**/*", self._route)
        self.page.remove_listener("console", self._console)
        self.page.remove_listener("pageerror", self._error)
        return self.blocked, self.errors


def cells_of(state) -> dict:
    return {(rank, chunk): set(cell or ()) for rank, row in enumerate(state)
            for chunk, cell in enumerate(row)}


def test_the_network_check_catches_a_page_that_reaches_out(tab, tmp_path):
    path = tmp_path / "outside.html"
    path.write_text('<img src="https://example.com/a.png"><script src="http://cdn.x/a.js">'
                    '</script>')
    opened = Opened(tab, path)
    blocked, errors = opened.close()
    assert sorted(blocked) == ["http://cdn.x/a.js", "https://example.com/a.png"]
    assert len(errors) == 2 and all("Failed to load resource" in e for e in errors)


@pytest.mark.parametrize("name", SCHEDULES)
def test_stepping_to_the_last_round_shows_what_verify_proves(tab, tmp_path, name):
    schedule = SCHEDULES[name]()
    history = states(schedule)
    opened = Opened(tab, pictures.html(schedule, tmp_path / "page.html",
                                           calibration=CALIBRATION))
    assert opened.step() == 0 and opened.cells() == cells_of(history[0])
    assert opened.page.text_content("#title") == schedule.name  # a name is text, not markup
    for _ in range(schedule.n_rounds + 1):  # one press past the end stays there
        opened.page.keyboard.press("ArrowRight")
    assert opened.step() == schedule.n_rounds
    assert opened.cells() == cells_of(history[-1])
    shown = opened.cells()
    assert {key: shown[key] for key in promised(schedule)} == promised(schedule)
    assert opened.close() == ([], [])  # no request, no console or page error


def test_an_unpriced_page_says_it_shows_no_times(tab, tmp_path):
    opened = Opened(tab, pictures.html(jaxcoll.schedule("broadcast", "binomial", 1),
                                       tmp_path / "one.html"))
    summary = tab.text_content("#summary")
    assert "1 rank (rows) x 1 chunk (columns), 0 rounds" in summary  # singular where it is one
    assert "no times" in summary and " takes " not in summary
    assert opened.errors == [] and opened.blocked == []


@pytest.mark.parametrize("name", ["binomial broadcast n=5 root 2", "ring allreduce n=4"])
def test_outlined_cells_are_the_rounds_destinations_ticked_ones_hold_their_result(
        tab, tmp_path, name):
    schedule = SCHEDULES[name]()
    opened = Opened(tab, pictures.html(schedule, tmp_path / "page.html"))
    shown = {r for state in states(schedule) for row in state for cell in row
             for r, _ in cell or ()}
    legend = tab.text_content("#legend")
    assert {r for r in range(schedule.n_ranks) if f"data of rank {r}" in legend} == shown
    where = "cells => cells.map(c => [c.dataset.rank, c.dataset.chunk])"

    def marked(kind):
        return {(int(r), int(c)) for r, c in tab.eval_on_selector_all(f"g.cell.{kind}", where)}

    want, history = promised(schedule), as_sets(states(schedule))
    for k, state in enumerate(history):  # k: the step, after round k - 1
        if k:
            tab.keyboard.press("ArrowRight")
        assert opened.step() == k
        written = {(t.dst, c) for t in schedule.rounds[k - 1] for c in t.into} if k else set()
        assert marked("changed-cell") == written
        assert marked("complete") == {cell for cell, needed in want.items()
                                      if state[cell[0]][cell[1]] == needed}
    assert marked("complete") == set(want)  # verified: every promised cell ends complete
    assert opened.errors == [] and opened.blocked == []


def shown_labels(tab) -> dict:
    """{(rank, chunk): (the label a cell carries, the text it shows)}."""
    rows = tab.eval_on_selector_all("g.cell", "cells => cells.map(c => [c.dataset.rank, "
                                    "c.dataset.chunk, c.dataset.label, "
                                    "c.querySelector('text.label')?.textContent ?? ''])")
    return {(int(r), int(c)): (label, text) for r, c, label, text in rows}


def held_counts(label: str) -> dict:
    """{chunk: how many ranks' copies} of a label."""
    counts = {}
    for _, chunk in parse_holding(label):
        counts[chunk] = counts.get(chunk, 0) + 1
    return counts


def shown_counts(text: str):
    """What a cut label shows, "n×3+o×1" -> {13: 3, 14: 1}; "×12" -> 12 (all chunks)."""
    if text.startswith("×"):
        return int(text[1:])
    return {ord(letter) - ord("a") if len(letter) == 1 else int(letter[1:-1]): int(count)
            for letter, count in (group.split("×") for group in text.split("+"))}


def test_labels_phases_arrows_and_loads_are_what_the_schedule_does(tab, tmp_path):
    """Round by round on a ring of links: each cell's label reads back as what states() says it
    holds, the named phase is the round's, the topology view's arrows are the round's
    transfers, and its link loads are simulate's."""
    n, links = 4, ring(4, alpha=1e-6, beta=1e-10)
    schedule = jaxcoll.schedule("allreduce", "tree", n)
    opened = Opened(tab, pictures.html(schedule, tmp_path / "tree.html", topology=links))
    history, found = as_sets(states(schedule)), pictures.phases(schedule, states(schedule))
    assert [p.split(":")[0] for p in tab.eval_on_selector_all(
        "#phases .phase", "ps => ps.map(p => p.textContent)")] == [p["name"] for p in found]
    for k, state in enumerate(history):
        if k:
            tab.keyboard.press("ArrowRight")
        labels = shown_labels(tab)
        assert {cell: parse_holding(label) for cell, (label, _) in labels.items()} == {
            (r, c): state[r][c] for r in range(n) for c in range(schedule.buffer_chunks)}
        assert all(text == label for label, text in labels.values())  # short enough to show
        arrows = tab.eval_on_selector_all("#topology path.arrow", "ps => ps.map(p => "
                                          "[Number(p.dataset.src), Number(p.dataset.dst)])")
        loads = tab.eval_on_selector_all("#loads tr.load", "rs => rs.map(r => "
                                         "[r.dataset.link, Number(r.dataset.bytes)])")
        current = tab.text_content("#phases .phase.current") if k else None
        if not k:
            assert arrows == [] and loads == [] and current is None
            continue
        round_ = schedule.rounds[k - 1]
        assert sorted(arrows) == sorted([t.src, t.dst] for t in round_)
        want = jaxcoll.simulate(replace(schedule, rounds=(round_,)), MiB, links).round_links(0)
        assert dict(loads) == want
        phase = next(p for p in found if p["first"] <= k - 1 <= p["last"])
        assert current.startswith(phase["name"] + ":") and phase["name"] in tab.text_content(
            "#now")
    assert opened.close() == ([], [])


@pytest.mark.parametrize("name, schedule", [
    ("recursive_doubling-16", lambda: jaxcoll.schedule("allreduce", "recursive_doubling", 16)),
    ("ring-16-on-2-dgx", lambda: jaxcoll.schedule("allreduce", "ring", 16)),
    ("bruck-alltoall-16", lambda: jaxcoll.schedule("alltoall", "bruck", 16))])
def test_at_16_ranks_no_arrow_crosses_a_rank_it_does_not_join(tab, tmp_path, artefacts, name,
                                                              schedule):
    """Measured in the drawn page: points along every arrow of every round stay out of every
    other rank's circle (which holds its number); a screenshot of each round is kept."""
    schedule = schedule()
    links = dgx("h100", 2) if "dgx" in name else None
    opened = Opened(tab, pictures.html(schedule, tmp_path / "p.html", topology=links))
    places = tab.eval_on_selector_all("#topology g.rank circle", "cs => cs.map(c => "
                                      "[Number(c.getAttribute('cx')), Number(c.getAttribute('cy')),"
                                      " Number(c.getAttribute('r'))])")
    assert len(places) == 16
    for k in range(1, schedule.n_rounds + 1):
        tab.keyboard.press("ArrowRight")
        crossed = tab.evaluate("""places => [...document.querySelectorAll('#topology path.arrow')]
          .flatMap(p => {
            const ends = [Number(p.dataset.src), Number(p.dataset.dst)], hit = [];
            for (let s = 0; s <= 40; s++) {
              const q = p.getPointAtLength(p.getTotalLength() * s / 40);
              places.forEach(([x, y, r], rank) => {
                if (!ends.includes(rank) && Math.hypot(q.x - x, q.y - y) < r) hit.push(rank);
              });
            }
            return hit.length ? [[ends, [...new Set(hit)]]] : [];
          })""", places)
        assert crossed == [], f"round {k - 1}: {crossed}"
        for label, text in shown_labels(tab).values():
            if text != label:  # too wide: each chunk's count (or all of them), never a cut
                held = held_counts(label)
                assert shown_counts(text) in (held, sum(held.values())), (label, text)
        if k <= 3:
            tab.screenshot(path=str(artefacts / f"page-{name}-round-{k - 1}.png"),
                           full_page=True)
    assert opened.close() == ([], [])


# ----------------------------------------------------------------------------- every algorithm

def parse_chunks(label: str, labels: list) -> list:
    """An arrow's label read back: "a–c,f" -> [0, 1, 2, 5] (labels: the page's chunk names)."""
    chunks = []
    for part in label.split(","):
        first, _, last = part.partition("–")
        chunks += range(labels.index(first), labels.index(last or first) + 1)
    return chunks


def tree_pairs(schedule: Schedule) -> set:
    """The (low, high) ranks a tree schedule's transfers join (a double tree's first tree:
    those of chunk 0)."""
    first = schedule.name.startswith("double_tree")
    return {(min(t.src, t.dst), max(t.src, t.dst)) for r in schedule.rounds for t in r
            if t.src != t.dst and (not first or 0 in t.chunks)}


# What the sweep reads from a page, in one call a step (after stepping to step k, if given).
SNAPSHOT = """k => {
  if (k !== null) {
    const slider = document.getElementById('slider');
    slider.value = k;
    slider.dispatchEvent(new Event('input'));
  }
  const all = (selector, read) => [...document.querySelectorAll(selector)].map(read);
  const num = (e, name) => Number(e.getAttribute(name));
  const counter = document.getElementById('counter');
  return {
    layout: document.getElementById('topology').dataset.layout,
    places: all('#topology g.rank circle', c => [num(c, 'cx'), num(c, 'cy')]),
    tree: all('#topology line.tree-edge', e => [Number(e.dataset.parent),
                                                Number(e.dataset.child)]),
    bands: all('#topology rect.band', b => [Number(b.dataset.node), num(b, 'x'), num(b, 'y'),
                                            num(b, 'width'), num(b, 'height')]),
    arrows: all('#topology g.transfer', g => {
      const text = g.querySelector('text.chunk-label');
      return [Number(g.dataset.src), Number(g.dataset.dst), g.dataset.chunks,
              text.textContent, getComputedStyle(text).visibility];
    }),
    cells: all('g.cell', c => [Number(c.dataset.rank), Number(c.dataset.chunk),
                               c.classList.contains('complete'),
                               c.classList.contains('partial')]),
    counter: [Number(counter.dataset.bytes), Number(counter.dataset.bound)],
    bars: all('#axis g.round-bar', g => [Number(g.dataset.round),
      num(g.querySelector('rect.span'), 'width'), num(g.querySelector('rect.alpha'), 'width')]),
    scale: Number(document.getElementById('axis').dataset.scale),
  };
}"""


def check_layout(seen: dict, schedule: Schedule) -> None:
    """The ranks as the algorithm's layout places them, read from the drawn circles."""
    n, kind = schedule.n_ranks, seen["layout"]
    assert kind == expected_layout(schedule), schedule.name
    at = dict(enumerate(map(tuple, seen["places"])))
    if kind == "tree":  # the root alone on top; each other rank one row below its parent
        pairs, rows = tree_pairs(schedule), sorted({y for _, y in at.values()})
        assert [r for r in range(n) if at[r][1] == rows[0]] == [schedule.root]
        for r in set(range(n)) - {schedule.root}:
            above = [q for q in range(n) if (min(q, r), max(q, r)) in pairs
                     and rows.index(at[q][1]) == rows.index(at[r][1]) - 1]
            assert len(above) == 1, (schedule.name, r)  # its parent
        assert all(abs(rows.index(at[a][1]) - rows.index(at[b][1])) == 1 for a, b in pairs)
        assert {tuple(sorted(edge)) for edge in seen["tree"]} == pairs  # the edges drawn
    elif kind == "hypercube":  # flipping bit k moves every rank by one vector, ±
        steps = []
        for k in range(n.bit_length() - 1):
            moves = {(round(at[r ^ 1 << k][0] - at[r][0], 1),
                      round(at[r ^ 1 << k][1] - at[r][1], 1)) for r in range(n) if not r >> k & 1}
            assert len(moves) == 1 and moves != {(0.0, 0.0)}, (schedule.name, k, moves)
            steps += moves
        assert len(set(steps)) == len(steps)  # an axis per bit
        assert all(_one_bit(t.src ^ t.dst) for r in schedule.rounds for t in r if t.src != t.dst)
    elif kind == "bands":  # node m's ranks inside its band
        per_node = SHAPES[n][-1]
        assert len(seen["bands"]) == n // per_node
        for node, x, y, w, h in seen["bands"]:
            for r in range(node * per_node, (node + 1) * per_node):
                assert x < at[r][0] < x + w and y < at[r][1] < y + h
    else:  # round a circle
        centre = [sum(p[i] for p in at.values()) / n for i in (0, 1)]
        radii = [((x - centre[0]) ** 2 + (y - centre[1]) ** 2) ** 0.5 for x, y in at.values()]
        assert max(radii) - min(radii) <= 1


def _one_bit(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def check_round(seen: dict, schedule: Schedule, k: int, history, labels: list) -> None:
    """After round k: the arrows are its transfers, each labelled with the chunks it carries
    (shown at n <= 8), the ticked cells those holding their result, the hatched ones the
    partial sums."""
    arrows = seen["arrows"]
    want = sorted((t.src, t.dst, list(t.chunks)) for t in schedule.rounds[k])
    assert sorted((src, dst, parse_chunks(label, labels)) for src, dst, _, label, _ in arrows) \
        == want, (schedule.name, k)
    assert sorted((src, dst, [int(c) for c in chunks.split(",")])
                  for src, dst, chunks, _, _ in arrows) == want
    shown = schedule.n_ranks <= 8 or len(schedule.rounds[k]) <= 24  # else on hover
    assert {visible for *_, visible in arrows} <= {"visible" if shown else "hidden"}
    state, want_done = history[k + 1], symbolic_promised(schedule)
    assert {(r, c) for r, c, done, _ in seen["cells"] if done} == {
        cell for cell, needed in want_done.items() if state[cell[0]][cell[1]] == needed}
    assert {(r, c) for r, c, _, partial in seen["cells"] if partial} == partial_sums(
        schedule, state)


def check_axis(seen: dict, schedule: Schedule) -> None:
    """Each round's bar as long as its priced time, its α part the model's messages x α."""
    bars, scale = seen["bars"], seen["scale"]
    assert [k for k, _, _ in bars] == list(range(schedule.n_rounds))
    for (k, width, alpha), round_ in zip(bars, schedule.rounds):
        priced = jaxcoll.cost(replace(schedule, rounds=(round_,)), MiB, alpha=CALIBRATION.alpha,
                              beta=CALIBRATION.beta, gamma=CALIBRATION.gamma)
        assert width == pytest.approx(priced.seconds * scale, rel=1e-6, abs=1e-6)
        assert alpha == pytest.approx(priced.messages * CALIBRATION.alpha * scale, rel=1e-6,
                                      abs=1e-6)


@pytest.mark.parametrize("n", [5, 8, 16])
def test_every_algorithm_in_its_layout_with_its_chunks_marks_counter_and_time(tab, tmp_path, n):
    """Every registered algorithm at n ranks, one page each, in Chromium: its layout, and in
    its first, middle and last rounds the arrows' chunks and the complete and partial cells;
    at the end the counter (jaxcoll.cost's busiest rank against jaxcoll.bounds), and every
    round on the time axis at its priced length, α apart."""
    for index, (schedule, text) in enumerate(priced_pages(n)):
        path = tmp_path / f"{index}.html"
        path.write_text(text, encoding="utf-8")
        opened = Opened(tab, path)
        seen = tab.evaluate(SNAPSHOT, None)
        check_layout(seen, schedule)
        check_axis(seen, schedule)
        history, labels = as_sets(states(schedule)), page_data(text)["labels"]
        for k in sorted({0, schedule.n_rounds // 2, schedule.n_rounds - 1}):
            seen = tab.evaluate(SNAPSHOT, k + 1)
            check_round(seen, schedule, k, history, labels)
        assert seen["counter"] == pytest.approx([  # after the last round
            jaxcoll.cost(schedule, MiB, alpha=0, beta=0).bytes_sent,
            jaxcoll.bounds(schedule.collective, n, MiB, CALIBRATION).path_bytes])
        assert opened.close() == ([], []), schedule.name


def lanes(tab) -> dict:
    """{panel: [(round, width, data-seconds)]} of the time axis, its px per second, and the
    playhead's x."""
    bars = tab.eval_on_selector_all("#axis g.round-bar", """gs => gs.map(g => [
        Number(g.dataset.panel), Number(g.dataset.round), Number(g.dataset.seconds),
        Number(g.querySelector('rect.span').getAttribute('width')),
        Number(g.querySelector('rect.span').getAttribute('x'))])""")
    found = {}
    for panel, k, seconds, width, x in bars:
        found.setdefault(panel, []).append((k, seconds, width, x))
    return found


def test_two_schedules_side_by_side_share_one_time_axis(tab, tmp_path):
    """ring against naive allreduce, priced: two panels side by side, one axis in one scale
    (each round's bar its priced time x the same px per second), and each step a time where
    one of them ends a round, each panel then after the rounds it has finished."""
    ring8, naive8 = (jaxcoll.schedule("allreduce", name, 8) for name in ("ring", "naive"))
    opened = Opened(tab, pictures.html(ring8, tmp_path / "two.html", calibration=CALIBRATION,
                                       compare=naive8))
    first, second = (tab.locator("section.panel").nth(k).bounding_box() for k in (0, 1))
    assert tab.locator("section.panel").count() == 2
    assert second["x"] >= first["x"] + first["width"] - 1 and abs(second["y"] - first["y"]) < 1
    assert tab.text_content("#title") == f"{ring8.name} vs {naive8.name}"
    scale, bars = float(tab.get_attribute("#axis", "data-scale")), lanes(tab)
    ends = {}
    for panel, schedule in enumerate((ring8, naive8)):
        seconds = [jaxcoll.cost(replace(schedule, rounds=(r,)), MiB, alpha=CALIBRATION.alpha,
                                beta=CALIBRATION.beta, gamma=CALIBRATION.gamma).seconds
                   for r in schedule.rounds]
        assert [k for k, *_ in bars[panel]] == list(range(schedule.n_rounds))
        for (_, _, width, x), took, before in zip(bars[panel], seconds,
                                                  itertools.accumulate([0.0] + seconds)):
            assert width == pytest.approx(took * scale, rel=1e-6)  # one scale for both
            assert x - bars[panel][0][3] == pytest.approx(before * scale, rel=1e-6, abs=1e-6)
        ends[panel] = list(itertools.accumulate(seconds))
    longest = max(ends[0][-1], ends[1][-1])
    assert longest * scale == pytest.approx(760)  # the longer fills the axis
    times = sorted(set(ends[0]) | set(ends[1]))
    assert int(tab.get_attribute("#slider", "max")) == len(times)
    for k, t in enumerate(times, start=1):
        tab.keyboard.press("ArrowRight")
        done = [int(v) for v in tab.get_attribute("#round", "data-done").split(",")]
        assert done == [sum(end <= t * (1 + 1e-9) for end in ends[p]) for p in (0, 1)], k
        head = float(tab.get_attribute("#playhead", "x1"))
        assert head - bars[0][0][3] == pytest.approx(t * scale, rel=1e-6)
    for grid, schedule in (("#grid", ring8), ("#grid-1", naive8)):
        shown = {(int(r), int(c)): {tuple(map(int, p.split(":"))) for p in held.split()}
                 for r, c, held in tab.eval_on_selector_all(
                     f"{grid} g.cell", "cs => cs.map(c => [c.dataset.rank, c.dataset.chunk, "
                                       "c.dataset.contributions])")}
        assert shown == cells_of(states(schedule)[-1])
    assert opened.close() == ([], [])


def test_unpriced_rounds_take_equal_lengths_and_play_runs_the_axis(tab, tmp_path):
    """Without a calibration or topology every round is one length and the page says so;
    compared, the two schedules' k-th rounds end together. Play moves the playhead along."""
    ring8, tree8 = (jaxcoll.schedule("allreduce", name, 8) for name in ("ring", "tree"))
    opened = Opened(tab, pictures.html(ring8, tmp_path / "equal.html", compare=tree8))
    assert "not priced" in tab.text_content("#axis-note")
    assert tab.get_attribute("#axis", "data-priced") == "false"
    widths = {round(width, 6) for bars in lanes(tab).values() for _, _, width, _ in bars}
    assert len(widths) == 1  # every round alike, in both
    assert int(tab.get_attribute("#slider", "max")) == ring8.n_rounds  # the longer's rounds
    for k in range(1, ring8.n_rounds + 1):
        tab.keyboard.press("ArrowRight")
        assert tab.get_attribute("#round", "data-done") == f"{k},{min(k, tree8.n_rounds)}"
    tab.click("#play")  # at the end: from the start
    start = float(tab.get_attribute("#playhead", "x1"))
    tab.wait_for_function("Number(document.getElementById('round').dataset.step) >= 2",
                          timeout=15000)
    tab.click("#play")
    assert tab.get_attribute("#play", "data-playing") == "false"
    assert float(tab.get_attribute("#playhead", "x1")) > start
    assert opened.close() == ([], [])


def test_dense_rounds_label_their_arrows_on_hover(tab, tmp_path):
    """At n = 16 a round of more than 24 transfers (the bidirectional ring's 32) shows an
    arrow's chunks when the pointer is on it; sparser rounds always show them."""
    schedule = jaxcoll.schedule("allreduce", "bidirectional_ring", 16)
    opened = Opened(tab, pictures.html(schedule, tmp_path / "dense.html"))
    tab.keyboard.press("ArrowRight")
    tab.locator("#topology").scroll_into_view_if_needed()
    labels = tab.locator("#topology g.transfer text.chunk-label")
    assert set(labels.evaluate_all("ts => ts.map(t => getComputedStyle(t).visibility)")) == {
        "hidden"}
    k, x, y = tab.evaluate("""() => {  // an arrow's middle where the pointer meets that arrow
        const paths = [...document.querySelectorAll('#topology g.transfer path.arrow')];
        for (const [k, p] of paths.entries()) {
          const q = p.getPointAtLength(p.getTotalLength() / 2), m = p.getScreenCTM();
          const [x, y] = [q.x * m.a + m.e, q.y * m.d + m.f];
          if (document.elementFromPoint(x, y) === p) return [k, x, y];
        }
      }""")
    label = labels.nth(k)
    tab.mouse.move(x, y)
    assert label.evaluate("t => getComputedStyle(t).visibility") == "visible"
    assert opened.close() == ([], [])


def test_arrow_keys_step_forward_and_back(tab, tmp_path):
    schedule = jaxcoll.schedule("allreduce", "ring", 4)
    opened = Opened(tab, pictures.html(schedule, tmp_path / "ring.html",
                                           calibration=CALIBRATION))
    page, start = opened.page, opened.colours()
    assert page.locator("path.arrow").count() == 0
    page.keyboard.press("ArrowRight")
    assert opened.step() == 1 and opened.colours() != start
    assert opened.cells() == cells_of(states(schedule)[1])
    assert page.locator("#topology path.arrow.reduce").count() == len(schedule.rounds[0])
    assert page.locator("#grid path.arrow").count() == 0  # the grid marks cells instead
    assert "after round 0" in page.text_content("#round")
    page.keyboard.press("ArrowLeft")
    assert opened.step() == 0 and opened.colours() == start
    page.keyboard.press("ArrowLeft")  # stays at the start
    assert opened.step() == 0
    assert opened.close() == ([], [])  # no request, no console or page error


def test_buttons_slider_and_play(tab, tmp_path):
    schedule = jaxcoll.schedule("broadcast", "binomial", 5, root=2)
    history, last = states(schedule), schedule.n_rounds
    opened = Opened(tab, pictures.html(schedule, tmp_path / "b.html",
                                           calibration=CALIBRATION))
    page = opened.page
    assert page.is_disabled("#prev")
    page.click("#next")
    assert opened.step() == 1 and opened.cells() == cells_of(history[1])
    page.click("#prev")
    assert opened.step() == 0
    box = page.locator("#slider").bounding_box()
    page.mouse.click(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)  # its far end
    assert opened.step() == last and page.is_disabled("#next")
    assert opened.cells() == cells_of(history[-1])
    page.click("#play")  # at the end, play starts again from the start
    page.wait_for_function("Number(document.getElementById('round').dataset.step) >= 1",
                           timeout=15000)
    page.click("#play")
    assert page.get_attribute("#play", "data-playing") == "false"
    assert opened.close() == ([], [])  # no request, no console or page error


def test_inline_in_a_notebook_the_page_runs_in_its_iframe(tab, tmp_path):
    schedule = jaxcoll.schedule("scatter", "binomial", 5, root=1)
    path = tmp_path / "notebook.html"
    path.write_text("<p>a notebook's output cell</p>"
                    + pictures.html(schedule, calibration=CALIBRATION)._repr_html_(),
                    encoding="utf-8")
    opened = Opened(tab, path)
    frame = opened.page.frame_locator("iframe")
    frame.locator("#next").click()
    assert frame.locator("#round").get_attribute("data-step") == "1"
    assert frame.locator("g.cell").count() == schedule.n_ranks * schedule.n_chunks
    assert opened.close() == ([], [])  # no request, no console or page error
