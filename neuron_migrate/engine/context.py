"""What a rule sees of the file it decides on, and how it reports findings with their fixes.

One decide pass serves `check` and `rewrite` alike: a rule reports a finding (`ctx.report`) and, when the policy
lets the finding be fixed, makes the edits that fix it. The engine then applies the edits (to write or show them,
and to learn which legacy imports the fixes leave unused) and turns the decisions into findings. So both
commands see the same findings; `rewrite` also says of each whether it was fixed, marked or left.
"""

from __future__ import annotations

import io
import tokenize
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable

import libcst as cst

from neuron_migrate import catalogue
from neuron_migrate.engine import paths
from neuron_migrate.engine.edits import EditSet, has_marker, import_key, marker_text
from neuron_migrate.engine.facts import Facts
from neuron_migrate.engine.imports import is_docstring, section
from neuron_migrate.engine.names import Analysis, Occurrence, Scope, import_target
from neuron_migrate.engine.sources import Source, SourceError
from neuron_migrate.policy import Policy
from neuron_migrate.settings import Settings
from neuron_migrate.suppress import Suppressions
from neuron_migrate.syntax import parse as cstparse

_UNKNOWN = object()

FIXED, MARKED, LEFT = "fixed", "marked", "left"  # what `rewrite` did about a finding

# Set while a pass only asks whether the file reports anything but these codes (handlers._would_change): the first
# decision of another code ends the pass (every decision becomes a finding, so the answer is known).
PROBE: ContextVar[frozenset[str] | None] = ContextVar("probe", default=None)


class Reported(BaseException):
    """A decision of a code the PROBE does not list was made: the pass stops (a BaseException, so no rule's or the
    engine's isolation of a failed rule takes it for a failure)."""


@dataclass
class Decision:
    """A finding a rule reported, before it is placed: its node, message, and what the policy lets be done."""

    code: str
    node: cst.CSTNode
    message: str
    fixable: bool  # the policy allows the fix (safe, or unsafe with --unsafe-fixes)
    statement: cst.CSTNode | None
    status: str = LEFT  # FIXED: its edits are made; MARKED: a marker stands above its statement; LEFT: neither
    offset: tuple[int, int] | None = None  # the span of the node's source the finding is on (in a long string)
    held_back: bool = False  # an unsafe fix this run does not make (`--unsafe-fixes` would)


def add_edit(edits: EditSet, kind: str, node: cst.CSTNode, value: object) -> None:
    if kind == "replace":
        edits.add_replace(node, value)
    elif kind == "remove":
        edits.remove.add(node)
    elif kind == "unwrap":
        edits.unwrap.add(node)
    elif kind == "marker":
        edits.add_marker(node, value)
    else:  # "after" / "before": statements to insert
        getattr(edits, kind).setdefault(node, []).extend(value)


