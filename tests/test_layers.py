"""The package's layers, written once: no import circle, no layer importing one above it, no
function-local import but a commented optional dependency, and collective names compared only
in jaxcoll/ir/records.py. Read from the source (ast), nothing imported."""

import ast
from pathlib import Path

import pytest

from jaxcoll.ir.records import RECORDS

pytestmark = pytest.mark.jax_free  # runs no JAX (schedules, models, pages): the same on every jax

PACKAGE = Path(__file__).resolve().parents[1] / "jaxcoll"

# Lowest first: a module may import modules of its own layer and of the layers before it.
LAYERS = (
    ("ir", ("jaxcoll.ir",)),
    ("analysis", ("jaxcoll.analysis",)),
    ("lowering", ("jaxcoll.lowering",)),
    ("api", ("jaxcoll.packing", "jaxcoll.sharded", "jaxcoll.collectives", "jaxcoll.lax",
             "jaxcoll.ragged", "jaxcoll.overlap")),
    ("tools", ("jaxcoll.tools",)),
    ("package", ("jaxcoll", "jaxcoll.__main__")),
)
NO_JAX = ("ir", "analysis")  # plain Python and numpy
OPTIONAL = ("matplotlib", "PIL", "fcntl")  # the only imports a function may make


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text()) for name, path in MODULES.items()}


def _layer(module: str) -> int:
    """The index of ``module``'s layer: the longest prefix that names one."""
    best = max(((len(prefix), i) for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is in no layer of tests/test_layers.py"
    return best[1]


def _imports(module: str):
    """(line, imported module, at the top level?) for every import statement of ``module``;
    ``from package import submodule`` imports the submodule, not the package."""
    tree = TREES[module]
    top = set(map(id, tree.body))
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                yield node.lineno, whole if whole in MODULES else base, id(node) in top


def _graph() -> dict[str, set[str]]:
    return {module: {target for _, target, _ in _imports(module) if target in MODULES}
            for module in MODULES}


def test_every_module_is_in_a_layer_and_every_folder_says_what_it_may_import():
    for module in MODULES:
        _layer(module)
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and doc.splitlines()[0].strip(), f"{init} has no one-line docstring"


def test_no_import_circle():
    graph, circles = _graph(), []
    index, low, stack, on_stack = {}, {}, [], set()

    def visit(node):  # Tarjan: a strongly connected part of more than one module is a circle
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part, member = set(), None
            while member != node:
                member = stack.pop()
                on_stack.discard(member)
                part.add(member)
            if len(part) > 1 or node in graph[node]:
                circles.append(sorted(part))

    for module in graph:
        if module not in index:
            visit(module)
    assert circles == []


def test_no_layer_imports_one_above_it():
    upward = [f"{module}:{line} imports {target} ({LAYERS[_layer(target)][0]} is above "
              f"{LAYERS[_layer(module)][0]})"
              for module in MODULES for line, target, _ in _imports(module)
              if target in MODULES and _layer(target) > _layer(module)]
    assert upward == []


def test_the_analysis_and_the_ir_never_import_jax():
    below = [module for module in MODULES if LAYERS[_layer(module)][0] in NO_JAX]
    jax = [f"{module}:{line} imports {target}" for module in below
           for line, target, _ in _imports(module) if target.split(".")[0] in ("jax", "jaxlib")]
    assert below and jax == []


# What a jax_free test module (CI's second pass leaves them out) may not touch: JAX, the lowering
# and the API that runs it, and the tools that time or launch
RUNS_JAX = ("jax", "jaxlib", "helpers", "jaxcoll.lowering", "jaxcoll.lax", "jaxcoll.overlap",
            "jaxcoll.ragged", "jaxcoll.packing", "jaxcoll.sharded", "jaxcoll.tools.timing",
            "jaxcoll.tools.distributed", "jaxcoll.tools.bench", "jaxcoll.tools.launch")
# of the names jaxcoll exports from jaxcoll.collectives, those that run nothing
INERT = {"schedule", "algorithms", "OPS", "BUCKET_BYTES"}


def _runs_jax(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in RUNS_JAX)


def _running_names() -> set[str]:
    """jaxcoll's names that run JAX: its collectives, lax, the Pallas executor, calibrate."""
    exported = {}  # jaxcoll's name -> the module it comes from (jaxcoll.lax: itself)
    for node in TREES["jaxcoll"].body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                exported[alias.asname or alias.name] = whole if whole in MODULES else node.module
    return {name for name, origin in exported.items() if _runs_jax(origin)
            or (origin == "jaxcoll.collectives" and name not in INERT)}


def _jax_uses(tree, running: set[str]) -> list[str]:
    """Where a test module imports JAX or something that runs it, or uses such a jaxcoll name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if _runs_jax(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if _runs_jax(node.module or ""):
                found.append(f"{node.lineno}: from {node.module}")
            elif node.module == "jaxcoll":
                found += [f"{node.lineno}: from jaxcoll import {a.name}" for a in node.names
                          if a.name in running]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "jaxcoll" and node.attr in running):
            found.append(f"{node.lineno}: jaxcoll.{node.attr}")
    return found


def test_jax_free_test_modules_run_no_jax():
    """A test module marked jax_free imports no JAX and nothing that runs it, and uses no
    name of jaxcoll's that runs it; the check sees each kind of use."""
    running = _running_names()
    assert {"ring_allreduce", "lax", "Pallas", "calibrate"} <= running and "schedule" not in running
    sample = ast.parse("import jax.numpy\nfrom jaxcoll.lowering import plan\n"
                       "from jaxcoll import lax, schedule\njaxcoll.ring_allreduce(x)\n"
                       "jaxcoll.schedule('allreduce', 'ring', 4)\n")
    assert _jax_uses(sample, running) == ["1: import jax.numpy", "2: from jaxcoll.lowering",
                                          "3: from jaxcoll import lax", "4: jaxcoll.ring_allreduce"]
    marked = {}
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.Assign) and ast.unparse(node.value) == "pytest.mark.jax_free"
               for node in tree.body):
            marked[path.name] = _jax_uses(tree, running)
    assert "test_verify.py" in marked and "test_page.py" in marked
    assert {name: uses for name, uses in marked.items() if uses} == {}


