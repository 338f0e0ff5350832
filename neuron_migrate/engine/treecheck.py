"""A `check` of a CUDA helper moving to neuron, decided on Python's tree (NM320, NM322, NM323).

A module that a program moving to neuron reaches, and that never names torch_xla itself (Megatron's helpers, a
training script's utilities), reports the CUDA code it still holds: `x.cuda()` (`CudaMethod`, NM320) and the
`torch.cuda` API (`TorchCudaApi`, NM322 / NM323). Deciding that on LibCST's tree costs a LibCST parse, a scope
analysis and a fix pass per file, for findings on calls and dotted names that Python's tree (which the engine has
parsed anyway) holds as well.

`decide` takes those decisions on Python's tree, with the rules' own tables and message fields, for a `check`
(not a rewrite) of a file where they are the LibCST pass's decisions by construction, and returns None where it
cannot be sure, for the LibCST pass to decide as before:

- Every rule left to run after the pre-filters is one of the two, and the file has no markers and no suppression
  comments (process_python asks only then), so nothing else can come out of the pass.
- The file imports torch_xla and torch_neuronx nowhere and spells no use of the neuron device: with no legacy import
  there is no NM190 / NM191 for the fix pass to add, and the file is no neuron library and holds no neuron switch.
  With no monkeypatching (`patches.may_patch`) no fix can be refused for making a patched function call itself.
- The code paths are engine/paths.py's, built on Python's tree (engine/treepaths.py): a finding is reported where
  they let the CUDA family act (`Paths.allows`), so a CUDA branch (`if torch.cuda.is_available():`) keeps its
  code, and a file that tests for XLA reports only its XLA path's. A file that uses the XLA device and CUDA side
  by side (`paths._two_devices`) reports nothing, nor does one no moving program reaches.
- Names resolve through the scopes of Python's tree (engine/treenames.py), as the rules resolve them through
  LibCST's; no name is bound to `torch.cuda` or below (a name alone, or a definition's own name, could then be an
  API reference only LibCST's tree holds).
- Each reported node stands alone (not in parentheses, not inside an f-string), and the code a message quotes is
  LibCST's code for its node (`_Decisions.code`). Reported nodes may nest (`f(x.cuda()).cuda()`,
  `torch.cuda.current_stream().cuda()`): the LibCST pass applies such edits inside out, and no fix of the two
  rules can fail in `check`, which stops before rendering the fixed file.

`tests/test_treecheck.py` holds it to the LibCST pass on every fixture and example, as a helper of a moving program
and as a file of its own, and on generated files.
"""

from __future__ import annotations

import ast
import keyword
import re

from neuron_migrate.engine import lean, notes, paths
from neuron_migrate.engine.facts import MAIN_BLOCK, NEURON_DEVICE_USE
from neuron_migrate.engine.names import Scope
from neuron_migrate.engine.notes import _LONE_CR, Unsure, _dotted
from neuron_migrate.engine.paths import CUDA_LEFTOVER
from neuron_migrate.engine.patches import may_patch
from neuron_migrate.engine.treenames import TreeNames, exact_identifiers
from neuron_migrate.engine.treepaths import TreePaths
from neuron_migrate.findings import Finding

# words before a `(` that make it parentheses, not a call's: keywords, and the soft ones (`match (x):`)
_KEYWORDS = frozenset(keyword.kwlist) - {"True", "False", "None"} | {"match", "case", "type"}
_ATTRIBUTE_REST = re.compile(r"[ \t\f\r\n\\]*\.[ \t\f\r\n\\]*cuda")  # `<value> . cuda`, the value unparenthesized


