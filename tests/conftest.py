"""8 fake CPU devices, set before any JAX work; sub-meshes of the first n devices give n = 1..8."""

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# auto uses the shipped calibrations, never one measured (or cached) on this machine: the same
# choices on every machine; tests/test_calibration_cache.py turns measuring on where it asks.
os.environ["JAXCOLL_CALIBRATE"] = "0"
# Compiling is most of the tests' time; LLVM's optimisations (not XLA's HLO passes, which decide
# the collectives) are skipped for it: about 20% faster, the same HLO and the same results.
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]).strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.devices()  # start the backend now: code under test can no longer change the device count


def pytest_addoption(parser):
    parser.addoption("--deep", action="store_true",
                     help="cross every root with every element count, dtype and op (slow)")
    parser.addoption("--sweep-ns", default="",
                     help="comma-separated rank counts: run the n = 1..8 sweeps at these only "
                          "(default 1,2,3,6,8; --deep: all) "
                          "(CI's second, newest-jax pass uses 8)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sweep: the primitive x algorithm x n x count sweeps, one test per n "
        "(--sweep-ns keeps some n only)")
    config.addinivalue_line(
        "markers", "subprocess_jax: starts other JAX processes (more devices, several "
        "processes, notebooks) that compile every algorithm again; CI's second, newest-jax pass "
        "leaves them out, all but the notebooks")
    config.addinivalue_line(
        "markers", "notebook: runs a tutorial notebook top to bottom; CI's second pass keeps "
        "these, so every notebook runs on the lowest and the newest jax")
    config.addinivalue_line(
        "markers", "jax_free: a module that runs no JAX (schedules, the cost model, pages: "
        "tests/test_layers.py checks its imports); CI's second pass leaves it out")


# The sweeps' rank counts by default: one, powers of two (2, 8), an odd (3) and an even (6)
# non-power of two; --deep adds 4, 5 and 7 (every n = 1..8).
DEFAULT_SWEEP_NS = "1,2,3,6,8"


def pytest_collection_modifyitems(config, items):
    keep = config.getoption("--sweep-ns") or (
        "" if config.getoption("--deep") else DEFAULT_SWEEP_NS)
    if not keep:
        return
    ns = {int(n) for n in keep.split(",")}
    dropped = [item for item in items if item.get_closest_marker("sweep")
               and item.callspec.params["n"] not in ns]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


# Debian's Chromium (apt-get install chromium): Playwright cannot download its own browser here
CHROMIUM = next((path for path in ("/usr/bin/chromium", shutil.which("chromium"))
                 if path and Path(path).exists()), None)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module (Debian's, driven by Playwright)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the browser tests need Playwright: pip install -e "
        "'.[test]' (or pip install playwright)")
    if CHROMIUM is None:
        pytest.skip("the browser tests need Chromium, found neither /usr/bin/chromium nor "
                    "chromium on PATH: apt-get install -y chromium (Debian; Playwright's own "
                    "download does not work without a network)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
