"""The files every package has, and what a newcomer meets first: LICENSE is the Apache License
2.0 that pyproject.toml declares, CHANGELOG.md's newest release is the version that pyproject,
``jaxcoll.__version__`` and CITATION.cff all give, and the benchmark's plot tells every
algorithm apart."""

import hashlib
import importlib
import importlib.util
import re
import tomllib
from datetime import date
from importlib import metadata
from pathlib import Path

import pytest

import jaxcoll
from jaxcoll.tools import bench

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# sha256 of the Apache License 2.0 text as jax, optax and chex ship it in their LICENSE files
# (byte for byte the same in all three)
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d\d-\d\d), ", re.M)


def _changelog() -> str:
    return (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def _releases() -> list[tuple[str, str]]:
    """(version, date) of every released entry of the changelog, in its order."""
    return RELEASE.findall(_changelog())


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _citation() -> dict:
    """CITATION.cff read by PyYAML where it is installed, else its top-level ``key: value``
    lines and the ``- name:`` of its authors (all this file uses)."""
    text = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    try:
        import yaml  # optional: PyYAML, where installed
    except ImportError:
        found = dict(re.findall(r"^([\w-]+): *(.*\S)? *$", text, flags=re.M))
        found = {key: (value or "").strip('"') for key, value in found.items()}
        found["authors"] = [{"name": name} for name in
                            re.findall(r'^  - name: "?([^"\n]+)"?$', text, flags=re.M)]
        return found
    return yaml.safe_load(text)


def test_license_is_the_apache_license_2_0_that_pyproject_declares():
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
    assert PYPROJECT["license"] == {"text": "Apache-2.0"}


def test_version_is_the_metadatas_and_pyprojects():
    assert jaxcoll.__version__ == metadata.version("jaxcoll") == PYPROJECT["version"], (
        "the installed metadata is stale: pip install -e . again")
    assert "__version__" in jaxcoll.__all__


def test_a_source_tree_never_installed_says_so(monkeypatch):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(jaxcoll._metadata, "version", not_installed)
    assert jaxcoll._version() == "0+unknown"


def test_changelog_lists_the_editions_newest_first_ending_at_the_version():
    text = _changelog()
    headings = re.findall(r"^## (.*)$", text, flags=re.M)
    assert headings[0].startswith("Unreleased")
    releases = _releases()
    assert len(releases) == len(headings) - 1, "every entry but Unreleased: ## X.Y.Z (date, ..."
    versions = [_version_tuple(version) for version, _ in releases]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    dates = [date.fromisoformat(day) for _, day in releases]
    assert dates == sorted(dates, reverse=True)
    assert releases[0][0] == PYPROJECT["version"]
    assert [v[1] for v in reversed(versions)] == list(range(1, len(versions) + 1)), (
        "edition k is 0.k.0")


def test_deprecated_paths_are_removed_in_one_named_version_the_guide_names_too():
    unreleased = _changelog().split("\n## ")[1]
    deprecated = unreleased.split("### Deprecated")[1].split("\n### ")[0]
    removed = re.findall(r"removed in (\d+\.\d+\.\d+)", deprecated)
    assert len(removed) == 1
    assert _version_tuple(removed[0]) > _version_tuple(PYPROJECT["version"])
    install = (ROOT / "docs/guide/install.md").read_text(encoding="utf-8")
    assert f"{removed[0]} removes them" in install
    assert "Import paths that moved" in deprecated
    if importlib.util.find_spec("jaxcoll._moved") is not None:  # the aliases themselves
        assert importlib.import_module("jaxcoll._moved").REMOVED_IN == removed[0]
    assert "## Import paths that moved" in (ROOT / "docs/guide/layout.md").read_text()


def test_citation_cff_has_cff_1_2_0s_keys_and_the_changelogs_version():
    cff = _citation()
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title"):
        assert isinstance(cff[key], str) and cff[key].strip()
    assert cff["authors"] == [{"name": "The jaxcoll authors"}]
    assert str(cff["version"]) == PYPROJECT["version"]
    assert str(cff["date-released"]) == dict(_releases())[PYPROJECT["version"]]
    assert cff["license"] == "Apache-2.0"


def _result(algorithm: str, size: int) -> bench.Result:
    return bench.Result("allreduce", algorithm, size, size // 4, "float32", -1, 8, 0,
                        (1e-3,), 1e-3)


@pytest.mark.parametrize("count", [12, 20])
def test_plot_gives_every_algorithm_its_own_colour_and_marker(tmp_path, monkeypatch, count):
    """Twelve series once shared ten colours and ten markers (two pairs looked the same)."""
    pytest.importorskip("matplotlib")
    figures = []

    def keep(**kwargs):
        from matplotlib.figure import Figure  # optional: jaxcoll[viz]
        figures.append(Figure(**kwargs))
        return figures[-1]

    monkeypatch.setattr(bench, "_new_figure", keep)
    algorithms = ["xla"] + [f"algorithm_{i:02d}" for i in range(count)]
    results = [_result(a, size) for a in algorithms for size in (1024, 4096)]
    bench.plot(str(tmp_path / "sweep.png"), dict(ranks=8, backend="cpu", device_kind="cpu",
                                                 emulated=True, jax="0"), results)
    for ax in figures[0].axes:
        looks = [(line.get_color(), line.get_marker()) for line in ax.get_lines()]
        assert len(looks) == len(algorithms) and len(set(looks)) == len(looks)
    first = [bench._styles(algorithms[1:])[a] for a in algorithms[1:10]]
    assert len({s["color"] for s in first}) == len({s["marker"] for s in first}) == 9
