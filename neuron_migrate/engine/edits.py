"""Apply the edits the rules decided, in one pass over the tree.

Rules never transform trees themselves: they say "replace this node", "remove this statement", "insert
these statements after that one", "put this marker above that statement". The Applier carries them out
bottom-up, so an outer replacement sees the inner ones already made, and keeps what nobody asked to change:
comments above a removed statement move to the next statement (unless they stood right above it and a blank
line parts it from the next one, or they speak of XLA or of a function it called: they headed what is gone),
the comments on and inside it go with it where nothing takes its place and stay as lines of their own above what
does (`removed_comments`), a block left empty gets `pass`, and a test the edits make a constant keeps only the
arm that runs (`collapse_dead_arms`); an `if` whose arms the edits made the same code is its arm (`same_arms`,
decided after the import tidy-up in python.py). A comment line the edits put right below an import (a marker, a kept comment) is set off from it by a blank line where isort and ruff want one
(`_set_off`).
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable, Mapping

import libcst as cst

from neuron_migrate.syntax.codegen import code as generated
from neuron_migrate.syntax.walk import children, node_kind, visit_fields

Replacer = Callable[[cst.CSTNode], cst.CSTNode]

MARKER_PREFIX = "# TODO(neuron-migrate "
MARKER_LIMIT = 100  # characters of a marker comment, indentation aside: it fits the usual line-length limits
_NAME = re.compile(r"`([A-Za-z_][\w.]*\.)([A-Za-z_]\w*)((?:\(\.\.\.\)|\(\))?)`")


def marker_text(code: str, what: str, link: str = "") -> str:
    """`# TODO(neuron-migrate CODE): <what>; neuron-migrate explain CODE`, at most MARKER_LIMIT characters.

    The marker says what to do in a few words and where to read the rest: `explain` prints the long form with
    its link. A `what` too long to fit has its dotted names shortened to their last part, then is cut at a word."""
    head, tail = f"{MARKER_PREFIX}{code}): ", f"; neuron-migrate explain {code}"
    return head + shorten(" ".join(what.split()).rstrip(".;:, "), marker_room(code)) + tail


def marker_room(code: str) -> int:
    """How many characters a marker of `code` has for what it says."""
    return MARKER_LIMIT - len(f"{MARKER_PREFIX}{code}): ") - len(f"; neuron-migrate explain {code}")


def shorten(text: str, room: int) -> str:
    if len(text) <= room:
        return text
    text = _NAME.sub(lambda m: f"`{m.group(2)}{m.group(3)}`", text)
    if len(text) <= room:
        return text
    cut = text[:room - 3].rsplit(" ", 1)[0].rstrip(".;:,( ")
    if cut.count("`") % 2:  # never half a name
        cut = cut[:cut.rindex("`")].rstrip(".;:,( ")
    if cut.count("(") > cut.count(")"):  # nor half a parenthesis
        cut = cut[:cut.rindex("(")].rstrip(".;:,( ")
    clause = max(cut.rfind(": "), cut.rfind("; "), cut.rfind(", "))
    if clause > 0 and len(cut[clause + 2:].split()) < 2:
        cut = cut[:clause]  # nor a clause of one word (`is ignored: use...`): the clauses before it, whole
    return cut + "..."


@dataclass
class EditSet:
    replace: dict[cst.CSTNode, list[Replacer]] = field(default_factory=dict)
    remove: set[cst.CSTNode] = field(default_factory=set)  # small statements or whole statements
    after: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    before: dict[cst.CSTNode, list[cst.BaseStatement]] = field(default_factory=dict)
    markers: dict[cst.CSTNode, list[str]] = field(default_factory=dict)
    unwrap: set[cst.CSTNode] = field(default_factory=set)  # `with` statements replaced by their body
    # `if` statements holding an edit whose test is not a constant: where the edits make it one, the live arm
    fold: set[cst.CSTNode] = field(default_factory=set)
    # `if` statements whose arms the edits made the same, with a test that has no effect: the one arm stays
    merge: set[cst.CSTNode] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.replace or self.remove or self.after or self.before or self.markers or self.unwrap
                    or self.merge)

    def add_replace(self, node: cst.CSTNode, fn: Replacer) -> None:
        self.replace.setdefault(node, []).append(fn)

    def targets(self) -> set[cst.CSTNode]:
        return {*self.replace, *self.remove, *self.after, *self.before, *self.markers, *self.unwrap, *self.merge}

    def add_marker(self, statement: cst.CSTNode, text: str) -> None:
        """One marker per (code, statement): the first one asked for stands for the others."""
        texts = self.markers.setdefault(statement, [])
        if marker_code(text) not in {marker_code(t) for t in texts}:
            texts.append(text)


def marker_code(text: str) -> str | None:
    """The code of a `# TODO(neuron-migrate CODE): ...` comment, None for any other comment."""
    if not text.startswith(MARKER_PREFIX):
        return None
    return text[len(MARKER_PREFIX):].split(")", 1)[0]


def existing_comments(statement: cst.CSTNode, header: tuple = ()) -> list[str]:
    """The comments above `statement`: its own leading lines, and, for the first statement of a module, the
    module's header (LibCST gives the comments above the first statement to the module)."""
    lines = [*header, *getattr(statement, "leading_lines", ())]
    return [line.comment.value for line in lines if line.comment is not None]