@dataclass
class FileContext:
    """What a rule sees of the file it is deciding on, and how it reports and edits."""

    path: str
    source: Source
    module: cst.Module
    analysis: Analysis
    settings: Settings
    edits: EditSet = field(default_factory=EditSet)
    decisions: list[Decision] = field(default_factory=list)
    required_imports: list[tuple[str, str | None]] = field(default_factory=list)
    required_from: list[tuple[str, str]] = field(default_factory=list)  # (module, name): `from module import name`
    definitions: list[str] = field(default_factory=list)
    files_read: dict[str, str | None] = field(default_factory=dict)  # other files a decision read (the cache's key)
    current: Occurrence | None = None
    handled: set[cst.CSTNode] = field(default_factory=set)  # nodes some rule reported on (NM199 skips them)
    suppressions: Suppressions = field(default_factory=Suppressions)
    may_suppress: bool = True  # False when the file holds no suppression comment (MAY_SUPPRESS): skip the lookups
    # how many string literals of the code a lean tree leaves out open with ' and with " (engine/lean.py)
    left_out_quotes: tuple[int, int] = (0, 0)
    # Python's tree of the whole file, where the LibCST tree is a lean one: the names the left-out code binds
    whole_tree: object | None = None
    _whole_names: set[str] | None = None
    # every edit, in order, with the decision it fixes (the latest one reported; -1 before any): one edit that
    # fails is dropped with its decision's other edits, and the rest of the file is still fixed
    journal: list[tuple[int, str, cst.CSTNode, object]] = field(default_factory=list)
    _qualnames: dict[tuple[cst.CSTNode, Scope], str | None] = field(default_factory=dict)
    # imports placed at a function's top (see module_ref), by (function, module): made only where a fix inside
    # that function is made; a rule that spells its fix before the policy holds it back leaves no import behind
    _top_imports: dict[tuple[int, str], tuple[cst.CSTNode, tuple[str, cst.CSTNode, object]]] = \
        field(default_factory=dict)

    def __post_init__(self) -> None:
        self.facts = Facts(self)

    # -- names -----------------------------------------------------------------------------------------
    @property
    def scope(self) -> Scope:
        assert self.current is not None
        return self.current.scope

    def qualname(self, expr: cst.CSTNode | None, scope: Scope | None = None) -> str | None:
        """The dotted name `expr` stands for through the file's imports; asked by many rules, resolved once."""
        if expr is None:
            return None
        key = (expr, scope or self.current.scope)
        found = self._qualnames.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            found = self._qualnames[key] = self.analysis.qualname(expr, key[1])
        return found

    def module_ref(self, module: str, alias: str | None = None, scope: Scope | None = None) -> str:
        """The expression text that names `module` in the current scope, adding an import when none exists.

        `module_ref("torch")` gives "torch" (or "th" after `import torch as th`);
        `module_ref("torch.distributed", "dist")` gives "dist" and adds `import torch.distributed as dist`.
        A function that imports the module only on some paths gets the import at the top of its body, since
        its name is local to the whole function.
        """
        scope = scope or self.scope
        local = self.analysis.local_name_for(module, scope)
        if local is not None:
            owner = self.analysis.lookup(local, scope)
            if owner is not None and owner.kind == "module" and \
                    (top := self._bound_only_below(owner, local, scope)) is not None:
                self._import_before(top, module if local == module else f"{module} as {local}")
            return local
        lazy = self._lazy_function(scope)
        if alias is not None and self.analysis.lookup(alias, scope) is None and not self._name_taken(alias):
            if lazy is not None:
                self._import_at_top(lazy, f"{module} as {alias}")
            else:
                self._require(module, alias)
            return alias
        root = module.split(".")[0]
        owner = self.analysis.lookup(root, scope)
        if owner is None:
            if lazy is not None:
                self._import_at_top(lazy, module)
            else:
                self._require(module, None)
            return module
        if import_target(owner.bindings[root]) != root:
            raise SourceError(f"cannot add an import of {module}: the name {root!r} is taken in this file")
        if module in TORCH_EXPORTS:
            return module  # `import torch` binds it already
        if owner.kind == "module":
            self._require(module, None)
        else:
            self._import_at_top(owner, module)
        return module

    def _bound_only_below(self, owner: Scope, root: str, scope: Scope) -> cst.CSTNode | None:
        """The top-level statement running now when the module imports `root` only in statements after it
        (a notebook cell before the one that imports torch; `device = ...` above `import torch`): the name is
        not bound yet when this code runs. None when it is, or when the code runs later (in a function)."""
        current: Scope | None = scope
        while current is not owner:
            if current is None or current.kind != "class":
                return None
            current = current.parent
        if self.current is None or self.current.scope is not scope:
            return None
        top = self._top_statement(self.current.statement)
        body = list(self.module.body)
        at = next((i for i, statement in enumerate(body) if statement is top), None)
        if at is None:
            return None
        for binding in owner.bindings[root]:
            bound = self._top_statement(binding.node)
            if next((i for i, statement in enumerate(body) if statement is bound), -1) <= at:
                return None
        return top

    def _top_statement(self, node: cst.CSTNode | None) -> cst.CSTNode | None:
        parents = self.analysis.parents
        while node is not None:
            parent = parents.get(node)
            if parent is None or isinstance(parent, cst.Module):
                return node
            node = parent
        return None

    def _import_before(self, statement: cst.CSTNode, module: str) -> None:
        """`import module` above the top-level statement, made only where a fix inside it is made."""
        key = (id(statement), module)
        if key not in self._top_imports:
            self._top_imports[key] = (statement, ("before", statement, cstparse.statements(f"import {module}\n")))

    def _lazy_function(self, scope: Scope) -> Scope | None:
        """The function that imports torch_xla (or torch) itself, around `scope`, in a module that imports none
        of them at its top: the module imports lazily (it must load without torch), so what the fixes import
        goes into that function, where the legacy import was, not to the module's top."""
        lazy = next((s for s in _enclosing(scope) if s.kind == "function" and _imports_torch(s)), None)
        if lazy is None or _imports_torch(self.analysis.module_scope):
            return None
        return lazy

    def _import_at_top(self, function_scope: Scope, module: str) -> None:
        """`import module` in the function's leading imports, where isort puts it (I001); at the top of its body
        when it has none."""
        key = (id(function_scope.node), module)
        if key in self._top_imports:
            return
        body = function_scope.node.body
        statements = list(body.body) if isinstance(body, cst.IndentedBlock) else []
        start = 1 if statements and is_docstring(statements[0]) and len(statements) > 1 else 0
        run = []
        for statement in statements[start:]:
            found = import_key(statement)
            if found is None:
                break
            run.append((found, statement))
        new = cstparse.statements(f"import {module}\n")
        mine = (section(module), False, module.split(" ")[0].lower())
        # in its block, after the lines it follows, else before the block that follows it (the applier sets the
        # blocks off by isort's blank lines, see `edits._isort_gaps`)
        later = next(((found, statement) for found, statement in run if found > mine), None)
        earlier = [statement for found, statement in run if found < mine]
        if later is not None and (later[0][0] == mine[0] or not earlier):
            edit = ("before", later[1], new)
        elif earlier:
            edit = ("after", earlier[-1], new)
        elif start:
            edit = ("after", statements[0], new)
        else:
            edit = ("before", body.body[0], new)
        self._top_imports[key] = (function_scope.node, edit)

    def _name_taken(self, name: str) -> bool:
        """Whether any scope of the file binds `name`: of the whole file, also where the tree is a lean one (the
        definitions it leaves out bind names too, read from Python's tree of the whole file, engine/treenames.py),
        so that `check` names what `rewrite` names."""
        if any(name in s.bindings for s in self.analysis.scopes):
            return True
        if self.whole_tree is None:
            return False
        if self._whole_names is None:
            from neuron_migrate.engine.treenames import TreeNames

            names = TreeNames(self.whole_tree, self.source.text)
            self._whole_names = {bound for scope in names.scopes for bound in scope.bindings}
        return name in self._whole_names

    def _require(self, module: str, alias: str | None) -> None:
        if (module, alias) not in self.required_imports:
            self.required_imports.append((module, alias))

    @property
    def quote(self) -> str:
        """The quote character the file prefers for new string literals."""
        return self.facts.quote

    def string(self, value: str) -> str:
        return f"{self.quote}{value}{self.quote}"

    @property
    def moving_to_neuron(self) -> bool:
        return self.facts.moving_to_neuron

    # -- findings and edits ------------------------------------------------------------------------------
    def enabled(self, code: str) -> bool:
        return self.settings.enabled(code, self.path)

    def report(self, code: str, node: cst.CSTNode, statement: cst.CSTNode | None = None, marker: bool = True,
               acts_on: str | None = None, offset: tuple[int, int] | None = None, **fields) -> bool:
        """Record a finding. Returns True when the rule should now make its edits for it.

        The answer is the same for `check` and `rewrite`: True when the code is enabled, not suppressed on its
        line, and its fix allowed (safe, or unsafe with `--unsafe-fixes`). For manual rules the marker is placed
        here (above `statement`, by default the current statement) and False is returned; with `marker=False`
        True is returned and the caller places one marker for several findings. Check-only rules get no marker.
        A finding on a statement that already carries this code's marker is not repeated: the marker (NM900)
        stands for it. Every reported node counts as handled, enabled or not, so NM199 never reports it.
        `offset`: (start, end) of the text in the node's source the finding is on, when not all of it (a line of
        a long string).

        The code paths gate every finding first (engine/paths.py): a finding is reported only where its family
        (`Rule.acts_on`, or `acts_on` for a rule that reports one code for two families) acts; in a multi-backend
        file an XLA finding is held for its branch's one NM111 marker instead.
        """
        self.handled.add(node)
        if isinstance(node, cst.Call):
            self.handled.add(node.func)
        if code != paths.NATIVE_BRANCH:
            found = self.facts.paths
            family = acts_on or paths.acts_on(code)
            if not found.allows(family, node):
                return False
            if family == paths.XLA_REWRITE and found.multi_backend:
                found.hold(node, statement or (self.current.statement if self.current else None), fields,
                           self.current.scope if self.current else None)
                return False
        statement = statement or (self.current.statement if self.current else None)
        # the same decision for check and rewrite: the one policy, asked as rewrite asks it
        policy = Policy(self.settings, self.path, rewrite=True).decide(
            code, self.current.statement if self.current else statement,
            self.suppressions if self.may_suppress else None, fields,
            marked=lambda: statement is not None and has_marker(statement, code, self.header_of(statement)),
            migrating=lambda: self.moving_to_neuron)
        if policy is None:
            return False
        decision = Decision(code, node, policy.message, policy.fixable, statement, offset=offset,
                            held_back=policy.held_back)
        self.decisions.append(decision)
        probe = PROBE.get()
        if probe is not None and code not in probe:
            raise Reported(code)
        if policy.mark and statement is not None:
            decision.status = MARKED
            if marker:
                self.mark(statement, policy.marker)
                return False
            return True  # the caller places one marker for several findings
        if policy.fix:
            decision.status = FIXED
        return policy.fix

    def header_of(self, statement: cst.CSTNode) -> tuple:
        """The module's header lines where `statement` is the module's first statement (they stand above it)."""
        body = self.module.body
        return tuple(self.module.header) if body and body[0] is statement else ()

    def replace(self, node: cst.CSTNode, new: cst.CSTNode | Callable[[cst.CSTNode], cst.CSTNode]) -> None:
        self._edit("replace", node, new if callable(new) else (lambda _old, _new=new: _new))

    def remove(self, node: cst.CSTNode) -> None:
        self._edit("remove", node, None)

    def insert_after(self, statement: cst.CSTNode, code: str) -> None:
        self._edit("after", statement, cstparse.statements(code))

    def insert_before(self, statement: cst.CSTNode, code: str) -> None:
        self._edit("before", statement, cstparse.statements(code))

    def unwrap(self, statement: cst.CSTNode) -> None:
        self._edit("unwrap", statement, None)

    def mark(self, statement: cst.CSTNode, text: str) -> None:
        """A `# TODO(neuron-migrate ...)` marker above `statement` (once per text)."""
        self._edit("marker", statement, text)

    def _edit(self, kind: str, node: cst.CSTNode, value: object, owner: int | None = None) -> None:
        self.journal.append((len(self.decisions) - 1 if owner is None else owner, kind, node, value))
        add_edit(self.edits, kind, node, value)

    # -- edit isolation ------------------------------------------------------------------------------------
    def checkpoint(self) -> tuple[int, int]:
        return len(self.journal), len(self.decisions)

    def rollback(self, mark: tuple[int, int]) -> list[Decision]:
        """Undo the edits and decisions since `mark`; returns the decisions taken back."""
        edits, decisions = mark
        del self.journal[edits:]
        taken = self.decisions[decisions:]
        del self.decisions[decisions:]
        self.edits = self.without(set())
        return taken

    def without(self, dropped: set[int]) -> EditSet:
        """The edits of every decision but those numbered in `dropped`."""
        edits = EditSet()
        kept = [(d, node) for d, _kind, node, _value in self.journal if d not in dropped]
        made = [edit for function, edit in self._top_imports.values()
                if any(d >= 0 and self.decisions[d].status == FIXED and self._inside(node, function)
                       for d, node in kept)]
        for edit in sorted(made, key=lambda e: import_key(e[2][0]) or ()):  # two at one place: in isort's order
            add_edit(edits, *edit)
        for decision, kind, node, value in self.journal:
            if decision not in dropped:
                add_edit(edits, kind, node, value)
        return edits

    def _inside(self, node: cst.CSTNode, function: cst.CSTNode) -> bool:
        parents = self.analysis.parents
        while node is not None and node is not function:
            node = parents.get(node)
        return node is function

    def fix_failed(self, decision: Decision, reason: str) -> None:
        """`decision`'s fix could not be made: a marker says so above its statement, and says what to do."""
        info = catalogue.rule(decision.code)
        decision.status = MARKED if decision.statement is not None else LEFT
        if decision.statement is not None:  # owned by no decision: no later drop takes it away
            text = marker_text(decision.code, f"not rewritten ({reason})", info.link)
            self._edit("marker", decision.statement, text, owner=-1)

    def replace_small_statement(self, code: str) -> bool:
        """Replace the current small statement by `code` (statements); False where that cannot be done in place."""
        occ = self.current
        line = occ.statement if occ is not None else None
        if not isinstance(line, cst.SimpleStatementLine) or occ.small is not line.body[-1]:
            return False
        self.remove(occ.small)
        self.insert_after(line, code)
        return True

    def import_from(self, module: str, name: str) -> str:
        """`name`, imported from `module` at the top of the file (`from module import name`) when the rewritten
        code reads it; the module is no legacy one and the file binds `name` nowhere."""
        if (module, name) not in self.required_from:
            self.required_from.append((module, name))
        return name

    def define(self, code: str) -> None:
        """A module-level statement that new code relies on, placed once after the imports, its one-line strings
        in the file's quotes."""
        code = requote(code, self.quote)
        if code not in self.definitions:
            self.definitions.append(code)


