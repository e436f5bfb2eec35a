"""One meaning per name: no two classes of the package share a name, no module-level constant
is defined in two modules (read from the source with ast, nothing imported for it), and the
names 0.5.0 renamed so that each says what it is still work, each with a DeprecationWarning
naming its new one."""

import ast
import dataclasses
import importlib
import re
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

from jaxcoll.ir.schedules import Schedule, ScheduleError, Transfer

pytestmark = pytest.mark.jax_free  # runs no JAX: the same on every jax

PACKAGE = Path(__file__).resolve().parents[1] / "jaxcoll"
CONSTANT = re.compile(r"_?[A-Z][A-Z0-9_]*")  # PIECE_BYTES, _COMBINE; not __all__, not Row

# name -> why it may be defined in more than one module (none today)
SHARED_CONSTANTS: dict[str, str] = {}
SHARED_CLASSES: dict[str, str] = {}


def _definitions(tree: ast.Module) -> tuple[list[str], list[str]]:
    """(every class defined anywhere in the module, every constant assigned at its top level:
    in its body or under a top-level if/try)."""
    classes = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    top, constants = list(tree.body), []
    while top:
        node = top.pop()
        if isinstance(node, (ast.If, ast.Try)):
            top += node.body + node.orelse + getattr(node, "finalbody", [])
            top += [line for handler in getattr(node, "handlers", []) for line in handler.body]
            continue
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
        constants += [name.id for target in targets for name in ast.walk(target)
                      if isinstance(name, ast.Name) and CONSTANT.fullmatch(name.id)]
    return classes, constants


def _shared(sources: dict[str, str]) -> tuple[dict, dict]:
    """(class names, constant names) defined in more than one place, with where."""
    classes, constants = defaultdict(list), defaultdict(list)
    for module, source in sources.items():
        found_classes, found_constants = _definitions(ast.parse(source))
        for name in found_classes:
            classes[name].append(module)
        for name in set(found_constants):
            constants[name].append(module)
    return ({name: where for name, where in classes.items()
             if len(where) > 1 and name not in SHARED_CLASSES},
            {name: where for name, where in constants.items()
             if len(where) > 1 and name not in SHARED_CONSTANTS})


def test_no_two_classes_and_no_two_modules_constants_share_a_name():
    sources = {str(path.relative_to(PACKAGE.parent)): path.read_text(encoding="utf-8")
               for path in sorted(PACKAGE.rglob("*.py"))}
    classes, constants = _shared(sources)
    assert classes == {}, "classes that share a name (rename one to say what it is)"
    assert constants == {}, "constants defined in more than one module (one meaning per name)"


def test_the_walker_sees_what_it_forbids():
    """A class twice (one nested), a constant in two modules (one under an if): found; a
    constant assigned twice in one module, or a lower-case name: not."""
    classes, constants = _shared({
        "a.py": "class Layout:\n    pass\nAXIS = 'i'\nAXIS = 'j'\nrow = 1\n",
        "b.py": "def f():\n    class Layout:\n        pass\nif True:\n    AXIS = 'ranks'\n"
                "row = 2\n"})
    assert classes == {"Layout": ["a.py", "b.py"]} and constants == {"AXIS": ["a.py", "b.py"]}


# ----------------------------------------------------------------------------- renamed names

def _schedule(**labels) -> Schedule:
    return Schedule("one send", 2, 1, ([Transfer(0, 1, 0, False)],), **labels)


def _warns(new: str):
    return pytest.warns(DeprecationWarning, match=rf"is renamed .*{re.escape(new)}; the old "
                                                  r"name is deprecated and will be removed in "
                                                  r"jaxcoll \d+\.\d+\.\d+")


def test_schedule_collective_is_the_field_and_primitive_its_deprecated_alias():
    labelled = _schedule(collective="broadcast")
    assert [f.name for f in dataclasses.fields(Schedule)][4] == "collective"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling is quiet, replace included
        assert labelled.collective == "broadcast"
        assert dataclasses.replace(labelled, collective="reduce").collective == "reduce"
    with _warns("Schedule.collective"):
        assert labelled.primitive == "broadcast"
    with _warns("Schedule(collective=...)"):
        old = _schedule(primitive="broadcast")
    with _warns("Schedule(collective=...)"):  # replace passes collective too: primitive wins
        replaced = dataclasses.replace(_schedule(), primitive="broadcast")
    for schedule in (old, replaced):  # the same schedule either way, hashed and shown alike
        assert schedule == labelled and hash(schedule) == hash(labelled)
        assert (str(schedule), repr(schedule)) == (str(labelled), repr(labelled))
    assert hash(labelled) == hash(("one send", 2, 1, labelled.rounds, "broadcast", 0, 0, 0, 0))


def test_a_deprecated_keyword_is_still_checked():
    with pytest.warns(DeprecationWarning), pytest.raises(ScheduleError, match="'allsum'"):
        _schedule(primitive="allsum")


@pytest.mark.parametrize("module, old, new", [
    ("jaxcoll.ir.families", "PRIMITIVES", "COLLECTIVES"),
    ("jaxcoll.analysis.synthesize", "PRIMITIVES", "SYNTHESIZABLE"),
    ("jaxcoll.ir.records", "Record", "CollectiveRecord"),
    ("jaxcoll.ir.msccl", "Layout", "BufferLayout"),
])
def test_a_renamed_module_name_reads_its_new_one_and_warns(module, old, new):
    namespace = importlib.import_module(module)
    with _warns(f"{module}.{new}"):
        assert getattr(namespace, old) is getattr(namespace, new)
    with pytest.raises(AttributeError, match="has no attribute 'nosuch'"):
        namespace.nosuch
