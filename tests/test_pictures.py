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
