"""One Python file, start to end: read bytes, resolve names, decide findings with their fixes, apply, validate.

    decode -> pre-filter -> parse -> analyse scopes -> rules decide (findings and the edits that fix them)
           -> NM199 for what no rule took -> apply the fixes -> tidy imports -> render
           -> compile (Python must accept the result) -> encode

`check` and `rewrite` run the same pass and get the same findings; `rewrite` (`produce=True`) also gets the new
bytes and each finding's status (fixed, marked, left). Nothing here writes: the runner writes the returned bytes
(atomically) or prints the diff.
"""

from __future__ import annotations

import ast
import contextvars
import os
import re
import sys
import warnings

import libcst as cst

from neuron_migrate import catalogue, syntax
from neuron_migrate.engine import imports, leftovers, patches
from neuron_migrate.engine.context import FIXED, LEFT, MARKED, PROBE, Decision, FileContext, Reported
from neuron_migrate.engine.edits import (MARKER_PREFIX, EditSet, apply, collapse_dead_arms, effect_free,
                                         if_arms, if_tests, merged_adjacent_arms, pure, same_arms)
from neuron_migrate.engine.paths import COMMON
from neuron_migrate.engine.facts import MOVING_TO_NEURON_BYTES
from neuron_migrate.engine.lean import lean_text
from neuron_migrate.engine.notes import NOTES_ONLY, probed
from neuron_migrate.engine.notes import decide as decide_notes
from neuron_migrate.engine.treecheck import decide as decide_on_tree
from neuron_migrate.engine.names import Analysis
from neuron_migrate.engine.scan import Scan
from neuron_migrate.engine.sources import Source, SourceError, decode
from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.rules import NamesPattern, Present, Rule, all_rules
from neuron_migrate.settings import Settings
from neuron_migrate.suppress import MAY_SUPPRESS
from neuron_migrate.suppress import UNUSED_CODE as UNUSED_SUPPRESSION
from neuron_migrate.syntax import positions
from neuron_migrate.syntax.parse import parse_module
from neuron_migrate.syntax.codegen import Renderer
from neuron_migrate.syntax.codegen import code as generated
from neuron_migrate.syntax.walk import children

MARKER_RE = re.compile(r"#\s*TODO\(neuron-migrate (NM\d{3})\):\s*(.*)$")
MARKER_CODE = "NM900"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
ISSUES_URL = "https://github.com/neuron-migrate/neuron-migrate/issues"
# Rules that fail before reporting anything raise instead of being skipped (the test suite sets it).
STRICT = os.environ.get("NEURON_MIGRATE_STRICT_RULES") == "1"
# The tree pre-filter of check and rewrite (engine/scan.py); NEURON_MIGRATE_TREE_FILTER=0 turns it off (to measure it).
TREE_FILTER = os.environ.get("NEURON_MIGRATE_TREE_FILTER", "1") != "0"


# Code IPython runs (notebook cells) may `await` at the top level; the notebook handler sets this around its call.
TOP_LEVEL_AWAIT: contextvars.ContextVar[bool] = contextvars.ContextVar("top_level_await", default=False)


class Shared:
    """The trees of the passes over one file, where a caller decides it more than once (handlers._held: a set-aside
    file's platform notes, then whether it would report more). `check` only reads a tree, so the passes share them:
    LibCST's by the text parsed, and Python's by the file's text with what is made of it (`made`: its scan, the
    notes' walk), until the lean parse changes it in place for the text it leaves (engine/lean.py). A notebook's
    passes share its JSON and what Python says of each cell (files/notebook.py)."""

    __slots__ = ("libcst", "python", "notebooks", "cells")

    def __init__(self) -> None:
        self.libcst: dict[str, cst.Module] = {}
        self.python: dict[str, dict] = {}
        self.notebooks: dict[bytes, tuple[str, dict]] = {}  # a notebook's bytes -> its text and JSON (read only)
        self.cells: dict[tuple[str, str], str | None] = {}  # (the nonce, a cell's source) -> `_not_python`'s answer


SHARED_TREES: contextvars.ContextVar[Shared | None] = contextvars.ContextVar("shared_trees", default=None)


def _flags() -> int:
    return ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if TOP_LEVEL_AWAIT.get() else 0


# -- the pipeline ------------------------------------------------------------------------------------------

def parse(source: Source, needles: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
          tree: ast.Module | None = None) -> tuple[cst.Module, tuple[int, int], ast.Module | None]:
    """The LibCST tree of a file that Python itself accepts (LibCST also takes some Python 2 forms). Python parses
    first: its message is the one users know, and its statement lines are what findings are placed by.

    With `needles` (`check`: the file is only read), the tree is the lean one (engine/lean.py): the functions and
    classes that cannot hold a finding are stand-ins, every other statement at its own line and column. `tree` is
    Python's tree of the file where the caller has it already. Returned with the tree: how many string literals
    of the code it leaves out open with `'` and with `"` (facts.quote), and Python's tree of the whole file where
    the LibCST tree is a lean one (the names the left-out code binds: `FileContext._name_taken`)."""
    if tree is None:
        tree, _ = _read(source.text)
    text = source.text
    left_out, whole = (0, 0), None
    shared = SHARED_TREES.get() if needles is not None else None
    if needles is not None:
        lean = lean_text(text, tree, *needles)
        if lean is not None:
            text, left_out = lean  # `tree` now stands for it
            whole = tree
            if shared is not None:
                shared.python.pop(source.text, None)
    module = shared.libcst.get(text) if shared is not None else None
    if module is None:
        try:
            module = parse_module(text)
        except cst.ParserSyntaxError as exc:
            raise SourceError(f"line {exc.raw_line}:{exc.raw_column + 1}: the rewriting parser (LibCST) cannot "
                              f"read this valid Python ({exc.message.splitlines()[0]}); the file was left alone. "
                              f"Please report it at {ISSUES_URL}") from None
        if shared is not None:
            shared.libcst[text] = module
    positions.remember(module, text, tree)  # findings are placed by Python's statement lines
    return module, left_out, whole


def _read(text: str) -> tuple[ast.Module, dict]:
    """Python's tree of `text`, and a dict for what is made of it: shared by the passes of one file (`Shared`)."""
    shared = SHARED_TREES.get()
    made = shared.python.setdefault(text, {}) if shared is not None else {}
    if "tree" not in made:
        made["tree"] = _python_tree(text)
    return made["tree"], made


