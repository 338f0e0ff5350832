"""NM403-NM405: environment variables of the XLA-based stack, set or read in Python code.

The same table (`rules/environment.toml`) serves shell scripts and Dockerfiles (`neuron_migrate/files/envfiles.py`).
"""

from __future__ import annotations

import functools
import re

import libcst as cst

from neuron_migrate.catalogue import load_data
from neuron_migrate.rules.patterns import arg, string_value
from neuron_migrate.rules import Rule

OS_ENVIRON = "os.environ"
SETTERS = frozenset({"os.environ.setdefault", "os.putenv"})
READERS = frozenset({"os.environ.get", "os.getenv"})
READ_CODE = "NM405"  # a read of a bfloat16 switch: a finding without a marker (the advice is where it is set)
READ_FIELDS = {"did": "is read here, where torch_xla's bfloat16 switch chose a dtype or an optimizer setting",
               "instead": "the native backend ignores the variable, so this only follows what the launch sets: "
                          "the move to `torch.autocast(device_type=\"neuron\", dtype=torch.bfloat16)` belongs where "
                          "it is set (NM403 marks that place); decide then whether this read still has a reason"}
OFF = frozenset({"0", "", "false", "False", "FALSE"})


@functools.lru_cache(maxsize=1)
def env_table() -> dict[str, dict]:
    return load_data("environment.toml")["env"]


def command_table() -> dict[str, dict]:
    """The commands of the XLA-based stack (`neuron_parallel_compile`), for shell scripts and Dockerfiles."""
    return load_data("environment.toml")["command"]


@functools.lru_cache(maxsize=1)
def env_pattern() -> re.Pattern[str]:
    """A variable of the table as a whole word, alone or assigned (`XLA_USE_BF16=1 python train.py`)."""
    names = "|".join(sorted(env_table(), key=len, reverse=True))
    return re.compile(rf"(?<![\w$])({names})(?![\w])")


def code_for(name: str, value: str | None, removable_statement: bool) -> str:
    """NM404 when the setting can simply go, NM403 for bfloat16 switches, NM405 for the rest."""
    entry = env_table()[name]
    if removable_statement and (entry.get("removable") or (entry.get("bf16") and value in OFF)):
        return "NM404"
    return "NM403" if entry.get("bf16") else "NM405"


class EnvironmentVariable(Rule):
    codes = ("NM403", "NM404", "NM405")
    triggers = tuple(sorted(n.encode() for n in load_data("environment.toml")["env"]))

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.seen: set[tuple[int, str]] = set()  # (statement, variable): one finding each
        self.reads: list = []  # (occurrence, node, variable) of the reads of a bfloat16 switch: reported at the end
        self.set_here: set[str] = set()  # the bfloat16 switches the file sets (NM403 marks them there)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        text = string_value(node)
        if text is None:
            return
        match = env_pattern().search(text)
        if match is None:
            return
        name = match.group(1)
        key = (id(self.ctx.current.statement), name)
        if key in self.seen:
            return  # `os.environ["XLA_USE_BF16"] = os.environ.get("XLA_USE_BF16", "0")`: one statement, one finding
        self.seen.add(key)
        entry = env_table()[name]
        if entry.get("bf16") and text == name and self._read(node):
            self.reads.append((self.ctx.current, node, name))
            return
        value, statement = self._setting(node) if text == name else (None, None)
        code = code_for(name, value, statement is not None)
        if code == "NM403":
            self.set_here.add(name)
        if self.ctx.report(code, node, var=name, did=entry["did"], instead=entry["instead"]) and code == "NM404":
            self.ctx.remove(statement)

    def finish(self) -> None:
        """The reads of a bfloat16 switch: a finding without a marker, none where the file sets it (marked
        there) or where the program's launch script sets it (marked there: `FileProject.sets_env`)."""
        ctx = self.ctx
        elsewhere = set(ctx.settings.project.sets_env) if ctx.settings.project is not None else set()
        for occ, node, name in self.reads:
            if name in self.set_here or name in elsewhere:
                continue
            ctx.current = occ
            ctx.report(READ_CODE, node, var=name, **READ_FIELDS)
        ctx.current = None

    def _read(self, node: cst.SimpleString) -> bool:
        """`node` names the variable only to read it: `os.environ.get(NAME)`, `os.getenv(NAME)`,
        `os.environ[NAME]` (not assigned nor deleted), `NAME in os.environ`."""
        ctx = self.ctx
        parents = ctx.analysis.parents
        parent = parents.get(node)
        if isinstance(parent, cst.Arg):
            call = parents.get(parent)
            return isinstance(call, cst.Call) and call.args[0] is parent and ctx.qualname(call.func) in READERS
        if isinstance(parent, cst.Index):
            subscript = parents.get(parents.get(parent))
            if not isinstance(subscript, cst.Subscript) or ctx.qualname(subscript.value) != OS_ENVIRON:
                return False
            small = ctx.current.small
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
                [small.target] if isinstance(small, (cst.AugAssign, cst.AnnAssign, cst.Del)) else []
            return subscript not in targets
        if isinstance(parent, cst.Comparison):
            return parent.left is node and len(parent.comparisons) == 1 \
                and isinstance(parent.comparisons[0].operator, (cst.In, cst.NotIn)) \
                and ctx.qualname(parent.comparisons[0].comparator) == OS_ENVIRON
        return False

    def _setting(self, node: cst.SimpleString) -> tuple[str | None, cst.CSTNode | None]:
        """(value, statement) when the statement around `node` only sets the variable to a literal."""
        ctx = self.ctx
        small = ctx.current.small
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            if isinstance(target, cst.Subscript) and ctx.qualname(target.value) == OS_ENVIRON \
                    and len(target.slice) == 1 and target.slice[0].slice.value is node:
                value = string_value(small.value)
                return (value, small) if value is not None else (None, None)
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            call = small.value
            first, second = arg(call, 0, "key"), arg(call, 1, "value")
            if ctx.qualname(call.func) in SETTERS and first is not None and first.value is node \
                    and second is not None and len(call.args) == 2:
                value = string_value(second.value)
                return (value, small) if value is not None else (None, None)
        return None, None
