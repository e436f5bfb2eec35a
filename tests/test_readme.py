"""The README's usage example runs as written and matches lax.pmean; its schedule print is true."""

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

README = (Path(__file__).parent.parent / "README.md").read_text()


def _python_blocks():
    return re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_training_step_example_matches_pmean():
    example = next(b for b in _python_blocks() if "def step" in b)

    def loss_fn(params, batch):
        return jnp.mean((batch @ params["w"] + params["b"]) ** 2)

    namespace = {"loss_fn": loss_fn}
    exec(example, namespace)
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
    batch = jnp.asarray(np.random.default_rng(0).normal(size=(16, 3)), jnp.float32)
    got = namespace["step"](params, batch)

    # The same step with the built-in mean over the data-parallel axis.
    per_rank = [jax.grad(loss_fn)(params, shard) for shard in np.split(batch, 8)]
    mean_grad = jax.tree.map(lambda *g: sum(g) / 8, *per_rank)
    want = jax.tree.map(lambda p, g: p - 0.1 * g, params, mean_grad)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_printed_schedule_is_current():
    import jaxcoll

    block = re.search(r">>> print\(jaxcoll.schedule\(\"allreduce\", \"ring\", 4\)\)\n(.*?)```",
                      README, flags=re.S).group(1)
    assert block.strip() == str(jaxcoll.schedule("allreduce", "ring", 4)).strip()


def test_algorithm_table_matches_registry():
    import jaxcoll

    table = README[README.index("| primitive | algorithms"):].split("\n\n")[0]
    listed = {}
    for row in table.splitlines()[2:]:
        primitives, names = row.strip("|").split("|")
        for primitive in primitives.split(","):
            listed[primitive.strip()] = set(re.findall(r"`(\w+)`", names)) | {"auto", "xla"}
    assert listed == {p: set(jaxcoll.algorithms(p)) for p in listed}
    assert set(listed) == set(jaxcoll.ir.families.PRIMITIVES)


def test_readme_is_a_front_page_whose_session_runs(tmp_path, monkeypatch):
    """At most ~150 lines; the `>>>` lines before the print run as written (verify says
    nothing, the page is written where the reader stands)."""
    import jaxcoll

    assert len(README.splitlines()) <= 150
    session = next(b for b in _python_blocks() if ">>> print(jaxcoll.schedule" in b)
    statements = [line[4:] for line in session.splitlines()
                  if line.startswith(">>> ") and not line.startswith(">>> print")]
    monkeypatch.chdir(tmp_path)
    namespace = {"jaxcoll": jaxcoll}
    for statement in statements:
        exec(statement, namespace)
    assert namespace["page"].read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "the schedule names no primitive" not in namespace["page"].read_text()


def test_readme_links_lead_somewhere():
    """Every relative link of the front page names a file of the repository."""
    root = Path(__file__).parent.parent
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (root / target).exists(), target
