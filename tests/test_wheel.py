"""Installed, not only editable: the package built as a wheel and installed into a fresh
virtual environment runs the main job's quick check and draws a page priced with a shipped
calibration, from a folder outside the repository, so package data a wheel leaves out (the
shipped calibrations, ...) fails here.

The fresh environment installs jaxcoll alone, from the wheel; jax, numpy and the rest it
reads from this environment's site-packages (a path in a .pth file, whose own .pth files,
this checkout's editable install among them, Python does not run), so the test needs no
download but the build's own setuptools."""

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(command, cwd, **env):
    result = subprocess.run(command, cwd=cwd, text=True, capture_output=True, timeout=600,
                            env={**os.environ, **env})
    assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-3000:])
    return result.stdout


@pytest.mark.subprocess_jax
def test_the_built_wheel_installed_fresh_runs_the_quick_check_and_draws(tmp_path):
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels),
          str(ROOT)], cwd=tmp_path)
    wheel = next(wheels.glob("jaxcoll-*.whl"))
    fresh = tmp_path / "fresh"
    _run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], cwd=tmp_path)
    python = fresh / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; "
                         "print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).strip())
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--quiet", str(wheel)], cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run([str(python), "-c", "import jaxcoll; print(jaxcoll.__file__)"], cwd=elsewhere)
    assert Path(where.strip()).is_relative_to(fresh), where
    out = _run([str(python), "-m", "jaxcoll", "--quick", "--quiet"], cwd=elsewhere)
    assert "checks match the xla reference exactly" in out and " NO" not in out
    _run([str(python), "-m", "jaxcoll", "draw", "allreduce", "ring", "--n", "4",
          "--calibration", "cpu", "-o", "page.html"], cwd=elsewhere, JAXCOLL_CALIBRATE="0")
    assert (elsewhere / "page.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
