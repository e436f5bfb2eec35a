"""8 fake CPU devices, set before any JAX work; sub-meshes of the first n devices give n = 1..8."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Compiling is most of the tests' time; LLVM's optimisations (not XLA's HLO passes, which decide
# the collectives) are skipped for it: about 20% faster, the same HLO and the same results.
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]).strip()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)


def pytest_addoption(parser):
    parser.addoption("--deep", action="store_true",
                     help="cross every root with every element count, dtype and op (slow)")
