"""One command line, ``python -m jaxcoll COMMAND``: every command there, the bare command the
check, an unknown one answered with the list and the closest; and every mistake a user makes
on it said in one line on stderr with exit status 2, before any work and never as a
traceback."""

import subprocess
import sys

import pytest

import msccl_fixtures
from jaxcoll.tools import cli


@pytest.fixture
def files(tmp_path):
    """A good MSCCL file, a folder named like one, and a path that does not exist."""
    good = tmp_path / "pairs.xml"
    good.write_text(msccl_fixtures.allpairs_allreduce(2))
    folder = tmp_path / "folder.xml"
    folder.mkdir()
    (tmp_path / "dir.html").mkdir()
    return {"good": str(good), "folder": str(folder), "missing": str(tmp_path / "nope.xml"),
            "tmp": str(tmp_path), "html": str(tmp_path / "page.html"),
            "png": str(tmp_path / "picture.png")}


MISTAKES = [  # (argv with {placeholders}, what the one line says, hide matplotlib)
    (["drow"], "'drow' is not a command; the commands are check, draw, msccl, bench, "
     "calibrate, launch; did you mean 'draw'?", False),
    (["bnech"], "did you mean 'bench'?", False),
    (["--ranks", "99"], "argument --ranks: 99: only 8 devices are available", False),
    (["--ranks", "0"], "--ranks values must be >= 1", False),
    (["--counts", "a,b"], "--counts must be comma-separated integers", False),
    (["--devices", "0"], "argument --devices: must be >= 1", False),
    (["--nosuch"], "unrecognized arguments: --nosuch", False),
    (["draw", "allreduce", "nosuch", "-o", "{html}"], "nosuch", False),
    (["draw", "allreduce", "ring", "--n", "x", "-o", "{html}"],
     "argument --n: must be an int or comma-separated ints, got 'x'", False),
    (["draw", "allreduce", "ring", "--n", "0", "-o", "{html}"], "0", False),
    (["draw", "allreduce", "-o", "{html}"], "an algorithm is needed after the primitive", False),
    (["draw", "allreduce", "ring", "-o", "/nonexistent/x.html"],
     "the folder /nonexistent does not exist", False),
    (["draw", "allreduce", "ring", "-o", "{tmp}/x.txt"], "write a .png, .gif or .html", False),
    (["draw", "allreduce", "ring", "-o", "{tmp}/dir.html"], "is a folder, not a file", False),
    (["draw", "allreduce", "ring", "-o", "{png}"],
     'a .png picture needs matplotlib, which is not installed: pip install "jaxcoll[viz]"',
     True),
    (["draw", "{missing}", "-o", "{html}"], "nope.xml: no such file", False),
    (["draw", "{folder}", "-o", "{html}"], "folder.xml is a folder, not a file", False),
    (["msccl", "{missing}"], "nope.xml: no such file", False),
    (["msccl", "{folder}"], "folder.xml is a folder, not a file", False),
    (["msccl"], "the following arguments are required: FILE", False),
    (["msccl", "{good}", "--size", "1Q"], "argument --size: '1Q' is not a size", False),
    (["msccl", "{good}", "--size", "-5"], "argument --size: '-5' is not a size", False),
    (["msccl", "{good}", "--topology", "nope"], "argument --topology: invalid choice", False),
    (["bench", "--json", "/nonexistent/x.json"], "argument --json: /nonexistent/x.json: the "
     "folder /nonexistent does not exist", False),
    (["bench", "--op", "nosuch"], "argument --op: 'nosuch' is not a collective", False),
    (["bench", "-b", "1Q"], "argument -b/-e/-f: '1Q' is not a size", False),
    (["bench", "--plot", "{png}"], "needs matplotlib, which is not installed: pip install "
     "'jaxcoll[viz]'", True),
    (["calibrate", "--sizes", "0"], "every --sizes must be >= 1", False),
    (["calibrate", "--op", "nosuch"], "argument --op: 'nosuch' is not a collective", False),
    (["launch"], "no command given", False),
    (["launch", "--nproc", "0", "--", "true"], "--nproc must be >= 1, got 0", False),
]


@pytest.mark.parametrize("argv, said, hide_viz", MISTAKES,
                         ids=[" ".join(argv)[:40] for argv, _, _ in MISTAKES])
def test_a_mistake_is_one_line_and_exit_status_2(argv, said, hide_viz, files, capsys,
                                                 monkeypatch):
    if hide_viz:  # as on a machine without the viz extra
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    argv = [arg.format(**files) for arg in argv]
    try:
        status = cli.main(argv)
    except SystemExit as exited:
        status = exited.code
    out, err = capsys.readouterr()
    assert status == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert said in err, err
    assert err.startswith("python -m jaxcoll"), err


def test_there_are_twenty_mistakes_or_more():
    assert len(MISTAKES) >= 20


def test_every_command_has_its_help(capsys):
    """``python -m jaxcoll COMMAND --help`` for each; the bare help lists the commands."""
    for name in cli.COMMANDS:
        with pytest.raises(SystemExit) as exited:
            cli.main([name, "--help"])
        assert exited.value.code == 0
        assert "usage:" in capsys.readouterr().out, name
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert all(name in text for name in cli.COMMANDS) and "--quick" in text


@pytest.mark.subprocess_jax
def test_the_old_entry_points_and_a_mistake_through_a_real_process(tmp_path):
    """``python -m jaxcoll.tools.bench`` and ``.launch`` still work; a mistake through a real
    process is one line and status 2 too."""
    for module in ("jaxcoll.tools.bench", "jaxcoll.tools.launch"):
        result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0 and f"python -m {module}" in result.stdout
    result = subprocess.run([sys.executable, "-m", "jaxcoll", "msccl", str(tmp_path / "x.xml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