class _Decisions:
    """The two rules' decisions on one walked tree, each reporting what the rule would, with its message fields."""

    def __init__(self, path: str, tree: notes._Tree, module: ast.Module, settings) -> None:
        self.path, self.tree, self.module, self.settings = path, tree, module, settings
        self._names: TreeNames | None = None  # the scopes of Python's tree, made where they are needed
        self._scopes: dict[int, Scope] | None = None
        self.paths: TreePaths | None = None  # the code paths, where the file tests for a backend
        self.found: list[tuple[str, ast.AST, dict, None]] = []
        self._quote: str | None = None
        self._torch: str | None = None

    def report(self, code: str, node: ast.AST, **fields) -> None:
        if self.paths is not None and not self.paths.allows(CUDA_LEFTOVER, node):
            return  # `ctx.report`: the code paths keep the family off this node (a CUDA branch, a file's XLA-less code)
        if id(node) in self.tree.in_fstring:
            raise Unsure("inside an f-string")  # where Python's places are its own before 3.12
        self.alone(node)
        self.found.append((code, node, fields, None))

    def alone(self, node: ast.AST) -> None:
        """Raises Unsure where `node` may be in parentheses (LibCST's node would hold them, and be placed with
        them): the nearest characters around it, past white space and line breaks, are `(` and `)`, and that `(`
        opens no call (`f(x)`: a name, a closing bracket or a string before it). A comment on the way, or a
        keyword before the `(` (`if(x)`), leaves it unsure."""
        lines = self.tree._lines()
        line, at = node.lineno - 1, self.tree.column(node.lineno, node.col_offset)
        before = self._near(lines, line, at, -1)
        if before is None or lines[before[0]][before[1]] != "(":
            return
        line, at = node.end_lineno - 1, self.tree.column(node.end_lineno, node.end_col_offset)
        after = self._near(lines, line, at, 1)
        if after is None or lines[after[0]][after[1]] != ")":
            return
        head = lines[before[0]][:before[1]].rstrip(" \t\f")
        start = len(head)
        while start and (head[start - 1].isalnum() or head[start - 1] == "_"):
            start -= 1
        word = head[start:]
        if (word and word not in _KEYWORDS) or (head and head[-1] in ")]'\""):
            return  # the parentheses of a call, around its one argument
        raise Unsure("in parentheses")

    @staticmethod
    def _near(lines: list[str], line: int, at: int, step: int) -> tuple[int, int] | None:
        """The place (line, column) of the nearest character before (`step` -1) or after (1) column `at` of `line`
        that is no white space, no line continuation and no comment; None at either end of the file. Raises
        Unsure where a line before the node holds a `#` (the end of that line may be a comment)."""
        first = True
        while 0 <= line < len(lines):
            text = lines[line].rstrip("\r\n")
            if step < 0:
                if not first and "#" in text:
                    raise Unsure("a comment before the node")
                code = text[:at].rstrip(" \t\f\\")
                if code:
                    return line, len(code) - 1
            else:
                rest = text[at:]
                code = rest.lstrip(" \t\f")
                if code and code[0] not in "#\\":
                    return line, at + len(rest) - len(code)
            first = False
            line += step
            at = len(lines[line].rstrip("\r\n")) if step < 0 and line >= 0 else 0
        return None

    # -- what the rules ask of the file ------------------------------------------------------------------------
    def moving(self) -> bool:
        """`facts.moving_to_neuron`, where the file imports neither torch_xla nor torch_neuronx and spells no use
        of the neuron device (the preconditions): a moving program reaches it."""
        project = self.settings.project
        return project is not None and project.moving is not None

    def qualname(self, expr: ast.AST, under: str | None = None) -> str | None:
        """`ctx.qualname(expr)`: None where no import in any scope binds the chain's first name; with `under`,
        also where no import could make the chain a name under that module."""
        parts = _dotted(expr)
        quals = self.tree.imported.get(parts[0]) if parts else None
        if not quals:
            return None
        if under is not None and not any(".".join([q, *parts[1:]]).startswith(under) for q in quals):
            return None
        try:
            return self.tree.qualname(expr)  # the module scope's bindings, where no other scope binds the name
        except Unsure:
            pass
        if self._scopes is None:
            self._scopes = {id(node): scope for node, scope in self.names().names}
        return self.names().qualname(expr, self._scopes[id(expr)])

    def names(self) -> TreeNames:
        if self._names is None:
            self._names = TreeNames(self.module, self.tree.text)
        return self._names

    def string(self, value: str) -> str:
        """`ctx.string(value)` in the file's quotes (`facts.quote`, over the whole file)."""
        if self._quote is None:
            tally = lean._quote_tally(self.module, self.tree._lines())
            if tally is None:
                raise Unsure("a string literal inside an f-string's braces")
            self._quote = "'" if tally[0] > tally[1] else '"'
        return f"{self._quote}{value}{self._quote}"

    def target(self):
        """The file's spellings of the target device (`rules.target.Target`), which ask this object what they ask
        of a FileContext: the settings, the name of torch and the file's quotes."""
        from neuron_migrate.rules.target import Target

        return Target(self)

    def module_ref(self, module: str, alias: str | None = None, scope=None) -> str:
        if module != "torch" or alias is not None or scope is not None:
            raise Unsure(f"a reference to {module}")
        return self.torch()

    def torch(self) -> str:
        """`ctx.module_ref("torch")`: the one name the module scope binds to torch, bound nowhere else."""
        if self._torch is None:
            names = [n for n, quals in self.tree.imported.items() if "torch" in quals]
            if len(names) != 1:
                raise Unsure("torch is imported under several names, or not at all")
            name = names[0]
            if self.tree.qualname(ast.Name(id=name)) != "torch":
                raise Unsure("the name torch is imported as is not torch everywhere")
            self._torch = name
        return self._torch

    def plain(self, value: ast.expr, call: ast.Call, before: str = "") -> str:
        """LibCST's code for `value`, an argument of `call`, which must not be in parentheses (`before`: the text
        that leads to it)."""
        if "(" in before:
            raise Unsure("a value in parentheses")
        return self.code(self.tree.segment(value), value, call)

    def code(self, text: str, node: ast.AST, call: ast.Call) -> str:
        """LibCST's code for an expression whose source is `text` (`patterns.code`): the text itself, but over
        several lines, where it leaves out the indentation of the block around it from each line that starts
        with it (the rest of the line is the node's; an indentation of its own, less deep, stays)."""
        if "\n" not in text:
            return text
        if "\r" in text or "\\\n" in text:
            raise Unsure("a line continuation or a Windows line end")  # LibCST writes its own
        for inner in ast.walk(node):
            if inner.__class__ in (ast.Constant, ast.JoinedStr) and inner.end_lineno != inner.lineno:
                raise Unsure("a string over several lines")  # its lines are its own
        statement = self.tree.statement[id(call)]
        line = self.tree.line_text(statement.lineno)
        indent = line[:len(line) - len(line.lstrip(" \t\f"))]
        first, *rest = text.split("\n")
        return "\n".join([first, *(r[len(indent):] if r.startswith(indent) else r for r in rest)])

    def value_code(self, call: ast.Call) -> str:
        """LibCST's code for the value of `call`'s `func` (`x` of `x.cuda()`, `(a + b)` with its parentheses)."""
        func, value = call.func, call.func.value
        rest = self._between((value.end_lineno, value.end_col_offset), (func.end_lineno, func.end_col_offset))
        if "#" in rest:
            raise Unsure("a comment before the attribute")
        cut = rest.rfind(")") + 1
        opened = self._between((func.lineno, func.col_offset), (value.lineno, value.col_offset))
        if (opened.strip("( \t\f\r\n") or rest[:cut].strip(") \t\f\r\n") or "#" in opened
                or not _ATTRIBUTE_REST.fullmatch(rest[cut:])):
            raise Unsure("a value LibCST may read otherwise")
        return self.code(opened + self.tree.segment(value) + rest[:cut], value, call)

    # CudaMethod: `x.cuda()` -> `x.to("neuron")`
    def cuda_method(self) -> None:
        for call in self.tree.calls:
            func = call.func
            if func.__class__ is not ast.Attribute or func.attr != "cuda":
                continue
            if self.qualname(func.value) is not None:
                continue  # `torch.cuda(...)` or a module attribute
            positional, named = call.args, {k.arg: k for k in call.keywords}
            if any(a.__class__ is ast.Starred for a in positional) or None in named \
                    or set(named) - {"device", "non_blocking"} or len(positional) > (0 if "device" in named else 1):
                continue
            index = named["device"].value if "device" in named else positional[0] if positional else None
            target = self._target(index)
            if target is None:
                continue
            extra = ""
            blocking = named.get("non_blocking")
            if blocking is not None:
                start = (blocking.lineno, blocking.col_offset)
                lead = self._between(start, (blocking.value.lineno, blocking.value.col_offset))
                extra = f", non_blocking={self.plain(blocking.value, call, lead)}"
            fixed = f"{self.value_code(call)}.to({target}{extra})"
            self.report("NM320", call, call=self.tree.short(call), fixed=fixed)

    def _target(self, index: ast.expr | None) -> str | None:
        if index is None:
            return self.string("neuron")
        if index.__class__ is ast.Constant and index.value.__class__ is int:
            return self.string(f"neuron:{self.tree.segment(index)}")
        if index.__class__ is ast.Name or (index.__class__ is ast.Constant and (
                index.value is None or index.value.__class__ is bool)):  # `True` and `None` are names to LibCST
            return self.target().device(index.id if index.__class__ is ast.Name else repr(index.value))
        return None

    def _between(self, start: tuple[int, int], end: tuple[int, int]) -> str:
        """The source text between two places (line, UTF-8 offset) of the file."""
        return lean.between(self.tree._lines(), start, end)

    # TorchCudaApi: `torch.cuda.<f>` -> `torch.neuron.<f>` where TorchNeuron has the namesake; a finding otherwise
    def torch_cuda_api(self) -> None:
        from neuron_migrate.rules.cuda import CUDA_AUTOCAST, NEURON_NAMESAKES

        tree = self.tree
        chained = {id(a.value) for a in tree.attributes}  # a part of a longer chain: not a reference of its own
        calls = {id(c.func): c for c in tree.calls}
        project = self.settings.project
        patched = project.cuda_patched if project is not None else ()
        for node in tree.attributes:
            if id(node) in chained:
                continue
            qual = self.qualname(node, "torch.cuda.")
            if qual is None or not qual.startswith("torch.cuda.") or qual in CUDA_AUTOCAST:
                continue
            if node.ctx.__class__ is not ast.Load:
                raise Unsure("a torch.cuda name bound or deleted")
            name = qual[len("torch.cuda."):]
            if name.split(".")[0] in patched:
                continue  # the program redefines it: its own function stays
            spelled = ".".join(_dotted(node))
            if tree.segment(node) != spelled:
                raise Unsure("a dotted name written with spaces, lines or parentheses")
            if name in NEURON_NAMESAKES:
                if name == "set_device":
                    call = calls.get(id(node))
                    if call is not None and len(call.args) == 1 and not call.keywords and (
                            call.args[0].__class__ is ast.Name or (call.args[0].__class__ is ast.BinOp
                                                                   and call.args[0].op.__class__ is ast.Mod)):
                        raise Unsure("the device of a global rank")  # TorchCudaApi._global_rank_index
                self.report("NM322", node, name=spelled, fixed=self.target().device_module(name))
            else:
                self.report("NM323", node, name=spelled, qualname="" if spelled == qual else f" (`{qual}`)")