def requote(code: str, quote: str) -> str:
    """`code` with each plain one-line string literal in `quote` where its text holds no quote or backslash
    (docstrings and prefixed strings keep theirs)."""
    other = "'" if quote == '"' else '"'
    if other not in code:
        return code
    lines = code.splitlines(keepends=True)
    edits = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            text = tok.string
            if (tok.type == tokenize.STRING and tok.start[0] == tok.end[0] and text[:1] == other
                    and not text.startswith(other * 3) and not any(c in text[1:-1] for c in "'\\\"")):
                edits.append((tok.start, tok.end))
    except (tokenize.TokenError, SyntaxError):
        return code
    for (row, start), (_, end) in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = f"{line[:start]}{quote}{line[start + 1:end - 1]}{quote}{line[end:]}"
    return "".join(lines)


def _enclosing(scope: Scope | None):
    while scope is not None:
        yield scope
        scope = scope.parent


LAZY_ROOTS = ("torch", "torch_xla", "torch_neuronx")
# The submodules `import torch` imports and binds as its attributes (`from torch import profiler as profiler` in
# torch/__init__.py, in every release TorchNeuron runs on): code that names `torch.profiler` needs no import of it.
TORCH_EXPORTS = frozenset(f"torch.{name}" for name in (
    "accelerator", "autograd", "backends", "cuda", "distributed", "fft", "jit", "linalg", "multiprocessing", "nn",
    "optim", "profiler", "utils"))


def _imports_torch(scope: Scope) -> bool:
    """The scope imports torch, torch_xla or torch_neuronx (guarded or not)."""
    return any(b.kind == "import" and (b.qualname or "").split(".")[0] in LAZY_ROOTS
               for bindings in scope.bindings.values() for b in bindings)
