"""The command's dataclasses (LibCST's and the tool's own): the methods `dataclasses` writes for them compiled on first
call (engine/deferred.py).

Each test runs a fresh interpreter: the test process imported LibCST long ago."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import FIXTURES

# Every method `dataclasses` wrote for a class of LibCST or of the tool, as (class, method) -> what its code object
# is made of. Every module of the tool is imported but those of `verify` and `checkpoint` that need torch.
METHODS = r"""
import dataclasses, importlib, json, pkgutil, sys
DEFER = sys.argv[1] == "1"
if DEFER:
    from neuron_migrate.engine import deferred
    deferred.install()
import libcst, libcst.metadata, neuron_migrate
for found in pkgutil.walk_packages(neuron_migrate.__path__, "neuron_migrate."):
    if found.name.endswith(".__main__"):  # runs the command
        continue
    try:
        importlib.import_module(found.name)
    except ImportError as exc:
        if exc.name != "torch":
            raise
from neuron_migrate.engine.deferred import compiled, is_stand_in, written
NAMES = ("__init__", "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__setattr__",
         "__delattr__")
out, deferred_count, ours = {}, 0, 0
for module in [m for name, m in sorted(sys.modules.items())
               if name.split(".")[0] in ("libcst", "neuron_migrate") and m is not None]:
    for cls in list(vars(module).values()):
        if not isinstance(cls, type) or not dataclasses.is_dataclass(cls) or cls.__module__ != module.__name__:
            continue
        for name in NAMES:
            held = cls.__dict__.get(name)
            if held is None:
                continue
            deferred_count += is_stand_in(held)
            method = written(cls, name)
            inner = compiled(getattr(method, "__wrapped__", method))  # __repr__: in dataclasses' recursion guard
            code = getattr(inner, "__code__", None)
            if code is None or code.co_filename != "<string>":
                continue  # not written by dataclasses (LibCST's own __repr__ / __eq__ / __hash__)
            ours += cls.__module__.startswith("neuron_migrate")
            # a frozenset among the constants (3.12's frozen classes' field names) is compared sorted: its order is
            # the hash seed's, which differs between the two processes
            out[f"{cls.__module__}.{cls.__qualname__}.{name}"] = [
                code.co_code.hex(), repr(tuple(sorted(c) if type(c) is frozenset else c for c in code.co_consts)),
                code.co_names, code.co_varnames, inner.__qualname__,
                repr(inner.__defaults__), sorted(inner.__kwdefaults__ or {}), sorted(inner.__annotations__)]
print(json.dumps({"methods": out, "deferred": deferred_count, "ours": ours}))
"""


def _python(code: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_every_deferred_method_is_the_one_dataclasses_writes_at_import():
    plain = json.loads(_python(METHODS, "0"))
    deferred = json.loads(_python(METHODS, "1"))
    if sys.version_info[:2] > (3, 12):
        assert deferred["deferred"] == 0  # nothing is deferred where dataclasses has no `_create_fn`
        return
    assert plain["deferred"] == 0
    assert deferred["deferred"] > 800  # most of LibCST's methods and the tool's waited for a first call
    assert len(plain["methods"]) > 800 and plain["ours"] > 200
    assert deferred["methods"] == plain["methods"]


FIRST_CALL = r"""
import dataclasses, sys
from neuron_migrate.engine import deferred
deferred.install()
import libcst as cst
from neuron_migrate.engine.deferred import is_stand_in
init = cst.Name.__dict__["__init__"]
assert is_stand_in(init), "a stand-in before the first call"
node = cst.Name("x")
assert cst.Name.__dict__["__init__"] is not init and not is_stand_in(cst.Name.__dict__["__init__"])
assert node.value == "x" and not node.lpar
try:
    node.value = "y"
except dataclasses.FrozenInstanceError:
    pass
else:
    raise AssertionError("frozen")
assert dataclasses.replace(node, value="y").value == "y"
assert cst.parse_module("a = b + 1\n").code == "a = b + 1\n"
position = cst.metadata.CodePosition(1, 2)
assert position == cst.metadata.CodePosition(1, 2) and hash(position) == hash(cst.metadata.CodePosition(1, 2))
assert repr(position) == "CodePosition(line=1, column=2)"
from neuron_migrate.findings import Finding
assert is_stand_in(Finding.__dict__["__init__"]), "the tool's own classes wait too"
@dataclasses.dataclass(frozen=True)
class Other:
    a: int
assert not is_stand_in(Other.__dict__["__init__"]), "a class of another module is made as released"
stand_in = dataclasses._create_fn
deferred.install()
assert dataclasses._create_fn is stand_in, "installed once"
print("ok")
"""


def test_a_stand_in_compiles_its_method_on_the_first_call_and_leaves_it_in_the_class():
    if sys.version_info[:2] > (3, 12):
        return
    assert _python(FIRST_CALL).strip() == "ok"


def test_importing_the_package_leaves_libcst_as_released():
    """Only the command defers: a program that imports the tool's modules (and LibCST) gets LibCST's classes
    and the tool's as `dataclasses` makes them."""
    code = ("import neuron_migrate.engine.runner, neuron_migrate.cli, libcst as cst\n"
            "from neuron_migrate.engine.deferred import is_stand_in\n"
            "from neuron_migrate.findings import Finding\n"
            "print(any(is_stand_in(v) for c in (cst.Name, Finding) for v in vars(c).values()))")
    assert _python(code).strip() == "False"


def test_nothing_is_deferred_where_dataclasses_has_no_create_fn():
    """Python 3.13 writes a class's methods in one text and has no `_create_fn`: the import is left alone."""
    code = ("import dataclasses, sys\n"
            "if hasattr(dataclasses, '_create_fn'): del dataclasses._create_fn\n"
            "from neuron_migrate.engine import deferred\n"
            "deferred.install()\n"
            "print(hasattr(dataclasses, '_create_fn'))")
    assert _python(code).strip() == "False"


def test_the_command_prints_the_same_with_its_libcst_methods_deferred(tmp_path):
    """`python -m neuron_migrate` (deferred) and the command line called without `start.py` (not deferred) over
    every fixture: the same report and the same rewrite."""
    plain = "import sys; from neuron_migrate.cli import entry; sys.argv[0] = 'neuron-migrate'; entry()"
    for args in (["check", "--no-cache", "-j", "1", "--format", "json", str(FIXTURES)],
                 ["rewrite", "--no-cache", "-j", "1", "--diff", str(FIXTURES)]):
        ran = [subprocess.run(command + args, capture_output=True, cwd=tmp_path, timeout=600)
               for command in ([sys.executable, "-m", "neuron_migrate"], [sys.executable, "-c", plain])]
        assert ran[0].returncode == ran[1].returncode == 1, ran[0].stderr + ran[1].stderr
        assert len(ran[0].stdout) > 10_000  # bytes: a fixture holds text in another encoding
        assert ran[0].stdout == ran[1].stdout
        assert ran[0].stderr == ran[1].stderr