def test_function_local_imports_are_optional_dependencies_with_a_comment():
    local = []
    for module, path in MODULES.items():
        lines = path.read_text().splitlines()
        for line, target, at_top in _imports(module):
            if at_top:
                continue
            commented = "#" in lines[line - 1]
            if target.split(".")[0] not in OPTIONAL or not commented:
                local.append(f"{module}:{line} imports {target} inside a function")
    assert local == []


def test_modules_run_with_dash_m_are_not_imported_by_the_package():
    """``python -m jaxcoll.tools.launch`` imports the package first: a module it imports already
    would run twice (runpy's RuntimeWarning, two copies of its globals)."""
    graph, seen, todo = _graph(), set(), ["jaxcoll"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    scripts = {module for module, tree in TREES.items() for node in tree.body
               if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)}
    assert scripts and scripts & seen == set()


def _compared_names(node) -> set[str]:
    """Collective names a comparison tests a value against (``== "allreduce"``, ``in (...)``);
    not a layout's kind ("scatter", "gather": ``record.layout``, ``Layout.kind``), which is
    named after the collectives that lay leaves out so."""
    sides = [node.left, *node.comparators]
    if any(ast.unparse(side).endswith(("layout", "kind")) for side in sides):
        return set()
    names = set()
    for side in sides:
        constants = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        names |= {c.value for c in constants
                  if isinstance(c, ast.Constant) and c.value in RECORDS}
    return names


def test_collective_names_are_compared_only_in_the_records():
    found = [f"{module}:{node.lineno} compares with {sorted(_compared_names(node))}"
             for module, tree in TREES.items() if module != "jaxcoll.ir.records"
             for node in ast.walk(tree)
             if isinstance(node, ast.Compare) and _compared_names(node)]
    assert found == []


@pytest.mark.parametrize("name", ["reduce_scatter", "allgather"])
def test_the_checker_sees_what_it_forbids(name):
    """The walkers above find what they look for (a name test, a circle, a local import)."""
    tree = ast.parse(f"def f(p):\n    import jax\n    return p == {name!r}\n")
    compare = next(node for node in ast.walk(tree) if isinstance(node, ast.Compare))
    assert _compared_names(compare) == {name}
    imports = [node for node in ast.walk(tree) if isinstance(node, ast.Import)]
    assert imports and imports[0] not in tree.body
