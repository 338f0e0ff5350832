"""One Python file, start to end: read bytes, resolve names, decide edits, render, validate.

    decode -> pre-filter -> parse -> analyse scopes -> rules decide -> apply edits -> tidy imports
           -> render -> compile (Python must accept the result) -> encode

Nothing here writes: the runner writes the returned bytes (atomically) or prints the diff.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable

import libcst as cst

from neuron_migrate import catalogue
from neuron_migrate.syntax import parse as cstparse
from neuron_migrate.syntax.parse import parse_module
from neuron_migrate.engine.edits import MARKER_PREFIX, EditSet, Renderer, apply, has_marker, marker_text
from neuron_migrate.findings import FileResult, Finding, FixSafety
from neuron_migrate.engine import imports
from neuron_migrate.engine.imports import is_docstring
from neuron_migrate.engine.names import Analysis, Occurrence, Scope, import_target
from neuron_migrate.syntax import positions
from neuron_migrate.rules import Present, Rule, all_rules
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import Source, SourceError, decode
from neuron_migrate.suppress import MAY_SUPPRESS, Suppressions
from neuron_migrate.suppress import UNUSED_CODE as UNUSED_SUPPRESSION

MARKER_RE = re.compile(r"#\s*TODO\(neuron-migrate (NM\d{3})\):\s*(.*)$")
MARKER_CODE = "NM900"
# `.to("neuron")`, `device="neuron:0"`, `torch.device("neuron")`, `autocast("neuron")`, `torch.neuron.synchronize()`
NEURON_DEVICE_USE = re.compile(
    r"""(\.to\(\s*|device(_type)?\s*=\s*|\.device\(\s*|autocast\(\s*)["']neuron(:\d+)?["']|\btorch\.neuron\.""")
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
ISSUES_URL = "https://github.com/neuron-migrate/neuron-migrate/issues"
_UNKNOWN = object()


@dataclass
class Pending:
    code: str
    node: cst.CSTNode
    message: str
    fixable: bool
    statement: cst.CSTNode | None


@dataclass
class FileContext:
    """What a rule sees of the file it is deciding on, and how it reports and edits."""

    path: str
    source: Source
    module: cst.Module
    analysis: Analysis
    settings: Settings
    rewrite: bool
    edits: EditSet = field(default_factory=EditSet)
    pending: list[Pending] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)
    required_imports: list[tuple[str, str | None]] = field(default_factory=list)
    definitions: list[str] = field(default_factory=list)
    current: Occurrence | None = None
    shared: dict[str, object] = field(default_factory=dict)  # facts rules share (e.g. "data_parallel")
    target: object = None  # the file's device spellings (rules/target.py's Target), made on first use
    handled: set[cst.CSTNode] = field(default_factory=set)  # nodes some rule reported on (NM199 skips them)
    suppressions: Suppressions = field(default_factory=Suppressions)
    _qualnames: dict[tuple[cst.CSTNode, Scope], str | None] = field(default_factory=dict)
    may_suppress: bool = True  # False when the file holds no suppression comment (MAY_SUPPRESS): skip the lookups

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
            return local
        if alias is not None and self.analysis.lookup(alias, scope) is None and not self._name_taken(alias):
            self._require(module, alias)
            return alias
        root = module.split(".")[0]
        owner = self.analysis.lookup(root, scope)
        if owner is None:
            self._require(module, None)
            return module
        if import_target(owner.bindings[root]) != root:
            raise SourceError(f"cannot add an import of {module}: the name {root!r} is taken in this file")
        if owner.kind == "module":
            self._require(module, None)
        else:
            self._import_at_top(owner, module)
        return module

    def _import_at_top(self, function_scope: Scope, module: str) -> None:
        key = ("top-import", id(function_scope.node), module)
        if key in self.shared:
            return
        self.shared[key] = True
        body = function_scope.node.body
        first = body.body[0]
        if isinstance(body, cst.IndentedBlock) and is_docstring(first) and len(body.body) > 1:
            self.insert_after(first, f"import {module}\n")
        else:
            self.insert_before(first, f"import {module}\n")

    def _name_taken(self, name: str) -> bool:
        return any(name in s.bindings for s in self.analysis.scopes)

    def _require(self, module: str, alias: str | None) -> None:
        if (module, alias) not in self.required_imports:
            self.required_imports.append((module, alias))

    @property
    def quote(self) -> str:
        """The quote character the file prefers for new string literals."""
        q = self.shared.get("_quote")
        if q is None:
            text = self.source.text
            q = "'" if text.count("'") > 2 * text.count('"') else '"'
            self.shared["_quote"] = q
        return q  # type: ignore[return-value]

    def string(self, value: str) -> str:
        return f"{self.quote}{value}{self.quote}"

    # -- findings and edits ------------------------------------------------------------------------------
    def enabled(self, code: str) -> bool:
        return self.settings.enabled(code, self.path)

    def report(self, code: str, node: cst.CSTNode, statement: cst.CSTNode | None = None, marker: bool = True,
               **fields) -> bool:
        """Record a finding. Returns True when the rule should now make its edits for it.

        For manual rules the marker is placed here (above `statement`, by default the current statement) and
        False is returned; with `marker=False` True is returned and the caller places the marker. Check-only
        rules get no marker. A finding suppressed on its line is dropped. A finding on a statement that already
        carries this code's marker is not repeated:
        the marker (NM900) stands for it.
        """
        self.handled.add(node)
        if isinstance(node, cst.Call):
            self.handled.add(node.func)
        if not self.enabled(code):
            return False
        if self.may_suppress and self.suppressions.suppresses(self.current.statement if self.current else statement,
                                                              code):
            return False
        info = catalogue.rule(code)
        statement = statement or (self.current.statement if self.current else None)
        if statement is not None and has_marker(statement, code):
            return False
        fixable = info.fix is not FixSafety.MANUAL and not (info.fix is FixSafety.UNSAFE and self.settings.safe_only)
        message = info.format(**fields)
        self.pending.append(Pending(code, node, message, fixable, statement))
        if not self.rewrite:
            return False
        if info.fix is FixSafety.MANUAL:
            if statement is None or info.check_only or (info.marks_migrating_only and not self.moving_to_neuron):
                return False
            if marker:
                self.edits.add_marker(statement, marker_text(code, message, info.link))
                return False
            return True  # the caller places one marker for several findings
        if not fixable:
            return False
        self.applied[code] = self.applied.get(code, 0) + 1
        return True

    @property
    def moving_to_neuron(self) -> bool:
        """The file belongs to a program moving to the neuron device: it imports torch_xla or torch_neuronx at
        module level, or already uses the `neuron` device. (A library that imports torch_xla only inside the
        function of an XLA code path, as PyTorch itself does, is a multi-backend library, not such a program.)"""
        if "moving_to_neuron" not in self.shared:
            self.shared["moving_to_neuron"] = any(
                b.kind == "import" and (b.qualname or "").split(".")[0] in ("torch_xla", "torch_neuronx")
                for bindings in self.analysis.module_scope.bindings.values() for b in bindings
            ) or bool(NEURON_DEVICE_USE.search(self.source.text))
        return bool(self.shared["moving_to_neuron"])

    def replace(self, node: cst.CSTNode, new: cst.CSTNode | Callable[[cst.CSTNode], cst.CSTNode]) -> None:
        self.edits.add_replace(node, new if callable(new) else (lambda _old, _new=new: _new))

    def remove(self, node: cst.CSTNode) -> None:
        self.edits.remove.add(node)

    def insert_after(self, statement: cst.CSTNode, code: str) -> None:
        self.edits.after.setdefault(statement, []).extend(cstparse.statements(code))

    def insert_before(self, statement: cst.CSTNode, code: str) -> None:
        self.edits.before.setdefault(statement, []).extend(cstparse.statements(code))

    def unwrap(self, statement: cst.CSTNode) -> None:
        self.edits.unwrap.add(statement)

    def replace_small_statement(self, code: str) -> bool:
        """Replace the current small statement by `code` (statements); False where that cannot be done in place."""
        occ = self.current
        line = occ.statement if occ is not None else None
        if not isinstance(line, cst.SimpleStatementLine) or occ.small is not line.body[-1]:
            return False
        self.remove(occ.small)
        self.insert_after(line, code)
        return True

    def define(self, code: str) -> None:
        """A module-level statement that new code relies on, placed once after the imports."""
        if code not in self.definitions:
            self.definitions.append(code)


# -- the pipeline ------------------------------------------------------------------------------------------

def parse(source: Source, python_first: bool = True) -> cst.Module:
    """The LibCST tree of a file that Python itself accepts (LibCST also takes some Python 2 forms).

    `python_first` parses with Python first, which also gives `positions` the statement lines findings are placed
    by. Without it (a rewrite, which places no finding), Python's parser is asked only where LibCST fails; the
    caller asks it later (see `process_python`)."""
    tree = _python_tree(source.text) if python_first else None
    try:
        module = parse_module(source.text)
    except cst.ParserSyntaxError as exc:
        if tree is None:
            _python_accepts(source.text)  # Python's own message, where Python rejects the file too
        raise SourceError(f"line {exc.raw_line}:{exc.raw_column + 1}: the rewriting parser (LibCST) cannot read "
                          f"this valid Python ({exc.message.splitlines()[0]}); the file was left alone. Please report "
                          f"it at {ISSUES_URL}") from None
    if tree is not None:
        positions.remember(module, source.text, tree)  # findings are placed by Python's statement lines
    return module


def _python_tree(text: str) -> ast.Module:
    """Python's own tree; a syntax error is described as Python describes it (users know it, its positions
    are right)."""
    return _python(text, tree=True)


def _python_accepts(text: str) -> None:
    """Raises where Python rejects `text`, as `_python_tree` does. Compiling builds no tree of Python objects (a
    third of the time of `ast.parse`), and also finds what Python rejects only when it compiles (`return`
    outside a function, `nonlocal` at module level)."""
    _python(text, tree=False)


def _python(text: str, tree: bool) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if tree:
                return ast.parse(text)
            compile(text, "<file>", "exec", dont_inherit=True)
            return None
    except SyntaxError as exc:
        hint = " (this looks like Python 2 code; port it to Python 3 first)" if _looks_like_python2(text) else ""
        raise SourceError(f"line {exc.lineno}:{exc.offset or 1}: syntax error (for Python {PYTHON}): {exc.msg}"
                          f"{hint}; fix the syntax, then run again") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise SourceError(f"line 1: syntax error (for Python {PYTHON}): {exc}") from None


_PY2 = re.compile(r"^\s*(print\s+[\"'\w]|exec\s+[\"']|except\s+\w+\s*,\s*\w+\s*:)", re.M)


def _looks_like_python2(text: str) -> bool:
    return bool(_PY2.search(text))


def prepare() -> None:
    """Load the rules and the catalogue (see handlers.prepare)."""
    all_rules()
    catalogue.catalogue()


def active_rules(data: bytes, settings: Settings, path: str) -> list[type[Rule]]:
    present = Present(data)
    return [r for r in all_rules()
            if r.may_match(data, present) and any(settings.enabled(c, path) for c in r.codes)]


def process_python(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    source = decode(data)
    result = FileResult(path, old_bytes=data)
    rules = active_rules(data, settings, path)
    has_markers = MARKER_PREFIX.encode() in data
    may_suppress = MAY_SUPPRESS.search(data) is not None
    if not rules and not has_markers and not may_suppress:
        return result
    module = parse(source, python_first=not rewrite)
    cstparse.new_file()  # the rules' replacement nodes are unique within this file
    renderer = Renderer()
    try:
        new_text = transform(path, source, module, rules, settings, rewrite, result, may_suppress, renderer)
        if new_text is not None and new_text != source.text:
            if renderer.code(module) != source.text:
                raise SourceError("the parser does not give back this file byte for byte, so it cannot be rewritten "
                                  "without changing lines no rule touched; the file was left alone")
            validate(new_text)  # Python accepts the result: the file was Python to begin with
            result.new_bytes = source.encode(new_text)
        elif rewrite:
            _python_accepts(source.text)  # nothing to write; a file Python rejects is still reported
    except SourceError:
        if rewrite:
            _python_accepts(source.text)  # where Python rejects the file, its syntax error is the message
        raise
    return result


def transform(path: str, source: Source, module: cst.Module, rules: list[type[Rule]], settings: Settings,
              rewrite: bool, result: FileResult, may_suppress: bool, renderer: Renderer) -> str | None:
    dispatch: dict[type, list[Callable]] = {}
    analysis = Analysis(module, wanted=tuple({t for r in rules for t in r.node_types()}), record=rewrite)
    ctx = FileContext(path, source, module, analysis, settings, rewrite, may_suppress=may_suppress)
    instances = [r(ctx) for r in rules]
    for rule in instances:
        for node_type, method in rule.node_types().items():
            dispatch.setdefault(node_type, []).append(getattr(rule, method))
    for occ in analysis.occurrences:
        ctx.current = occ
        for handler in dispatch.get(type(occ.node), ()):
            handler(occ.node)
    ctx.current = None
    for rule in instances:
        rule.finish()


    if not rewrite:
        if may_suppress and settings.enabled(UNUSED_SUPPRESSION, path):
            ctx.pending += unused_suppressions(ctx)
        findings = _positions(module, ctx.pending, path)
        findings += imports.unused_legacy_findings(ctx, path)
        findings += marker_findings(source.text, path, settings)
        result.findings = sorted(findings, key=lambda f: f.sort_key())
        return None
    if not ctx.edits and not ctx.required_imports and not ctx.definitions and "torch_xla" not in source.text:
        return None
    original = renderer.code(module)  # first: the new module's untouched statements reuse this code
    new_module = apply(module, ctx.edits, analysis.parents)
    new_module, removed = imports.tidy(new_module, ctx.required_imports, ctx.definitions,
                                          render=renderer.code, before=analysis)
    if removed and settings.enabled(imports.UNUSED_CODE, path):
        ctx.applied[imports.UNUSED_CODE] = ctx.applied.get(imports.UNUSED_CODE, 0) + removed
    result.applied = {k: v for k, v in ctx.applied.items() if v}
    rendered = renderer.code(new_module)
    if rendered == original:
        return source.text  # nothing edited (even where the parser does not give the file back byte for byte)
    new_text = final_newline(source, rendered)
    result.manual = marker_findings(new_text, path, settings)
    return new_text


def unused_suppressions(ctx: FileContext) -> list[Pending]:
    info = catalogue.rule(UNUSED_SUPPRESSION)
    out = []
    for comment, code, statement in ctx.suppressions.unused(ctx.module):
        if code == "*" or ctx.enabled(code):
            what = "`# neuron-migrate: ignore`" if code == "*" else code
            out.append(Pending(UNUSED_SUPPRESSION, comment, info.format(code=what), False, statement))
    return out


def final_newline(source: Source, new_text: str) -> str:
    """A file without a final newline keeps it missing only while its last line is untouched.

    Otherwise removing that last line would take the newline off the line before it, a line no rule touched.
    """
    old = source.text
    if not old or old.endswith(("\n", "\r")) or not new_text or new_text.endswith(("\n", "\r")):
        return new_text
    last_line = old.splitlines(keepends=True)[-1]
    return new_text if new_text.endswith(last_line) else new_text + source.newline


def _positions(module: cst.Module, pending: list[Pending], path: str) -> list[Finding]:
    if not pending:
        return []
    found = positions.positions_of(module, [(p.node, p.statement) for p in pending])
    out = []
    for p in pending:
        pos = found.get(p.node)
        line, col = (pos.start.line, pos.start.column + 1) if pos else (1, 1)
        end = (pos.end.line, pos.end.column + 1) if pos else (None, None)
        out.append(Finding(path, line, col, p.code, p.message, p.fixable, end_line=end[0], end_col=end[1]))
    return out


def marker_findings(text: str, path: str, settings: Settings) -> list[Finding]:
    if MARKER_PREFIX not in text or not settings.enabled(MARKER_CODE, path):
        return []
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = MARKER_RE.search(line)
        if m:
            info = catalogue.rule(MARKER_CODE)
            out.append(Finding(path, lineno, m.start() + 1, MARKER_CODE,
                               info.format(code=m.group(1), text=m.group(2).strip())))
    return out


def validate(new_text: str) -> None:
    """The rewritten file must compile with Python's own compiler (the caller checks the original where not).

    Re-parsing with LibCST too would cost as much as the first parse; what it could catch, code LibCST cannot
    read back, is covered by the idempotency tests (a second run parses every rewritten file with LibCST)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(new_text, "<rewritten>", "exec", dont_inherit=True)  # as strict as an import, no tree built
    except SyntaxError as exc:
        raise SourceError(f"internal error: the rewrite produced code that does not parse ({exc.msg}, line "
                          f"{exc.lineno}); the file was left alone. Please report this at {ISSUES_URL}") from None