def _python_tree(text: str) -> ast.Module:
    """Python's own tree; a syntax error is described as Python describes it (users know it, its positions
    are right)."""
    return _python(text, tree=True)


def _python_accepts(text: str) -> None:
    """Raises where Python rejects `text`, as `_python_tree` does. Compiling builds no tree of Python objects (a
    third of the time of `ast.parse`), and also finds what Python rejects only when it compiles (`return`
    outside a function, `nonlocal` at module level). Once per text for the passes over one file (`Shared`)."""
    shared = SHARED_TREES.get()
    if shared is not None and text in shared.python and shared.python[text].get("compiles"):
        return
    _python(text, tree=False)
    if shared is not None:
        shared.python.setdefault(text, {})["compiles"] = True


def _python(text: str, tree: bool) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if tree:
                return ast.parse(text)
            compile(text, "<file>", "exec", flags=_flags(), dont_inherit=True)
            return None
    except SyntaxError as exc:
        hint = " (this looks like Python 2 code; port it to Python 3 first)" if _looks_like_python2(text) else ""
        raise SourceError(f"line {exc.lineno}:{exc.offset or 1}: syntax error (for Python {PYTHON}): {exc.msg}"
                          f"{hint}; fix the syntax, then run again") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise SourceError(f"line 1: syntax error (for Python {PYTHON}): {exc}") from None


_PY2 = re.compile(r"^[ \t\f]*(print\s+[\"'\w]|exec\s+[\"']|except\s+\w+\s*,\s*\w+\s*:)", re.M)


def _looks_like_python2(text: str) -> bool:
    return bool(_PY2.search(text))


def prepare() -> None:
    """Load the rules and the catalogue (see handlers.prepare)."""
    all_rules()
    catalogue.catalogue()


def active_rules(data: bytes, settings: Settings, path: str, present: Present | None = None) -> list[type[Rule]]:
    """The rules that may find something in `data`. Where NM199 runs, that is every such rule, enabled or not: a
    rule takes over the nodes it reports on even when its own codes are not selected, so selection never turns a
    handled idiom into an NM199 finding (a disabled code's report is not shown, and its fix is not made)."""
    present = present or Present(data)
    every = leftovers.active(present, settings, path)
    # the selection first: a set-aside file's notes ask for three codes of all
    return [r for r in (all_rules() if every else _selected(settings, path)) if r.may_match(data, present)]


_SELECTED: dict[tuple, tuple[type[Rule], ...]] = {}


def _selected(settings: Settings, path: str) -> tuple[type[Rule], ...]:
    """The rules with a code the selection enables for `path`, in their order. Without per-file ignores that is the
    same for every file: found once per selection (a run has a few: its own, a set-aside file's notes)."""
    if not settings.per_file_ignores:
        key = (settings.select, settings.ignore)
        try:
            return _SELECTED[key]
        except KeyError:
            if len(_SELECTED) >= 64:
                _SELECTED.clear()
            found = _SELECTED[key] = tuple(r for r in all_rules() if any(settings.enabled(c) for c in r.codes))
            return found
        except TypeError:  # a selection given as a set (a caller of the API)
            pass
    return tuple(r for r in all_rules() if any(settings.enabled(c, path) for c in r.codes))


def tree_filter(rules: list[type[Rule]], scan: Scan, settings: Settings, step: bool = False) -> list[type[Rule]]:
    """The rules that may still report something once Python's tree of the file is known (engine/scan.py). Where
    the NM199 step runs (`step`), it takes the XLA names no rule reports on, so every rule that may report runs,
    enabled or not: only the predicates that read no selection are asked there (`tree_predicate_any_selection`)."""
    if step:
        return [r for r in rules if not r.tree_predicate_any_selection or r.may_match_tree(scan, settings)]
    return [r for r in rules if r.may_match_tree(scan, settings)]


