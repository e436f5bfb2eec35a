"""Schedule pictures: PNG and GIF from the library and the command line."""

import subprocess
import sys

import pytest

import jaxcoll

Image = pytest.importorskip("PIL.Image")


def test_png_has_a_panel_per_round(tmp_path):
    path = jaxcoll.draw(jaxcoll.schedule("allreduce", "ring", 4), tmp_path / "ring.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 600


def test_gif_has_a_frame_per_round_and_the_start(tmp_path):
    schedule = jaxcoll.schedule("broadcast", "binomial", 5, root=2)
    path = jaxcoll.draw(schedule, tmp_path / "b.gif", gif=True)
    with Image.open(path) as image:
        assert image.n_frames == schedule.n_rounds + 1


def test_command_line(tmp_path):
    out = tmp_path / "tree.png"
    result = subprocess.run([sys.executable, "-m", "jaxcoll", "draw", "reduce", "tree", "--n",
                             "6", "--root", "3", "-o", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert out.exists() and "tree reduce" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "jaxcoll", "draw", "reduce", "ring", "-o",
                          str(out)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "algorithm='ring' is not one of" in bad.stderr


def test_drawing_leaves_matplotlibs_backend_alone(tmp_path, monkeypatch):
    """In a notebook, switching the backend (matplotlib.use) would stop every later inline
    figure from showing: draw and bench.plot build Figures without pyplot."""
    import matplotlib

    from jaxcoll.tools.bench import Result, plot

    def switched(*args, **kwargs):
        raise AssertionError(f"matplotlib.use{args} called")

    monkeypatch.setattr(matplotlib, "use", switched)
    jaxcoll.draw(jaxcoll.schedule("allgather", "ring", 3), tmp_path / "ring.png")
    rows = [Result("allreduce", name, 1024, 256, "float32", -1, 8, 0, (1e-3, 2e-3), 1e-3)
            for name in ("xla", "ring")]
    plot(str(tmp_path / "sweep.png"), {"jax": "x", "backend": "cpu", "ranks": 8,
                                       "emulated": False, "device_kind": "cpu"}, rows)
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_the_names_that_moved_out_of_pictures_are_still_read_there():
    """The stored notebooks and older code call jaxcoll.tools.pictures.html, .over_sizes, ...:
    the same objects as the modules they moved to (page, figures, palette)."""
    from jaxcoll.tools import figures, page, palette, pictures

    moved = {page: ("html", "Page", "holding_text", "transfer_text", "phases"),
             figures: ("Picture", "relations", "over_sizes", "step_by_step"),
             palette: ("MUTED", "EMPTY", "chunk_labels", "size_label")}
    assert [f"{module.__name__}.{name}" for module, names in moved.items() for name in names
            if getattr(pictures, name, None) is not getattr(module, name)] == []

def test_rank_colours_are_tols_muted_then_matplotlibs_tab20():
    """Written out for the HTML page (which needs no matplotlib); draw uses the same: Paul
    Tol's colour-blind-safe muted scheme up to 9 ranks, as published, then tab20."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    from jaxcoll.tools.palette import rank_colours

    muted = ["#cc6677", "#332288", "#ddcc77", "#117733", "#88ccee", "#882255", "#44aa99",
             "#999933", "#aa4499"]
    assert rank_colours(9) == muted and rank_colours(4) == muted[:4]
    cmap = colormaps["tab20"]
    assert rank_colours(25) == [to_hex(cmap(i % cmap.N)) for i in range(25)]