_RULES = {"CudaMethod": "cuda_method", "TorchCudaApi": "torch_cuda_api"}


def decide(path: str, text: str, tree: ast.Module, rules: list, settings, made: dict | None = None) \
        -> list[Finding] | None:
    """The findings of a `check` of the file from the `rules` the pre-filters left, or None where the LibCST pass
    must decide (see the module docstring). `made`: what the passes over one file share (python.Shared)."""
    if not rules or any(r.__name__ not in _RULES for r in rules) or _LONE_CR.search(text):
        return None

    def run() -> list[Finding] | None:
        walked = notes.walk(tree, text, made)
        if any(notes._legacy_import(node, paths.XLA_PACKAGES) for node in walked.imports):
            return None  # a legacy import: XLA may be optional, and the fix pass reports on it
        from neuron_migrate.rules.target import ACCELERATOR

        if NEURON_DEVICE_USE.search(text) or may_patch(text, walked.module) or settings.device_style == ACCELERATOR:
            return None  # (the portable style's spellings define a device variable)
        if any(q == "torch.cuda" or q.startswith("torch.cuda.") for quals in walked.imported.values() for q in quals):
            return None
        decisions = _Decisions(path, walked, tree, settings)
        if not decisions.moving() or paths._two_devices(text):
            return []  # the CUDA family reports nothing: a GPU program's code, or a CUDA path on purpose
        if not exact_identifiers(text):
            return None  # Python's tree holds an identifier as it normalized it, LibCST's as spelled
        if not walked.tests_nothing():  # else every statement is on the common path, and the family acts there
            project = settings.project
            decisions.paths = TreePaths(decisions.names(), bool(project is not None and project.entry)
                                        or MAIN_BLOCK.search(text) is not None)  # `facts.program`
            if not decisions.paths.exact:
                return None
        for rule in rules:
            getattr(decisions, _RULES[rule.__name__])()
        codes = frozenset(c for r in rules for c in r.codes)
        return notes._findings(path, walked, decisions.found, settings, codes)

    return notes.sure(run)