def has_marker(statement: cst.CSTNode, code: str, header: tuple = ()) -> bool:
    """Whether a marker of `code` stands above `statement`, among the comment lines between it and the
    statement before it (wherever in that run it sits)."""
    return any(marker_code(c) == code for c in existing_comments(statement, header))


class Applier:
    """Rebuilds the nodes on the paths to the edited ones, bottom-up, as a LibCST transformer would, without
    visiting the subtrees that hold no edit."""

    def __init__(self, edits: EditSet, visit: set[cst.CSTNode], module: cst.Module | None = None,
                 made: set[cst.EmptyLine] | None = None, origins: dict | None = None) -> None:
        self.edits = edits
        # each rebuilt `if` statement -> the `if` of the file as it was (`same_arms`), where the caller asks
        self.origins = origins
        # the comment lines this pass (or an earlier one over the same file, which hands its set on) wrote
        self.made = made if made is not None else set()
        self.first = module.body[0] if module is not None and module.body else None  # its comments: the header
        self.header = tuple(module.header) if module is not None else ()
        self.visit = visit  # the edited nodes and their ancestors; other subtrees are left as they are
        self._dropped: set[cst.CSTNode] = set()
        self._emptied: set[cst.CSTNode] = set()  # blocks whose every statement went: `pass` holds their place

    def rebuild(self, node: cst.CSTNode):
        """`node` (on a path) with its children on paths rebuilt, then its own edits made. In a list of
        statements, a FlattenSentinel result stands for several statements."""
        visit = self.visit
        changes = {}
        for name in visit_fields(type(node)):
            value = getattr(node, name)
            if type(value) in (list, tuple):
                if any(node_kind(type(item)) and item in visit for item in value):
                    items: list = []
                    for item in value:
                        new = self.rebuild(item) if node_kind(type(item)) and item in visit else item
                        if isinstance(new, cst.FlattenSentinel):
                            items.extend(new.nodes)
                        elif new is not cst.RemovalSentinel.REMOVE:
                            items.append(new)
                    changes[name] = tuple(items)
            elif node_kind(type(value)) and value in visit:
                new = self.rebuild(value)
                if new is not value:
                    changes[name] = new
        return self.on_leave(node, node.with_changes(**changes) if changes else node)

    def on_leave(self, original_node, updated_node):
        result = updated_node
        for fn in self.edits.replace.get(original_node, ()):
            result = fn(result)
        if isinstance(original_node, cst.SimpleStatementLine):
            return self._statement(original_node, result)
        if isinstance(original_node, cst.BaseCompoundStatement):
            result = self._statement(original_node, result)
            if self.origins is not None and type(original_node) is cst.If and type(result) is cst.If:
                self.origins[result] = self.origins.get(original_node, original_node)
            return result
        if isinstance(original_node, cst.SimpleStatementSuite):
            return self._suite(original_node, result)
        if isinstance(original_node, (cst.IndentedBlock, cst.Module)):
            return self._block(result)
        return result

    def _statement(self, original, updated):
        edits = self.edits
        dropped = original in edits.remove
        if isinstance(original, cst.SimpleStatementLine) and isinstance(updated, cst.SimpleStatementLine):
            keep = [u for o, u in zip(original.body, updated.body) if o not in edits.remove]
            dropped = dropped or not keep
            if keep and len(keep) != len(updated.body):
                keep[-1] = keep[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
                updated = updated.with_changes(body=keep)
            if not dropped and updated is not original:
                lost = self._made(replaced_comments(original, updated))
                if lost:
                    updated = updated.with_changes(leading_lines=[*updated.leading_lines, *lost])
                updated = _without_stale_comments(original, updated)
        if isinstance(updated, cst.If) and updated.body in self._emptied and (updated.orelse is None or (
                type(updated.orelse) is cst.Else and updated.orelse.body in self._emptied)) \
                and pure(updated.test) and not edits.markers.get(original):
            dropped = True  # `if args.eager: pass` (`else: pass`) says nothing: the test reads names, calls nothing
            # the markers this run put on what the arms held stand where the `if` was
            lifted = self._markers_in(updated.body) + (
                self._markers_in(updated.orelse.body) if updated.orelse is not None else [])
            if lifted:
                updated = updated.with_changes(leading_lines=[*updated.leading_lines, *lifted])
        before = list(edits.before.get(original, ()))
        after = list(edits.after.get(original, ()))
        present = {marker_code(c) for c in existing_comments(original, self.header if original is self.first else ())}
        texts = [t for t in edits.markers.get(original, ()) if marker_code(t) not in present]
        markers = self._made([cst.EmptyLine(indent=True, comment=cst.Comment(t)) for t in texts])
        if not hasattr(updated, "leading_lines"):
            markers = []
        if dropped:
            replacement = [*before, *after]
            # the comments on a statement removed without a replacement described it: they go with it; where
            # statements take its place, they stay as lines above them
            kept = self._made(removed_comments(original)) if replacement else []
            if kept and hasattr(updated, "leading_lines"):
                updated = updated.with_changes(leading_lines=[*updated.leading_lines, *kept])
            if not replacement:
                if markers:
                    updated = updated.with_changes(leading_lines=[*updated.leading_lines, *markers])
                self._dropped.add(updated)  # the enclosing block carries its comments on
                return updated
            replacement[0] = replacement[0].with_changes(leading_lines=[
                *without_xla_comments(list(updated.leading_lines)), *markers, *replacement[0].leading_lines])
            return cst.FlattenSentinel(_isort_gaps(replacement))
        if original in edits.fold and isinstance(updated, cst.If) and constant(updated.test) is not None:
            live = self._live_arm(updated)
            if live is None:  # `if "neuron" == "cpu": ...` with no `else`: nothing of it runs
                self._dropped.add(updated)
                return cst.FlattenSentinel(_isort_gaps([*before, *after])) if before or after else updated
            live[0] = live[0].with_changes(leading_lines=[
                *without_xla_comments(list(updated.leading_lines)), *markers, *live[0].leading_lines])
            return cst.FlattenSentinel(_isort_gaps([*before, *live, *after]))
        if original in edits.merge and isinstance(updated, cst.If) and (kept := same_arms(updated)) is not None:
            kept[0] = kept[0].with_changes(leading_lines=[
                *without_xla_comments(list(updated.leading_lines)), *markers, *kept[0].leading_lines])
            return cst.FlattenSentinel(_isort_gaps([*before, *kept, *after]))
        if original in edits.unwrap and isinstance(updated, cst.With) and isinstance(updated.body, cst.IndentedBlock):
            body = list(updated.body.body)
            header = self._made(_comment_lines([updated.body.header.comment]))
            body[0] = body[0].with_changes(
                leading_lines=[*updated.leading_lines, *header, *markers, *body[0].leading_lines])
            return cst.FlattenSentinel(body)
        if before and hasattr(updated, "leading_lines"):
            # the statement's own comments go above what is inserted before it; its markers stay on it, where
            # the next run looks for them
            before[0] = before[0].with_changes(leading_lines=[*updated.leading_lines, *before[0].leading_lines])
            updated = updated.with_changes(leading_lines=[])
        if markers:
            updated = updated.with_changes(leading_lines=[*updated.leading_lines, *markers])
        if before or after:
            return cst.FlattenSentinel(_isort_gaps([*before, updated, *after]))
        return updated

    def _live_arm(self, updated: cst.If) -> list[cst.BaseStatement] | None:
        """The statements of the arm of `updated` that runs, its test being a constant (an `elif` becomes an
        `if`), or None where none does or it holds nothing (`pass` where the edits emptied it)."""
        if constant(updated.test):
            block = updated.body
        elif type(updated.orelse) is cst.If:
            return [updated.orelse.with_changes(leading_lines=[])]
        elif type(updated.orelse) is cst.Else:
            block = updated.orelse.body
        else:
            return None
        if block in self._emptied:
            return None
        if isinstance(block, cst.SimpleStatementSuite):
            return [cst.SimpleStatementLine(body=[*block.body[:-1],
                                                  block.body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])]
        return list(block.body)  # a comment on the `if` line spoke of its test

    def _suite(self, original, updated):
        keep = [u for o, u in zip(original.body, updated.body) if o not in self.edits.remove]
        if len(keep) == len(updated.body):
            return updated
        emptied = not keep
        if emptied:
            keep = [cst.Pass()]
        keep[-1] = keep[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        updated = updated.with_changes(body=keep)
        if emptied:
            self._emptied.add(updated)
        return updated

    def _markers_in(self, block) -> list[cst.EmptyLine]:
        """The markers made by this run in an emptied block (above its `pass`, or in its footer), once each, as
        lines to stand one level out."""
        lines = [*getattr(block, "footer", ())]
        for stmt in getattr(block, "body", ()):
            lines = [*getattr(stmt, "leading_lines", ()), *lines]
        texts = list(dict.fromkeys(line.comment.value for line in lines if line in self.made
                                   and line.comment is not None and line.comment.value.startswith(MARKER_PREFIX)))
        return self._made([cst.EmptyLine(indent=True, comment=cst.Comment(text)) for text in texts])

    def _made(self, lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
        self.made.update(lines)
        return lines

    def _block(self, updated):
        body = list(updated.body)
        module = isinstance(updated, cst.Module)
        if not any(s in self._dropped for s in body):
            return self._set_off(updated, body, list(updated.footer), module)
        out: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        dropped_before = False
        segments: list[list[cst.EmptyLine]] = []  # the lines above each removed statement of the run
        for stmt in body:
            if stmt in self._dropped:
                lines = without_xla_comments(list(stmt.leading_lines), _called_words(stmt))
                segments.append(lines)
                carried.extend(lines)
                dropped_before = True
                continue
            if dropped_before:
                if stmt.leading_lines and stmt.leading_lines[0].comment is None:
                    carried = [line for segment in segments for line in _without_header(segment)]
                stmt = stmt.with_changes(leading_lines=_merge_lines(carried, stmt.leading_lines, at_start=not out))
                if module and out and isinstance(out[-1], (cst.ClassDef, cst.FunctionDef)):
                    stmt = _two_blank_lines_above(stmt)  # the removed code parted it from a class or function
                segments = []
                carried, dropped_before = [], False
            out.append(stmt)
        if dropped_before:  # the block ends with removed statements: the comments that headed them go too
            carried = [line for segment in segments for line in _without_header(segment)]
        footer = list(updated.footer)
        if any(line.comment is not None for line in carried):
            footer = [*carried, *footer]  # comments of the last statements removed stay, at the block's end
        if module:
            return self._set_off(updated, out, footer, module)
        if not out:
            comments = [line for line in footer if line.comment is not None]
            out = [cst.SimpleStatementLine([cst.Pass()], leading_lines=_strip_blank_start(comments))]
            # its comments are above `pass`; the blank lines among them went with them
            last = max((i for i, line in enumerate(updated.footer) if line.comment is not None), default=-1)
            footer = list(updated.footer[last + 1:])
            emptied = self._set_off(updated, out, footer, module)
            self._emptied.add(emptied)
            return emptied
        return self._set_off(updated, out, footer, module)

    def _set_off(self, updated, body: list, footer: list, module: bool):
        body, footer = _set_off(body, footer, module, self.made)
        if body == list(updated.body) and footer == list(updated.footer):
            return updated
        return updated.with_changes(body=body, footer=footer)


def set_off(module: cst.Module, made: set[cst.EmptyLine]) -> cst.Module:
    """`module` with a blank line above each of the `made` comment lines right below a top-level import (a
    statement inserted after the edits, a new import, can put one there)."""
    if not made:
        return module
    body, footer = _set_off(list(module.body), list(module.footer), True, made)
    if body == list(module.body) and footer == list(module.footer):
        return module
    return module.with_changes(body=body, footer=footer)


def _set_off(body: list, footer: list, module: bool, made: set[cst.EmptyLine]) -> tuple[list, list]:
    """The statements and footer of a block with a blank line above each comment line of `made` right below an
    import line, where isort and ruff (I001) want one: above an import (the comment belongs to it, inside the
    import block), and at module level above anything (the code after the import block is set off from it)."""
    body = list(body)
    for i in range(1, len(body) + 1):
        if not is_import_line(body[i - 1]):
            continue
        if i < len(body):
            if not (module or is_import_line(body[i])):
                continue
            lines = list(body[i].leading_lines)
        elif module:
            lines = footer
        else:
            continue
        if not lines or lines[0] not in made:
            continue
        if i < len(body):
            body[i] = body[i].with_changes(leading_lines=[cst.EmptyLine(indent=False), *lines])
        else:
            footer = [cst.EmptyLine(indent=False), *lines]
    return body, footer


def is_import_line(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom))
                                                             for s in stmt.body)


FUTURE, STDLIB, THIRD_PARTY, FIRST_PARTY = range(4)  # the blocks of a module's imports, in their order


def section(module: str) -> int:
    root = module.split(".")[0]
    if root == "__future__":
        return FUTURE
    return STDLIB if root in sys.stdlib_module_names else THIRD_PARTY


def import_key(statement: cst.CSTNode) -> tuple[int, bool, str] | None:
    """(block, is a `from` import, module) of an import line, as isort orders them; None for other statements."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Import):
        name = generated(small.names[0].name)
        return section(name), False, name.lower()
    if isinstance(small, cst.ImportFrom):
        if small.relative or small.module is None:
            return FIRST_PARTY, True, ""
        name = generated(small.module)
        return section(name), True, name.lower()
    return None


def _isort_gaps(statements: list) -> list:
    """`statements` (what is inserted around a statement, with it) with isort's blank lines between two
    neighbouring import lines: one where the block (standard library, third party, ...) changes, none inside a
    block. Only blank lines are touched: a line with a comment above keeps its own lines."""
    out = list(statements)
    for i in range(1, len(out)):
        a, b = import_key(out[i - 1]), import_key(out[i])
        if a is None or b is None or any(line.comment is not None for line in out[i].leading_lines):
            continue
        gap = [cst.EmptyLine(indent=False)] if a[0] != b[0] else []
        if len(out[i].leading_lines) != len(gap):
            out[i] = out[i].with_changes(leading_lines=gap)
    return out


# Comments about the line itself, for tools: they go with the statement they were on.
PRAGMA = re.compile(r"#\s*(noqa\b|type:\s*ignore|pylint:|pyright:|mypy:|fmt:|isort:|pragma\b|nosec\b|"
                    r"neuron-migrate:|NOQA\b)")
# the lines that join a notebook's cells into one module, and stand in for its IPython lines (files/notebook.py):
# never part of what a removal takes with it
JOIN_LINE = re.compile(r"# @@@ \w+ [cm]\d+$")


# A comment that speaks of the XLA stack (`# XLA: specify the XLA device`, `## xm.mark_step runs the graph`, the
# launcher's `nprocs`, which torchrun now decides): it is no longer true once the statement under it is rewritten
# or removed.
XLA_TALK = re.compile(r"\bxla\b|\btorch_xla\b|\bxm\.|\bxmp\.|\bxrt\b|\bpjrt\b|"
                      r"\b(?:mark_step|optimizer_step|MpDeviceLoader|ParallelLoader|nprocs)\b", re.IGNORECASE)


def _talks_of_xla(comment: cst.Comment | None) -> bool:
    return comment is not None and not marker_code(comment.value) and not PRAGMA.match(comment.value) \
        and XLA_TALK.search(comment.value) is not None


def without_xla_comments(lines: list[cst.EmptyLine], subject: frozenset[str] = frozenset(),
                         names: frozenset[str] = frozenset()) -> list[cst.EmptyLine]:
    """The lines above a statement the rewrite changed or removed, less the comment block right above it (no
    blank line between) where it speaks of XLA, of the `subject` of a statement removed (a word of a function it
    called: `# cache init must happen here` above `xr.initialize_cache(...)`) or of a function the statement
    called and no longer calls, by its name (`names`: `wait_device_ops`, `# Compile the step fn` above
    `torch_xla.compile(self.step_fn)`): every line of it, or most (`# Couple things to note` heading
    a list about `torch_xla.sync()`): it described the code that is gone. A block half of which says something
    else stays whole (cut, its other lines would lose their sense); markers and pragmas always stay."""
    cut = len(lines)
    while cut and lines[cut - 1].comment is not None:
        cut -= 1
    block = lines[cut:]
    if not block or (cut and lines[cut - 1].comment is not None):
        return lines
    if any(marker_code(line.comment.value) or PRAGMA.match(line.comment.value) or JOIN_LINE.match(line.comment.value)
           for line in block):
        return lines  # a marker, a pragma or a notebook's cell boundary in it: the block stays whole
    talking = sum(1 for line in block if _talks(line.comment, subject, names))
    return lines[:cut] if talking * 2 > len(block) else lines


def _talks(comment: cst.Comment, subject: frozenset[str], names: frozenset[str]) -> bool:
    return _talks_of_xla(comment) or _talks_of(comment, subject) or (bool(names) and any(
        re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", comment.value, re.IGNORECASE) for name in names))


_WORD = re.compile(r"[A-Za-z]+")


def _talks_of(comment: cst.Comment, subject: frozenset[str]) -> bool:
    return bool(subject) and not marker_code(comment.value) and not PRAGMA.match(comment.value) \
        and any(word.lower() in subject for word in _WORD.findall(comment.value))


def _called_words(statement: cst.CSTNode) -> frozenset[str]:
    """The words (four letters or more) of the names of the functions a statement calls (`initialize`, `cache`
    for `xr.initialize_cache(...)`); none for a compound statement."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return frozenset()
    return frozenset(w.lower() for name in _called_names(statement) for w in name.split("_") if len(w) >= 4)


def _called_names(statement: cst.CSTNode) -> frozenset[str]:
    """The names (four letters or more: `wait_device_ops`, `compile`) of the functions a statement calls."""
    names: set[str] = set()
    stack: list[cst.CSTNode] = [statement]
    while stack:
        node = stack.pop()
        if type(node) is cst.Call:
            func = node.func
            name = func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""
            if len(name) >= 4:
                names.add(name)
        stack.extend(children(node))
    return frozenset(names)


def _without_stale_comments(original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                            ) -> cst.SimpleStatementLine:
    """`updated` less the comments about XLA above it and on its line, where an edit changed the statement (a
    statement rebuilt along an edit's path holds the same code when the edit was elsewhere, or made nothing)."""
    lines = list(updated.leading_lines)
    kept = without_xla_comments(lines, names=_called_names(original) - _called_names(updated))
    if len(kept) == len(lines) and not _talks_of_xla(updated.trailing_whitespace.comment):
        return updated
    if updated.body == original.body or generated(updated.with_changes(
            leading_lines=(), trailing_whitespace=original.trailing_whitespace)) == generated(
            original.with_changes(leading_lines=())):
        return updated
    return _without_xla_trailer(updated).with_changes(leading_lines=kept)


def _without_xla_trailer(statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    """`device = "neuron"  # or xla` less its comment: a line's own comment about XLA is stale once it changed."""
    trailing = statement.trailing_whitespace
    if not _talks_of_xla(trailing.comment):
        return statement
    return statement.with_changes(trailing_whitespace=trailing.with_changes(
        whitespace=cst.SimpleWhitespace(""), comment=None))


def _two_blank_lines_above(stmt: cst.BaseStatement) -> cst.BaseStatement:
    """`stmt` set off by two blank lines from the class or function above it at module level (PEP 8; pycodestyle's
    E305), where removed statements stood between them."""
    lines = list(stmt.leading_lines)
    blank = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
    if blank >= 2:
        return stmt
    return stmt.with_changes(leading_lines=[*(cst.EmptyLine(indent=False) for _ in range(2 - blank)), *lines])


def removed_comments(statement: cst.CSTNode) -> list[cst.EmptyLine]:
    """The comments on and inside a statement that is removed (`xm.mark_step()  # run the graph`), as lines of
    their own, in order, at the statement's indentation. The lines above it are not among them (they move to the
    next statement), nor pragmas (`# noqa`, `# type: ignore`), which were about the removed line only."""
    return _comment_lines(_own_comments(statement))


def replaced_comments(original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine) -> list[cst.EmptyLine]:
    """The comments inside the parts of a statement an edit replaced (`xm.mark_step(  # sync first` ...), which
    the replacement does not hold: lines of their own above the statement, in order."""
    found = _own_comments(original)
    if not found:
        return []
    remaining: dict[str, int] = {}
    for comment in _own_comments(updated):
        remaining[comment.value] = remaining.get(comment.value, 0) + 1
    lost = []
    for comment in found:
        if remaining.get(comment.value):
            remaining[comment.value] -= 1
        else:
            lost.append(comment)
    return _comment_lines(lost)


def _own_comments(statement: cst.CSTNode) -> list[cst.Comment]:
    """The comments of a statement, in order, less those of the lines above it."""
    found: list[cst.Comment] = []
    above = {id(line) for line in getattr(statement, "leading_lines", ())}
    stack = [child for child in reversed(children(statement)) if id(child) not in above]
    while stack:
        node = stack.pop()
        if type(node) is cst.Comment:
            found.append(node)
        else:
            stack.extend(reversed(children(node)))  # the fast field walk: LibCST's `children` runs a visitor
    return found


def _comment_lines(comments) -> list[cst.EmptyLine]:
    return [cst.EmptyLine(indent=True, comment=cst.Comment(c.value)) for c in comments
            if c is not None and not PRAGMA.match(c.value)]


def _without_header(lines: list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a removed statement less the comments right above it (`# XLA imports` over imports that
    went), where a blank line parts the removed statements from the next one: those comments headed what is gone
    and now describe nothing. Markers stay (a person must still see them), and so do comments a blank line sets
    off from the removed statement."""
    cut = len(lines)
    while cut and lines[cut - 1].comment is not None and not marker_code(lines[cut - 1].comment.value) \
            and not JOIN_LINE.match(lines[cut - 1].comment.value):
        cut -= 1
    return lines[:cut]


def _merge_lines(carried: list[cst.EmptyLine], own: list, at_start: bool) -> list:
    """The lines above a statement whose predecessors were removed: comments stay, blank runs do not grow."""
    if any(line.comment is not None for line in carried):
        merged = [*carried, *own]
    elif any(line.comment is None for line in own):
        merged = list(own)
    else:
        merged = [*carried[:1], *own] if carried else list(own)
    return _strip_blank_start(merged) if at_start else merged


def _strip_blank_start(lines: list) -> list:
    i = 0
    while i < len(lines) and lines[i].comment is None:
        i += 1
    return list(lines[i:])


def apply(module: cst.Module, edits: EditSet,
          parents: Mapping[cst.CSTNode, cst.CSTNode | None] | None = None,
          made: set[cst.EmptyLine] | None = None, origins: dict | None = None) -> cst.Module:
    """The module with the edits made. `parents` (from the module's Analysis) saves a walk over the tree; `made`
    collects the comment lines the edits write (a later pass over the result, the import tidy-up, takes it on);
    `origins`, the `if` statement each rebuilt one was in the file as it was (a later pass takes it on too)."""
    if not edits:
        return module
    return Applier(edits, with_ancestors(module, edits.targets(), parents), module, made,
                   origins).rebuild(module)


def with_ancestors(root: cst.CSTNode, nodes: set[cst.CSTNode],
                   parents: Mapping[cst.CSTNode, cst.CSTNode | None] | None = None) -> set[cst.CSTNode]:
    """`nodes` and every node above them up to `root`. A `parents` map that does not lead a node up to `root`
    (it was made for another tree) is not trusted: the tree is walked instead."""
    parent = parents if parents is not None else _parents(root)
    out: set[cst.CSTNode] = {root}
    for node in nodes:
        while node not in out:
            out.add(node)
            node = parent.get(node)
            if node is None:
                if parents is not None:
                    return with_ancestors(root, nodes)
                break  # not in this tree: nothing to apply there
    return out


def _parents(root: cst.CSTNode) -> dict[cst.CSTNode, cst.CSTNode]:
    parent: dict[cst.CSTNode, cst.CSTNode] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        for child in children(node):
            parent[child] = node
            stack.append(child)
    return parent


def collapse_dead_arms(edits: EditSet, parents: Mapping[cst.CSTNode, cst.CSTNode | None]) -> None:
    """`a if flag else b` whose arms the edits make the same (`syncfree.SGD if f else optim.SGD`, both now
    `optim.SGD`) becomes the arm, where the test has no effect of its own (names, attributes, comparisons of
    them): a reviewer would not keep the dead test, nor ruff (RUF034). Arms that were already the same stay.

    A comparison the edits make one of two literals (`xr.device_type() == "NEURON"`, now `"neuron" == "neuron"`)
    becomes its value (`True`), and an `if` statement or expression whose test the edits make a constant becomes
    its live arm (`Applier._live_arm`); what was a constant already stays."""
    found = []
    for node in edits.targets():
        while node is not None:
            if type(node) in (cst.IfExp, cst.If, cst.Comparison) and node not in found:
                found.append(node)
            node = parents.get(node)
    for node in found:
        if type(node) is cst.Comparison:
            if constant(node) is None:
                edits.add_replace(node, _truth)
        elif type(node) is cst.If:
            if type(parents.get(node)) is not cst.If and constant(node.test) is None:  # an `elif` is its `if`'s
                edits.fold.add(node)
        else:
            differ = generated(node.body) != generated(node.orelse)  # arms that were the same already stay so
            if (differ and pure(node.test)) or constant(node.test) is None:
                edits.add_replace(node, _one_arm if differ else _constant_arm)


def _truth(new: cst.CSTNode) -> cst.CSTNode:
    """`True` / `False` for a comparison the edits made one of two literals (`"neuron" != "cpu"`)."""
    live = constant(new) if type(new) is cst.Comparison else None
    return new if live is None else cst.Name(str(live), lpar=new.lpar, rpar=new.rpar)


def _one_arm(new: cst.CSTNode) -> cst.CSTNode:
    """The arm of an `a if test else b` the edits made constant or made the same with a test that reads only."""
    if type(new) is cst.IfExp and constant(new.test) is None and generated(new.body) == generated(new.orelse) \
            and pure(new.test):
        return _arm(new, new.body)
    return _constant_arm(new)


def _constant_arm(new: cst.CSTNode) -> cst.CSTNode:
    if type(new) is not cst.IfExp or constant(new.test) is None:
        return new
    return _arm(new, new.body if constant(new.test) else new.orelse)


def _arm(new: cst.IfExp, arm: cst.BaseExpression) -> cst.BaseExpression:
    if new.lpar and "\n" in generated(arm):  # the parentheses held the lines together
        return arm.with_changes(lpar=new.lpar, rpar=new.rpar)
    return arm


def constant(test: cst.BaseExpression) -> bool | None:
    """The truth of a test that reads nothing (`"neuron" == "neuron"`, `True`, `not False`), or None."""
    if isinstance(test, cst.Name) and test.value in ("True", "False"):
        return test.value == "True"
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = constant(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.BooleanOperation):
        left, right = constant(test.left), constant(test.right)
        if left is None or right is None:
            return None
        return (left and right) if isinstance(test.operator, cst.And) else (left or right)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
        left, right = test.left, test.comparisons[0].comparator
        if type(left) is cst.SimpleString and type(right) is cst.SimpleString:
            same = left.evaluated_value == right.evaluated_value
            return same if isinstance(test.comparisons[0].operator, cst.Equal) else not same
    return None


def pure(test: cst.BaseExpression) -> bool:
    """`test` only reads names and attributes and compares or combines them (no call, no subscript): dropping it
    changes nothing the program does."""
    if isinstance(test, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(test, cst.Attribute):
        return pure(test.value)
    if isinstance(test, (cst.List, cst.Tuple)):
        return all(pure(e.value) for e in test.elements)
    if isinstance(test, cst.UnaryOperation):
        return pure(test.expression)
    if isinstance(test, (cst.BooleanOperation, cst.BinaryOperation)):
        return pure(test.left) and pure(test.right)
    if isinstance(test, cst.Comparison):
        return pure(test.left) and all(pure(c.comparator) for c in test.comparisons)
    return False


# Calls a test may make and still be dropped with the `if` whose arms are the same (`same_arms`): they read
# versions, the environment and attributes, and change nothing.
EFFECT_FREE_CALLS = frozenset({
    "packaging.version.parse", "packaging.version.Version", "pkg_resources.parse_version",
    "pkg_resources.packaging.version.parse", "distutils.version.LooseVersion", "distutils.version.StrictVersion",
    "looseversion.LooseVersion", "importlib.metadata.version", "importlib_metadata.version", "os.environ.get",
    "os.getenv", "platform.python_version",
})
EFFECT_FREE_BUILTINS = frozenset({"int", "str", "float", "bool", "tuple", "len", "hasattr", "isinstance", "getattr"})
STRING_CALLS = frozenset({"str", "os.environ.get", "os.getenv", "importlib.metadata.version",
                          "importlib_metadata.version", "platform.python_version"})
STRING_METHODS = frozenset({"split", "rsplit", "startswith", "endswith", "lower", "upper", "strip", "lstrip", "rstrip"})


def if_arms(node: cst.If) -> list[cst.BaseSuite] | None:
    """The blocks of an `if` / `elif` ... / `else` chain in order; None where it has no `else`."""
    arms: list[cst.BaseSuite] = []
    while True:
        arms.append(node.body)
        if type(node.orelse) is cst.If:
            node = node.orelse
        elif type(node.orelse) is cst.Else:
            return [*arms, node.orelse.body]
        else:
            return None


def if_tests(node: cst.If) -> list[cst.BaseExpression]:
    tests = [node.test]
    while type(node.orelse) is cst.If:
        node = node.orelse
        tests.append(node.test)
    return tests


def _arm_statements(block: cst.BaseSuite) -> list[cst.BaseStatement]:
    if isinstance(block, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=[*block.body[:-1],
                                              block.body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)])]
    return list(block.body)


def _arm_code(block: cst.BaseSuite) -> str:
    return generated(cst.Module(body=_arm_statements(block)))  # its `.code`


def same_code(codes: list[str]) -> bool:
    """The texts are one program: the same text, or the same Python tree (comments and layout aside)."""
    if len(set(codes)) == 1:
        return True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return len({ast.dump(ast.parse(c)) for c in codes}) == 1
    except (SyntaxError, ValueError, RecursionError):
        return False


def same_arms(node: cst.If) -> list[cst.BaseStatement] | None:
    """The statements every arm of an `if` / `elif` / `else` chain runs, where all its arms are the same code:
    the first arm where their text is the same, else the `else` arm (the fallback, with its own comments).
    None where they differ, where there is no `else`, where another arm holds a marker the kept one has not, or
    where the arm is only `pass`."""
    arms = if_arms(node)
    if arms is None:
        return None
    codes = [_arm_code(a) for a in arms]
    if not same_code(codes):
        return None
    kept = _arm_statements(arms[0] if len(set(codes)) == 1 else arms[-1])
    markers = [{line.strip() for line in code.splitlines() if line.strip().startswith(MARKER_PREFIX)} for code in codes]
    if not set().union(*markers) <= markers[0 if len(set(codes)) == 1 else -1]:
        return None  # a marker in another arm (what the fix left for a person there) would be lost
    if all(isinstance(s, cst.SimpleStatementLine) and all(type(b) is cst.Pass for b in s.body) for s in kept):
        return None
    return kept


def merged_adjacent_arms(node: cst.If, differed: Callable[[int], bool]) -> cst.If | None:
    """`if a: X elif b: X else: Y` as `if a or b: X else: Y`: each run of tested arms (not the `else`) that are the
    same code, two of which differed before the fixes (`differed(i)`: arms i and i + 1), becomes one arm whose test
    is theirs joined by `or` (in order, so the same test decides); the first arm's block stays. None where
    no such run exists or where the arm dropped holds a marker the kept one has not."""
    chain: list[cst.If] = [node]
    while type(chain[-1].orelse) is cst.If:
        chain.append(chain[-1].orelse)
    codes = [_arm_code(link.body) for link in chain]
    groups: list[list[int]] = [[0]]
    for i in range(1, len(chain)):
        if same_code([codes[i - 1], codes[i]]) and _markers(codes[i]) <= _markers(codes[groups[-1][0]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    # a run the author wrote the same (no two of its arms differed before the fixes) stays as written
    groups = [part for g in groups for part in ([g] if any(differed(i) for i in g[:-1]) else [[i] for i in g])]
    if all(len(g) == 1 for g in groups):
        return None
    tail = chain[-1].orelse  # the `else`, or None
    rebuilt = tail
    for g in reversed(groups):
        first = chain[g[0]]
        test = _or_test([chain[i].test for i in g])
        rebuilt = first.with_changes(test=test, orelse=rebuilt)
    return rebuilt


def _markers(code: str) -> set[str]:
    return {line.strip() for line in code.splitlines() if line.strip().startswith(MARKER_PREFIX)}


def _or_test(tests: list[cst.BaseExpression]) -> cst.BaseExpression:
    def operand(t: cst.BaseExpression) -> cst.BaseExpression:
        if (isinstance(t, (cst.IfExp, cst.Lambda, cst.NamedExpr)) or isinstance(t, cst.BooleanOperation)
                and isinstance(t.operator, cst.And)) and not t.lpar:
            return t.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # `(a and b) or c` reads plainly
        return t
    out = operand(tests[0])
    for t in tests[1:]:
        out = cst.BooleanOperation(left=out, operator=cst.Or(), right=operand(t))
    return out


def effect_free(test: cst.BaseExpression, qualname: Callable[[cst.CSTNode], str | None],
                builtin: Callable[[str], bool]) -> bool:
    """`test` reads names, attributes, constants and subscripts, compares and combines them, and calls only
    functions that read versions or the environment (`EFFECT_FREE_CALLS`, resolved by `qualname`; the builtins
    of `EFFECT_FREE_BUILTINS` where `builtin` says the name is not the file's own; string methods on a version
    or environment string): dropping it changes nothing the program does."""
    def free(e: cst.CSTNode) -> bool:
        t = type(e)
        if t in (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.Ellipsis):
            return True
        if t is cst.ConcatenatedString:
            return True
        if t is cst.Attribute:
            return free(e.value)
        if t in (cst.Tuple, cst.List):
            return all(type(el) is cst.Element and free(el.value) for el in e.elements)
        if t is cst.UnaryOperation:
            return free(e.expression)
        if t in (cst.BooleanOperation, cst.BinaryOperation):
            return free(e.left) and free(e.right)
        if t is cst.Comparison:
            return free(e.left) and all(free(c.comparator) for c in e.comparisons)
        if t is cst.Subscript:
            return free(e.value) and all(_free_slice(s.slice, free) for s in e.slice)
        if t is cst.Call:
            return _free_call(e, free)
        return False

    def _free_call(call: cst.Call, free) -> bool:
        if any(a.star for a in call.args) or not all(free(a.value) for a in call.args):
            return False
        func = call.func
        if type(func) is cst.Name and func.value in EFFECT_FREE_BUILTINS and builtin(func.value):
            if func.value == "getattr":
                return len(call.args) >= 2 and type(call.args[1].value) is cst.SimpleString
            return True
        if qualname(func) in EFFECT_FREE_CALLS:
            return True
        return type(func) is cst.Attribute and func.attr.value in STRING_METHODS and stringy(func.value)

    def stringy(e: cst.CSTNode) -> bool:
        """A version or environment string (or a part of one)."""
        t = type(e)
        if t in (cst.SimpleString, cst.ConcatenatedString):
            return True
        if t is cst.Attribute:
            return e.attr.value == "__version__" and free(e.value)
        if t is cst.Subscript:
            return free(e) and (stringy(e.value) or (type(e.value) is cst.Call and type(e.value.func) is cst.Attribute
                                                     and e.value.func.attr.value in ("split", "rsplit")
                                                     and free(e.value)))
        if t is cst.Call and free(e):
            func = e.func
            if type(func) is cst.Name:
                return func.value == "str" and builtin("str")
            if qualname(func) in STRING_CALLS:
                return True
            return type(func) is cst.Attribute and func.attr.value in STRING_METHODS - {"startswith", "endswith"} \
                and stringy(func.value)
        return False

    return free(test)


def _free_slice(s: cst.BaseSlice, free) -> bool:
    if type(s) is cst.Index:
        return getattr(s, "star", None) is None and free(s.value)
    return all(part is None or free(part) for part in (s.lower, s.upper, s.step))