def lean_needles(rules: list[type[Rule]], project=None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a function or class must hold to matter to these rules (engine/lean.py): (text, names as whole words).
    A rule whose byte pre-filter asks for names (a `NamesPattern`) gives those names, not its triggers; every rule
    gives the words its decisions may rest on far from a trigger (`Rule.words`), and those the project gives it
    (`Rule.project_words`: the attributes a base class in another module compiles)."""
    text, words = {"torch_xla"}, set()
    for r in rules:
        words.update(r.words())
        if project is not None:
            words.update(r.project_words(project))
        if isinstance(r.pattern, NamesPattern):
            words.update(r.pattern.names)
        else:
            text.update(t.decode("latin-1") for t in r.triggers)
    return tuple(sorted(text)), tuple(sorted(words))


def process_python(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    """`rewrite` asks for the new bytes too (and for the findings' status); the findings are the same."""
    source = decode(data)
    result = FileResult(path, old_bytes=data)
    moving = settings.project is not None and settings.project.moving is not None
    present = Present(data, MOVING_TO_NEURON_BYTES if moving else ())
    rules = active_rules(data, settings, path, present)
    step = leftovers.active(present, settings, path)
    # the fix pass reports on the file's torch_xla imports (NM190, NM191) whatever else runs
    tidy = b"torch_xla" in data and (settings.enabled(imports.UNUSED_CODE, path)
                                     or settings.enabled(imports.STRANDED_CODE, path))
    has_markers = MARKER_PREFIX.encode() in data
    may_suppress = MAY_SUPPRESS.search(data) is not None
    if not rules and not step and not tidy and not may_suppress and (not has_markers or not rewrite):
        if has_markers:  # a person's markers, as found, where Python parses the file (as the LibCST pass asks)
            _read(source.text)
            result.findings = marker_findings(source.text, path, settings)
        else:
            _python_accepts(source.text)  # nothing to report, but what Python refuses to compile is still an error
        return result
    tree = None
    if (rules or step or tidy) and TREE_FILTER:  # Python's tree is parsed first anyway: the pre-filter is nearly free
        tree, made = _read(source.text)
        if "scan" not in made:
            made["scan"] = Scan(tree, source.text)
        scan = made["scan"]
        if (step or tidy) and not scan.any_module_under(imports.LEGACY_ROOTS):
            # `"torch_xla" in sys.modules`, a comment: the step reports only what the file imports from torch_xla,
            # and the fix pass's NM190 / NM191 are about those imports; without one, the file is as any other
            if step:
                selected = _selected(settings, path)
                rules = [r for r in rules if r in selected]
            step = tidy = False
        rules = tree_filter(rules, scan, settings, step)  # with the step: its LibCST pass runs fewer rules
    if tree is not None:
        probe = PROBE.get()
        if not step and not tidy and not rules and not has_markers and not may_suppress:
            if rewrite:
                _python_accepts(source.text)  # nothing to write; what Python refuses to compile is still reported
            return result
        notes = NOTES_ONLY.get()
        if notes is not None and not step and not tidy and not rewrite and not has_markers and not may_suppress:
            found = decide_notes(path, source.text, tree, rules, settings, notes, made)  # a set-aside file's notes
            if found is not None:
                result.findings = found
                return result
        if probe is None and not rewrite and not may_suppress:
            # CUDA leftovers, float64, ...; the NM199 step and the fix pass's NM190 / NM191 where they can be sure
            found = decide_on_tree(path, source.text, tree, rules, settings, made, step)
            if found is not None:
                result.findings = found
                return result
        if probe is not None and not step and not may_suppress:  # whether a set-aside file reports more
            rules, sure = probed(rules, probe, tree, source.text, settings, path, has_markers, made)
            if sure is not None:
                raise Reported(sure)
            if not rules and not has_markers and not tidy:
                return result
            found = None if has_markers or rewrite else decide_on_tree(path, source.text, tree, rules, settings,
                                                                           made)
            if found is not None:  # decided on Python's tree: the LibCST pass would stop at its first other code
                other = next((f.code for f in found if f.code not in probe), None)
                if other is not None:
                    raise Reported(other)
                result.findings = found
                return result
    with syntax.session():  # the file's syntax state; LibCST's speed-ups are in place only inside
        module, left_out, whole = parse(source, None if rewrite else lean_needles(rules, settings.project), tree)
        renderer = Renderer()
        new_text = transform(path, source, module, rules, step, settings, rewrite, result, may_suppress, renderer,
                             left_out, whole_tree=whole)
        if not rewrite:
            return result
        try:
            if new_text is not None and new_text != source.text:
                if renderer.code(module) != source.text:
                    raise SourceError("the parser does not give back this file byte for byte, so it cannot be "
                                      "rewritten without changing lines no rule touched; the file was left alone")
                result.new_bytes = source.encode(new_text)
            else:
                _python_accepts(source.text)  # nothing to write; a file Python refuses to compile is still reported
        except SourceError:
            _python_accepts(source.text)  # where Python refuses the original too, its message is the one to give
            raise
    return result


def transform(path: str, source: Source, module: cst.Module, rules: list[type[Rule]], step: bool,
              settings: Settings, rewrite: bool, result: FileResult, may_suppress: bool,
              renderer: Renderer, left_out: tuple[int, int] = (0, 0),
              whole_tree: ast.Module | None = None) -> str | None:
    """Decide, then apply the fixes. Returns the new text where `rewrite` asks for it (None: nothing to write).
    `left_out`: the quotes of the string literals a lean `module` leaves out, `whole_tree`: Python's tree of the
    whole file where `module` is lean (see `parse`)."""
    wanted = {t for r in rules for t in r.node_types()}
    if step:
        wanted.update(leftovers.NODE_TYPES)
    analysis = Analysis(module, wanted=tuple(wanted), record=True)
    ctx = FileContext(path, source, module, analysis, settings, may_suppress=may_suppress, left_out_quotes=left_out,
                      whole_tree=whole_tree)
    decide(ctx, rules, step)
    result.files_read.update(ctx.files_read)
    new_text = None
    if ctx.edits or ctx.required_imports or ctx.required_from or ctx.definitions or "torch_xla" in source.text:
        new_text = fix(ctx, renderer, rewrite)
    if may_suppress and settings.enabled(UNUSED_SUPPRESSION, path):  # after NM190, which a comment may silence
        ctx.decisions += unused_suppressions(ctx)
    markers = marker_findings(source.text, path, settings, status=LEFT if rewrite else None)  # a person's, as found
    result.findings = sorted(_place(module, ctx.decisions, path, rewrite) + markers, key=lambda f: f.sort_key())
    if rewrite:
        result.applied = dict(sorted(_count(ctx.decisions, FIXED).items()))
        marked = [f for f in result.findings if f.status == MARKED or f.code == MARKER_CODE]
        result.manual = marked if new_text is not None and new_text != source.text else []
    return new_text


def decide(ctx: FileContext, rules: list[type[Rule]], step: bool) -> None:
    """Every rule sees the nodes it asked for, in file order, then finishes; then NM199 takes what is left. A rule
    that fails on one node loses what it decided there (its findings are marked instead), not the file."""
    dispatch: dict[type, list] = {}
    instances = [r(ctx) for r in rules]
    for rule in instances:
        for node_type, method in rule.node_types().items():
            dispatch.setdefault(node_type, []).append(getattr(rule, method))
    journal, decisions = ctx.journal, ctx.decisions  # changed in place only: the marks below stay valid
    for occ in ctx.analysis.occurrences:
        handlers = dispatch.get(type(occ.node))
        if handlers is None:
            continue
        ctx.current = occ
        for handler in handlers:
            mark = len(journal), len(decisions)  # inline: this loop runs for every node the rules asked for
            try:
                handler(occ.node)
            except RecursionError:
                raise  # the runner retries the whole file with a deeper stack
            except Exception as exc:
                _failed(ctx, mark, exc)
    ctx.current = None
    for rule in instances:
        _isolated(ctx, rule.finish)
    if step:
        leftovers.report_leftovers(ctx)
    found = vars(ctx.facts).get("paths")  # computed by the first report, if any
    if found is not None and found.multi_backend:
        if found.branches:
            _isolated(ctx, found.mark_branches)
        ctx.required_imports.clear()  # asked for by fixes the paths held back
        ctx.required_from.clear()
        ctx.definitions.clear()


def _isolated(ctx: FileContext, call, *args) -> None:
    mark = ctx.checkpoint()
    try:
        call(*args)
    except RecursionError:
        raise  # the runner retries the whole file with a deeper stack
    except Exception as exc:
        _failed(ctx, mark, exc)


def _failed(ctx: FileContext, mark: tuple[int, int], exc: Exception) -> None:
    """A rule failed: what it decided since `mark` is taken back, and its findings are marked instead."""
    taken = ctx.rollback(mark)
    if not taken and STRICT:
        raise exc  # the test suite's setting: a rule that fails before it reports is a bug to see, not to hide
    for decision in taken:
        ctx.decisions.append(decision)
        ctx.fix_failed(decision, f"rule failed: {type(exc).__name__}")


def fix(ctx: FileContext, renderer: Renderer, rewrite: bool) -> str | None:
    """Apply the decided edits and tidy the imports. The legacy imports the fixed file no longer uses are NM190
    findings (fixed: the tidy-up removes them); `rewrite` also renders the fixed file, which must compile. Where
    the fixed file cannot be built or does not compile, the decision whose edits cause it is found (by halving
    the decisions), its fix dropped and marked, and the rest made."""
    original = renderer.code(ctx.module) if rewrite else None  # first: the new module's untouched statements reuse it
    dropped: set[int] = set()
    while True:
        try:
            new_text, unused, flags = _fixed(ctx, ctx.without(dropped), renderer, rewrite,
                                             original)
            break
        except RecursionError:
            raise
        except Exception as exc:
            if isinstance(exc, SourceError):
                _python_accepts(ctx.source.text)  # where Python refuses the original too, say what Python says
            culprit = _culprit(ctx, renderer, rewrite, original, dropped)
            if culprit is None:
                raise
            dropped.add(culprit)
            reason = "rewrite did not compile" if isinstance(exc, SourceError) else \
                "would call itself" if isinstance(exc, patches.SelfCall) else \
                f"rewrite failed: {type(exc).__name__}"
            ctx.fix_failed(ctx.decisions[culprit], reason)
    if (unused or flags) and ctx.enabled(imports.UNUSED_CODE):
        ctx.decisions += imports.unused_decisions(ctx, unused) + imports.flag_decisions(ctx, flags)
    if ctx.enabled(imports.STRANDED_CODE) and not ctx.facts.paths.multi_backend:  # multi-backend: XLA code stays
        ctx.decisions += imports.stranded_decisions(ctx, unused, flags)
    return new_text


def _fixed(ctx: FileContext, edits, renderer: Renderer, rewrite: bool, original: str | None):
    """(the fixed text or None, the legacy import bindings it no longer uses, those it uses only as availability
    flags: they become torch_neuronx imports); raises where it cannot be made."""
    module, analysis = ctx.module, ctx.analysis
    made: set = set()  # the comment lines the edits write
    origins: dict = {}  # each rebuilt `if` statement -> the `if` it was
    collapse_dead_arms(edits, analysis.parents)
    new_module = apply(module, edits, analysis.parents, made, origins)
    after = Analysis(new_module, reuse=analysis)
    if edits and patches.may_patch(ctx.source.text, analysis.module_scope.bindings):
        patches.self_calls(analysis, after)  # a patched function must not come to call itself
    unused = [b for b in imports.unused_bindings(after) if not _kept_import(ctx, b)]
    if unused and ctx.facts.paths.multi_backend:
        unused = []  # a multi-backend file keeps its XLA code, legacy imports too (engine/paths.py)
    fixed = any(d.status == FIXED for d in ctx.decisions)
    flags = imports.flag_only_bindings(after) if fixed and "torch_xla" in ctx.source.text else []
    if not rewrite:
        return None, unused, flags
    orphaned = imports.orphaned_bindings(analysis, after) if fixed and not ctx.facts.paths.multi_backend else []
    new_module = imports.tidy(new_module, after, unused, ctx.required_imports, ctx.definitions,
                              render=renderer.code, fixed=fixed, flags=flags, made=made, orphaned=orphaned,
                              origins=origins, required_from=ctx.required_from)
    if origins and fixed and not ctx.facts.paths.multi_backend:
        new_module = _merge_same_arms(ctx, analysis, new_module, origins, made, renderer)
    if edits.remove and fixed and not ctx.facts.paths.multi_backend:
        new_module = _drop_dead_definitions(ctx, analysis, new_module, edits, made)
    rendered = renderer.code(new_module)
    if rendered == original:
        return ctx.source.text, unused, flags  # nothing edited (even where the parser does not give the file back)
    new_text = final_newline(ctx.source, rendered)
    validate(new_text)  # Python accepts the result: the file was Python to begin with
    return new_text, unused, flags


def _merge_same_arms(ctx: FileContext, analysis: Analysis, module: cst.Module, origins: dict, made: set,
                     renderer: Renderer) -> cst.Module:
    """An `if` / `elif` / `else` whose arms differed and that the fixes (and the import tidy-up) made the same
    code (`if <torch 2.1>: <torch_xla's checkpoint> else: <torch's>`) becomes its one arm, where its tests have no
    effect (`edits.effect_free`, names resolved in the file as it was) and its arms are common code, not a device
    branch (engine/paths.py keeps the other paths as they are): a reviewer would not keep the dead test.
    The imports only the tests read (`from packaging import version`) go, as the tidy-up takes the imports the
    fixes orphan, and so does a function's variable only the tests read, where its value has no effect
    (`is_pt21 = version.parse(...) >= ...`; ruff's F841 otherwise). Where such a variable is bound otherwise, or an
    import the tidy-up does not take (a guard's) would be left unread, the tests stay."""
    scopes = {s.node: s for s in analysis.scopes}
    paths = ctx.facts.paths
    merge = set()
    partial: dict[cst.CSTNode, cst.CSTNode] = {}  # `if a: X elif b: X else: Y` -> `if a or b: X else: Y`
    for new, old in origins.items():
        if type(analysis.parents.get(old)) is cst.If:
            continue  # an `elif` is its `if`'s
        whole = same_arms(new) is not None
        if whole and same_arms(old) is not None:
            continue  # arms that were the same already stay so
        old_codes: list[str] = []  # the old arms' code, made only where two new arms are the same

        def differed(i: int, old=old, old_codes=old_codes) -> bool:
            if not old_codes:
                old_codes += [generated(cst.Module(body=list(getattr(b, "body", ())))) for b in if_arms(old) or
                              _tested_arms(old)]
            return i + 1 < len(old_codes) and old_codes[i] != old_codes[i + 1]
        joined = None if whole else merged_adjacent_arms(new, differed)
        if not whole and joined is None:
            continue
        arms = if_arms(old) or []
        if any(arm.body and paths.path_of(arm.body[0]) != COMMON for arm in arms):
            continue  # a device branch (`if use_xla:`): engine/paths.py keeps its other paths as they are
        tests = if_tests(old)
        if [generated(t) for t in if_tests(new)] != [generated(t) for t in tests]:
            continue  # the fixes changed a test: a constant one is folded (edits.collapse_dead_arms)
        scope = _scope_of(old, analysis, scopes)
        if all(effect_free(t, lambda e: analysis.qualname(e, scope),
                           lambda name: analysis.lookup(name, scope) is None) for t in tests):
            if whole:
                merge.add(new)
            else:
                partial[new] = joined
    if not merge and not partial:
        return module
    edits = EditSet(merge=merge)
    if partial:  # the tidy-up may have rebuilt an `if` around its blocks (its lines above): find it by its body
        by_body = {id(new.body): joined for new, joined in partial.items()}
        for node in _statements(module):
            if type(node) is cst.If and id(node.body) in by_body:
                joined = by_body[id(node.body)]
                edits.add_replace(node, lambda n, joined=joined: joined.with_changes(leading_lines=n.leading_lines))
    merged = apply(module, edits, None, made)
    if merged is module:
        return module
    after = Analysis(merged, reuse=analysis)  # the statements no edit touched are replayed, not walked
    before = set(_unread_locals(analysis))
    for _ in range(3):  # `is_pt21 = version.parse(...) >= ...`, read only by the tests gone, goes too
        stale = {key for where, key in _unread_locals(after).items() if where not in before}
        if not stale:
            break
        gone = _stale_assignments(after, stale)
        if gone is None:
            return module
        merged = apply(merged, EditSet(remove=gone), None, made)
        after = Analysis(merged, reuse=analysis)
    else:
        return module
    orphaned = imports.orphaned_bindings(analysis, after)
    lost = imports.read_aliases(Analysis(module, reuse=analysis)) - imports.read_aliases(after)
    if lost - {id(b.alias) for b in orphaned}:
        return module  # an import the tests read would stay unread (`xm` of a kept `try: import ...` guard)
    if orphaned:
        merged = imports.tidy(merged, after, [], [], [], render=renderer.code, fixed=False, flags=[], made=made,
                              orphaned=orphaned)
    return merged


# Decorators that only wrap the function they decorate: a def under them registers nothing when it runs.
WRAPPING_DECORATORS = frozenset({"torch.no_grad", "torch.inference_mode", "torch.enable_grad", "functools.wraps",
                                 "functools.lru_cache", "functools.cache", "staticmethod", "classmethod"})
# The methods of a log line (`logger.info(...)`): beside `print`, the calls that only announce something.
ANNOUNCING_METHODS = frozenset({"info", "debug", "warning", "warn"})


def _drop_dead_definitions(ctx: FileContext, analysis: Analysis, module: cst.Module, edits: EditSet,
                           made: set) -> cst.Module:
    """The functions (a `def`, a name bound to a lambda) that only code the fixes removed referred to
    (`def callback(...)` passed to `libneuronxla.register_hlo_snapshot_callback(callback)`) go too, with the
    comment lines right above them, as do, in turn, a function's variables only they read (where the value only
    computes: `capture_steps = [int(s) for s in flags.steps.split(",")]`), and the prints and log lines of a
    block that held such a definition and announce what went (`print("Enabling snapshotting ...")`) where the
    block then holds nothing else. A module-level function goes only from a script (a `__main__` block) no
    module of the project imports, and not where `__all__` names it; a decorator that may register the function
    keeps it."""
    words = _removed_words(edits.remove)
    # what the removals that left a marker did (`register_hlo_snapshot_callback`): a print beside the marker
    # that names it announced it
    marked = [r for r in edits.remove if r in edits.markers or analysis.parents.get(r) in edits.markers]
    removed_words = set().union(*_removed_words(marked).values()) if marked else set()
    defined = {name for scope in analysis.scopes if scope.kind in ("module", "function")
               for name, bindings in scope.bindings.items() if any(b.kind in ("def", "assign") for b in bindings)}
    if not defined & set(words) and not any(line.comment is not None and line.comment.value.startswith(
            MARKER_PREFIX) for line in made):
        return module  # the removed code read no function or variable of the file, and left no marker
    was_read = _read_definitions(analysis)
    project = ctx.settings.project
    # a module-level function may be imported by another module: only in a script (a `__main__` block) that no
    # module of the project imports
    shared = not ctx.facts.program or (project is not None and project.imported_by is not None)
    for _ in range(6):  # a helper, or a variable, only a dead function read is dead in turn
        after = Analysis(module, reuse=analysis)  # the statements no edit touched are replayed
        exported = imports._exported(module)
        dead: set[cst.CSTNode] = set()
        subjects: dict[int, set[str]] = {}  # id of a dead statement's block -> the words of what went there
        read = _read_definitions(after)
        for key, (scope, name) in _definitions(after).items():
            if key not in was_read or key in read or name in exported or _declared_elsewhere(after, name):
                continue
            if scope.kind == "module" and shared:
                continue  # another file may import it
            statements = _definition_statements(after, scope, name)
            if statements is None:
                continue
            for stmt in statements:
                dead.add(stmt)
                block = after.parents.get(stmt)
                subjects.setdefault(id(block), set()).update(words.get(name, set()) | _name_words(name))
        dead |= _announced_removals(after, removed_words, made)
        if not dead:
            return module
        dead |= _announcements(after, dead, subjects)
        dead |= _emptied_ifs(after, dead)
        drop = EditSet(remove=dead)
        for stmt in dead:
            drop.add_replace(stmt, _without_own_comments)
        module = apply(module, drop, None, made)
    return module


def _emptied_ifs(analysis: Analysis, dead: set) -> set[cst.CSTNode]:
    """The `if` statements (with their `elif` / `else`) all of whose statements are dead and whose tests only
    read names: they go whole, with the comment lines right above them, as each level out in turn."""
    out: set[cst.CSTNode] = set()
    while True:
        found = set()
        for stmt in dead | out:
            node = analysis.parents.get(analysis.parents.get(stmt))  # statement -> block -> if / else
            while type(node) is cst.Else or type(node) is cst.If and type(analysis.parents.get(node)) is cst.If:
                node = analysis.parents.get(node)
            if type(node) is not cst.If or node in out or not all(pure(t) for t in if_tests(node)):
                continue
            blocks = if_arms(node) or _tested_arms(node)
            if all(s in dead or s in out or _only_pass(s) for b in blocks for s in getattr(b, "body", ())) and \
                    all(isinstance(b, cst.IndentedBlock) for b in blocks):
                found.add(node)
        if not found:
            return out
        out |= found


def _only_pass(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(type(b) is cst.Pass for b in stmt.body)


def _without_own_comments(stmt: cst.CSTNode) -> cst.CSTNode:
    """`stmt` less the comment lines right above it (they described it); the markers above it and those of
    this run inside it (an `if` whose arms went) stay above it, once each, to stand where it was."""
    lines = list(stmt.leading_lines)
    cut = len(lines)
    while cut and lines[cut - 1].comment is not None:
        cut -= 1
    markers = [line for line in lines[cut:] if line.comment.value.startswith(MARKER_PREFIX)]
    if isinstance(stmt, cst.If):
        inner = [line for node in _walk_lines(stmt) for line in node if line.comment is not None
                 and line.comment.value.startswith(MARKER_PREFIX)]
        seen = {line.comment.value for line in markers}
        for line in inner:
            if line.comment.value not in seen:
                seen.add(line.comment.value)
                markers.append(cst.EmptyLine(indent=True, comment=cst.Comment(line.comment.value)))
    return stmt.with_changes(leading_lines=[*lines[:cut], *markers])


def _walk_lines(node: cst.CSTNode):
    """The comment-line lists inside a compound statement (leading lines of its statements, block footers)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n is not node and hasattr(n, "leading_lines"):
            yield n.leading_lines
        if hasattr(n, "footer"):
            yield n.footer
        stack.extend(children(n))


def _declared_elsewhere(analysis: Analysis, name: str) -> bool:
    """`global name` / `nonlocal name` somewhere in the file: another scope may bind or read it."""
    return any(name in scope.globals or name in scope.nonlocals for scope in analysis.scopes)


def _read_definitions(analysis: Analysis) -> set[tuple]:
    """The keys of the names that some scope of the file reads (the key of their binding scope, name)."""
    keys = _scope_keys(analysis)
    out = set()
    for scope in analysis.scopes:
        for name in scope.reads:
            owner = analysis.lookup(name, scope)
            if owner is not None and id(owner) in keys:
                out.add((keys[id(owner)], name))
    return out


def _scope_keys(analysis: Analysis) -> dict[int, tuple]:
    """A key for the module and each function scope that another Analysis of the file gives the same scope: the
    names of the functions it is nested in, each with its place among the functions of that name beside it."""
    keys: dict[int, tuple] = {}
    counts: dict[tuple, int] = {}
    for scope in analysis.scopes:
        if scope.parent is None:
            keys[id(scope)] = ()
            continue
        parent = keys.get(id(scope.parent))
        if parent is None or scope.kind not in ("function", "class") or not hasattr(scope.node, "name"):
            continue
        name = scope.node.name.value
        nth = counts[(parent, name)] = counts.get((parent, name), -1) + 1
        keys[id(scope)] = (*parent, (scope.kind, name, nth))
    return keys


def _definitions(analysis: Analysis) -> dict[tuple, tuple]:
    """The functions the module and its functions define (not a class's methods): key -> (scope, name)."""
    keys = _scope_keys(analysis)
    out = {}
    for scope in analysis.scopes:
        if scope.kind not in ("module", "function") or id(scope) not in keys:
            continue
        for name, bindings in scope.bindings.items():
            if any(b.kind in ("def", "assign") for b in bindings):
                out[(keys[id(scope)], name)] = (scope, name)
    return out


def _definition_statements(analysis: Analysis, scope, name: str) -> list[cst.CSTNode] | None:
    """The statements that bind `name` in `scope`, where each is a `def` (with decorators that only wrap it and
    defaults with no effect), `name = lambda ...` on a line of its own, or, in a function, `name = <value that
    only computes>` on a line of its own; None otherwise (an import, a parameter, a loop or tuple target)."""
    out = []
    for b in scope.bindings[name]:
        if b.kind == "def" and isinstance(b.node, cst.FunctionDef):
            fn = b.node
            if fn.asynchronous is not None:
                return None
            if any(analysis.qualname(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator, scope)
                   not in WRAPPING_DECORATORS for d in fn.decorators):
                return None
            params = [*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params]
            if any(p.default is not None and not _computes(p.default, analysis, scope) for p in params):
                return None
            out.append(fn)
            continue
        target = analysis.parents.get(b.node)
        assign = analysis.parents.get(target)
        line = analysis.parents.get(assign)
        if b.kind != "assign" or type(target) is not cst.AssignTarget or type(assign) is not cst.Assign \
                or len(assign.targets) != 1 or type(line) is not cst.SimpleStatementLine or len(line.body) != 1:
            return None
        if type(assign.value) is not cst.Lambda and (scope.kind != "function"
                                                     or not _computes(assign.value, analysis, scope)):
            return None
        out.append(line)
    return out


# Builtins that only compute a value from their arguments.
COMPUTING_BUILTINS = frozenset({"int", "str", "float", "bool", "len", "list", "tuple", "set", "dict", "sorted",
                                "range", "min", "max", "abs", "round", "frozenset"})
COMPUTING_METHODS = frozenset({"split", "rsplit", "strip", "lstrip", "rstrip", "lower", "upper", "startswith",
                               "endswith", "join", "replace", "format"})


def _computes(value: cst.CSTNode, analysis: Analysis, scope) -> bool:
    """`value` only computes from what it reads: names, constants, containers, comprehensions, operators, and
    calls of builtins and string methods that compute (or that read versions or the environment)."""
    if effect_free(value, lambda e: analysis.qualname(e, scope), lambda n: analysis.lookup(n, scope) is None):
        return True
    t = type(value)
    if t is cst.Call:
        func = value.func
        builtin = isinstance(func, cst.Name) and func.value in COMPUTING_BUILTINS and analysis.lookup(
            func.value, scope) is None
        method = isinstance(func, cst.Attribute) and func.attr.value in COMPUTING_METHODS
        if not builtin and not (method and _computes(func.value, analysis, scope)):
            return False
        return all(_computes(a.value, analysis, scope) for a in value.args)
    if t in (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString,
             cst.Lambda, cst.Ellipsis):
        return True
    if t is cst.Attribute:
        return _computes(value.value, analysis, scope)
    if t in (cst.List, cst.Tuple, cst.Set):
        return all(_computes(e.value, analysis, scope) for e in value.elements)
    if t in (cst.ListComp, cst.SetComp, cst.GeneratorExp):
        f = value.for_in
        while f is not None:
            if f.asynchronous is not None or not _computes(f.iter, analysis, scope) \
                    or not all(_computes(i.test, analysis, scope) for i in f.ifs):
                return False
            f = f.inner_for_in
        return _computes(value.elt, analysis, scope)
    if t in (cst.BinaryOperation, cst.BooleanOperation):
        return _computes(value.left, analysis, scope) and _computes(value.right, analysis, scope)
    if t is cst.UnaryOperation:
        return _computes(value.expression, analysis, scope)
    if t is cst.Comparison:
        return _computes(value.left, analysis, scope) and all(
            _computes(c.comparator, analysis, scope) for c in value.comparisons)
    return False


def _announcements(analysis: Analysis, dead: set, subjects: dict[int, set[str]]) -> set[cst.CSTNode]:
    """The print / log lines of a block that held a dead definition, where the block holds nothing else once it
    goes and each of them names what went (`print("Enabling snapshotting ...")` beside the callback that a
    removed `register_hlo_snapshot_callback(...)` took)."""
    out: set[cst.CSTNode] = set()
    for block_id, subject in subjects.items():
        stmt = next(iter(s for s in dead if id(analysis.parents.get(s)) == block_id))
        block = analysis.parents.get(stmt)
        rest = [s for s in getattr(block, "body", ()) if s not in dead]
        if rest and all(_announces(analysis, s, subject) for s in rest):
            out.update(rest)
    return out


def _announced_removals(analysis: Analysis, subject: set[str], made: set) -> set[cst.CSTNode]:
    """The print / log lines of a block where a fix removed a call and left its marker, where the block holds
    nothing else and each names what the removed calls did (`print("Enabling HLO snapshots")` beside
    `register_hlo_snapshot_callback(...)`)."""
    out: set[cst.CSTNode] = set()
    if not subject:
        return out
    for node in analysis.parents:
        if type(node) is not cst.IndentedBlock or not node.body:
            continue
        lines = [*node.footer, *(line for stmt in node.body for line in getattr(stmt, "leading_lines", ()))]
        if not any(line in made and line.comment is not None and line.comment.value.startswith(MARKER_PREFIX)
                   for line in lines):
            continue
        if all(_announces(analysis, stmt, subject) for stmt in node.body):
            out.update(node.body)
    return out


def _announces(analysis: Analysis, stmt: cst.CSTNode, subject: set[str]) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or type(stmt.body[0]) is not cst.Expr:
        return False
    call = stmt.body[0].value
    if type(call) is not cst.Call:
        return False
    func = call.func
    if not (isinstance(func, cst.Name) and func.value == "print" or isinstance(func, cst.Attribute)
            and func.attr.value in ANNOUNCING_METHODS):
        return False
    text = " ".join(n.value for n in _strings(call))
    said = {w.lower() for w in re.findall(r"[A-Za-z]+", text)}
    return any(w.startswith(s) for w in said for s in subject)


def _strings(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.SimpleString, cst.FormattedStringText)):
            yield n
        stack.extend(children(n))


def _name_words(name: str) -> set[str]:
    return {w.lower() for w in re.split(r"_|(?<=[a-z])(?=[A-Z])", name) if len(w) >= 4}


def _removed_words(removed) -> dict[str, set[str]]:
    """For each name the removed statements read: the words of the functions they called
    (`register_hlo_snapshot_callback(callback)`: callback -> register, snapshot, callback)."""
    out: dict[str, set[str]] = {}
    for stmt in removed:
        names: set[str] = set()
        called: set[str] = set()
        stack = [stmt]
        while stack:
            n = stack.pop()
            if isinstance(n, cst.Call):
                f = n.func
                called |= _name_words(f.attr.value if isinstance(f, cst.Attribute) else getattr(f, "value", "")
                                      if isinstance(f, cst.Name) else "")
            elif isinstance(n, cst.Name):
                names.add(n.value)
            stack.extend(children(n))
        for name in names:
            out.setdefault(name, set()).update(called)
    return out


def _statements(module: cst.Module):
    """Every statement of the module, in blocks at any depth."""
    stack = list(module.body)
    while stack:
        node = stack.pop()
        yield node
        for block in (getattr(node, "body", None), getattr(getattr(node, "orelse", None), "body", None)):
            if isinstance(block, cst.IndentedBlock):
                stack.extend(block.body)
        if type(getattr(node, "orelse", None)) is cst.If:
            stack.append(node.orelse)
        for handler in getattr(node, "handlers", ()):
            stack.extend(getattr(handler.body, "body", ()))
        final = getattr(node, "finalbody", None)
        if final is not None:
            stack.extend(getattr(final.body, "body", ()))


def _tested_arms(node: cst.If) -> list[cst.BaseSuite]:
    """The blocks of an `if` / `elif` chain with no `else`."""
    arms = [node.body]
    while type(node.orelse) is cst.If:
        node = node.orelse
        arms.append(node.body)
    return arms


def _stale_assignments(analysis: Analysis, stale: set[tuple[int, str]]) -> set[cst.CSTNode] | None:
    """The statements `name = <value with no effect>` that bind the unread variables `stale` (id of the function's
    scope, name), each a line of its own; None where one is bound otherwise (a loop, a tuple, a call in its
    value)."""
    out: set[cst.CSTNode] = set()
    for scope in analysis.scopes:
        for name, bindings in scope.bindings.items():
            if (id(scope), name) not in stale:
                continue
            for b in bindings:
                target = analysis.parents.get(b.node)
                assign = analysis.parents.get(target)
                line = analysis.parents.get(assign)
                if b.kind != "assign" or type(target) is not cst.AssignTarget or type(assign) is not cst.Assign \
                        or len(assign.targets) != 1 or type(line) is not cst.SimpleStatementLine \
                        or len(line.body) != 1 or not effect_free(
                            assign.value, lambda e: analysis.qualname(e, scope),
                            lambda n: analysis.lookup(n, scope) is None):
                    return None
                out.add(line)
    return out


def _scope_of(node: cst.CSTNode, analysis: Analysis, scopes: dict):
    while node is not None and node not in scopes:
        node = analysis.parents.get(node)
    return scopes.get(node, analysis.module_scope)


def _unread_locals(analysis: Analysis) -> dict[tuple[str, str, int], tuple[int, str]]:
    """The variables a function assigns and nothing reads: (function, name, which function of that name in the
    file's order) -> (id of its scope, name). The key matches the same variable in another Analysis of the file."""
    used = set()
    for scope in analysis.scopes:
        for name in scope.reads:
            owner = analysis.lookup(name, scope)
            if owner is not None:
                used.add((id(owner), name))
    out = {}
    seen: dict[str, int] = {}
    for scope in analysis.scopes:
        if scope.kind != "function" or not isinstance(scope.node, cst.FunctionDef):
            continue
        function = scope.node.name.value
        nth = seen[function] = seen.get(function, -1) + 1
        for name, bindings in scope.bindings.items():
            if (id(scope), name) not in used and any(b.kind == "assign" for b in bindings):
                out[(function, name, nth)] = (id(scope), name)
    return out


def _kept_import(ctx: FileContext, binding) -> bool:
    """An unused legacy import whose line silences NM190 (`# noqa: NM190`): neither reported nor removed."""
    if not ctx.may_suppress or not ctx.enabled(imports.UNUSED_CODE):
        return False
    statement = ctx.analysis.parents.get(binding.node)
    return statement is not None and ctx.suppressions.suppresses(statement, imports.UNUSED_CODE)


def _culprit(ctx: FileContext, renderer: Renderer, rewrite: bool, original: str | None,
             dropped: set[int]) -> int | None:
    """The decision whose edits, added to those of the decisions before it, make the fixed file fail; None where
    the file fails without any decision's edits."""
    candidates = sorted({d for d, *_ in ctx.journal if d >= 0 and d not in dropped})

    def fails(excluded) -> bool:
        try:
            _fixed(ctx, ctx.without(dropped | set(excluded)), renderer, rewrite, original)
        except RecursionError:
            raise
        except Exception:
            return True
        return False

    if not candidates or fails(candidates):
        return None
    low, high = 0, len(candidates)  # the first `low` decisions pass together, the first `high` fail
    while high - low > 1:
        middle = (low + high) // 2
        if fails(candidates[middle:]):
            high = middle
        else:
            low = middle
    return candidates[high - 1]


def _count(decisions: list[Decision], status: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in decisions:
        if d.status == status:
            counts[d.code] = counts.get(d.code, 0) + 1
    return counts


def unused_suppressions(ctx: FileContext) -> list[Decision]:
    from neuron_migrate.policy import unused_suppression_message

    out = []
    for comment, code, statement in ctx.suppressions.unused(ctx.module):
        if code == "*" or ctx.enabled(code):
            out.append(Decision(UNUSED_SUPPRESSION, comment, unused_suppression_message(code), False, statement))
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


def _place(module: cst.Module, decisions: list[Decision], path: str, rewrite: bool) -> list[Finding]:
    """The decisions as findings, placed in the original file (with their status where `rewrite` asks)."""
    if not decisions:
        return []
    found = positions.positions_of(module, [(d.node, d.statement) for d in decisions])
    out = []
    for d in decisions:
        pos = found.get(d.node)
        line, col = (pos.start.line, pos.start.column + 1) if pos else (1, 1)
        end = (pos.end.line, pos.end.column + 1) if pos else (None, None)
        if pos and d.offset:  # on the text inside the node (a line of a multi-line string)
            line, col, end = _within(module.code_for_node(d.node), line, col, d.offset)
        out.append(Finding(path, line, col, d.code, d.message, d.fixable, end_line=end[0], end_col=end[1],
                           status=d.status if rewrite else None, held_back=d.held_back or None))
    return out


def _within(code: str, line: int, col: int, span: tuple[int, int]) -> tuple[int, int, tuple[int, int]]:
    """The line, column and end of `span` (offsets into `code`, a node's source starting at `line`, `col`)."""
    def at(offset: int) -> tuple[int, int]:
        before = code[:offset]
        newlines = before.count("\n")
        return line + newlines, col + offset if not newlines else offset - before.rfind("\n")
    start = at(span[0])
    return start[0], start[1], at(span[1])


def marker_findings(text: str, path: str, settings: Settings, others: tuple[str, ...] = (),
                    status: str | None = None) -> list[Finding]:
    """NM900 for each marker in `text`, but those whose code starts with one of `others` (the codes of the other
    handlers of a file kind, which report their own markers); `status`: what `rewrite` did about them (LEFT)."""
    if MARKER_PREFIX not in text or not settings.enabled(MARKER_CODE, path):
        return []
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = MARKER_RE.search(line)
        if m and not (others and m.group(1).startswith(others)):
            info = catalogue.rule(MARKER_CODE)
            out.append(Finding(path, lineno, m.start() + 1, MARKER_CODE,
                               info.format(code=m.group(1), text=m.group(2).strip()),
                               end_line=lineno, end_col=len(line.rstrip()) + 1, status=status))
    return out


def validate(new_text: str) -> None:
    """The rewritten file must compile with Python's own compiler (the caller checks the original where not).

    Re-parsing with LibCST too would cost as much as the first parse; what it could catch, code LibCST cannot
    read back, is covered by the idempotency tests (a second run parses every rewritten file with LibCST)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(new_text, "<rewritten>", "exec", flags=_flags(), dont_inherit=True)  # as strict as an import
    except SyntaxError as exc:
        raise SourceError(f"internal error: the rewrite produced code that does not parse ({exc.msg}, line "
                          f"{exc.lineno}); the file was left alone. Please report this at {ISSUES_URL}") from None
