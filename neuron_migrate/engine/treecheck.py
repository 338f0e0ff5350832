"""A `check` of a file that reads torch_xla's names only where the ported rules' fixes take them away or their
handled calls keep them (or is asked for no finding a torch_xla import makes), decided on Python's tree: its
device calls and XLA device names (NM101, NM102), its steps and waits (NM103, NM104, NM113), eager mode and a
subclass's eager step (NM103, NM259), a process group's backend (NM201), its ranks (NM203), its rendezvous (NM205),
its CPU copies (NM243), the xser checkpoints it chooses (NM222) and the imports the fixes leave unread (NM190), its
CUDA leftovers (NM320-NM323), float64 (NM401), the XLA stack's environment variables
(NM403-NM405), torch_neuronx's traces and APIs (NM502-NM505; NM510 where the target keeps the XLA inference path),
its Neuron libraries (NM506, NM524), NxD's inference APIs (NM507; NM510), optimum-neuron's trainer classes (NM508,
NM509), Inf1 code (NM513), trn1 instances (NM520), NxD's tensor-parallel layers where they are marked (NM230) and
the PyTorch APIs the native backend does not run as written (NM301-NM306).

A module that a program moving to neuron reaches, and that never names torch_xla itself (Megatron's helpers, a
training script's utilities), reports the CUDA code it still holds: `x.cuda()` (`CudaMethod`, NM320), CUDA device
names (`CudaDeviceString`, NM321) and the `torch.cuda` API (`TorchCudaApi`, NM322 / NM323). Any file reports
float64 on the device (`Float64`, NM401), the XLA stack's environment variables it sets or reads
(`EnvironmentVariable`, NM403-NM405), torch_neuronx's inference traces and APIs (`NeuronxTrace`), the imports of
the Neuron libraries built on the XLA stack (`NeuronLibrary`), NxD's inference APIs (`NxdInference`),
optimum-neuron's trainer classes (`OptimumNeuronTrainer`), Inf1 code (`Inferentia1`), the trn1 instances it asks
for (`InstanceType`), NxD's tensor-parallel layers (`TensorParallel`) and PyTorch's sparse, FFT, function-transform,
nested, distributions and MX APIs (`UnsupportedApi`). A file whose only torch_xla code is the device it asks for
(a model's helpers: `xm.xla_device()`, `XlaDeviceCall`, NM101) and the steps it marks (`xm.mark_step()`,
`MarkStep`: NM103, NM104, NM113), asks for its rank (`xm.get_ordinal()`, `RankAndWorldSize`: NM203) or waits for
the other processes (`xm.rendezvous("x")`, `Collectives`: NM205), or registers torch_xla's process-group backend
(`ProcessGroup`: NM201), reports those calls and its imports, which their fixes leave unused (NM190); a
converter that writes or reads torch_xla's xser layout where the program chooses it (`Save`, `Load`: NM222) keeps
those calls and the import they read.
Deciding that on LibCST's tree costs a LibCST parse, a scope analysis and a fix pass per file, for findings on
calls, dotted names, imports and string literals that Python's tree (which the engine has parsed anyway) holds as
well.

`decide` takes those decisions on Python's tree, with the rules' own tables and message fields, for a `check`
(not a rewrite) of a file where they are the LibCST pass's decisions by construction, and returns None where it
cannot be sure, for the LibCST pass to decide as before. The two passes over a file set aside for another platform
ask it too: its notes, where engine/notes.py cannot decide them, and the probe (does it report more than its
notes?):

- Every rule left to run after the pre-filters is one of these twenty-three, or NM107 in a file where it reports
  nothing. Of the three rules that act on "xla" (NM102, NM107, NM201: `_XLA_QUIET`), none reports anything where
  the file imports no torch_xla and gives no XLA device name as a device or a backend (a rewrite leaves
  `if backend == "xla":` behind), which is decided without their walks; NM107 also where no placement
  it follows may both be given the XLA device and move a module (`_placements_quiet`, `_may_be_modules`: a file
  of tensors moved to the device, of models kept on the CPU; a file that compiles a step with torch_xla, whose
  model the rule takes for a module, is left to LibCST). The file has
  no suppression comments (process_python asks only then), so nothing else can come out of the pass but its
  markers (NM900, each `# TODO(neuron-migrate ...)` as found). A marker of a code on the comment lines right above
  a statement, at its indentation, stands for that code's finding there, as LibCST's leading lines of the
  statement hold it (`_Marks`); one that closes a block, above an `elif` or inside a string is left to LibCST.
- The file imports torch_xla nowhere, or NM190, NM191 and NM199 are not asked for (a set-aside program's notes
  pass): then there is no NM190 / NM191 for the fix pass to add, and no NM199 step. Or every spelling of a name
  its torch_xla imports bind, outside those imports (`_legacy_spellings`, `_census`: a name, an attribute, a
  parameter, a definition, a string that is the name itself, as LibCST's tree holds names; no `*` import), is in
  code the fixes of `_TAKE_READS` take away (`_Decisions.fixes`: `xm.xla_device` of `xm.xla_device()`, whose
  call the fix replaces; a step call replaced, or its statement removed) or in the function of a call a rule
  reported and does not fix (`_Decisions.handled`: an xser save the program chooses, a call whose code is not
  asked for or has a marker above it), `_reads_left`. Then no name the NM199 step reports reads one (the step:
  `step`, with every rule that may report, enabled or not), no fix leaves a new read behind, and the fix pass
  finds each import the fixes leave unread unused: NM190 at its alias (`_unused_findings`), "once the other fixes
  are made" where the file as it was reads its name (`_read_before`: a name, not an attribute of the same
  spelling), none in a multi-backend file (which keeps its XLA code), no availability flag, and no guard that
  keeps one (no NM191; an import that stays, read by a handled call, in a `try` goes to LibCST). A name two
  imports bind, read, is left to LibCST (which binding a read finds is its scopes'). Such a file reaches this
  pass where the step runs too, and where a selection leaves out NM199 but asks for NM190 or NM191 (but where a
  name is read, one of `_TAKE_READS` must run as well).
- XlaDeviceCall's NM101 is the rule's own, on a call with no argument or its index alone as a name or a number
  (`target().device`); a call compared with a device (the rule compares device types), another index, an
  argument it leaves to NM199 and the portable style go to LibCST. Its fix reads `torch.device` only: in a
  function patched in, the self-call check refuses it only where the file may patch `torch.device` itself
  (`_FIX_READS`, `_patch_sites`), which is left to LibCST.
- MarkStep's decisions are the rule's own on torch_xla's step calls (`mark_step`, `torch_xla.sync`): as a statement
  removed (NM103), or a graph cut in a model's forward (NM113: `_in_forward` on the scopes of Python's tree), one
  that waits becomes the device's synchronize (NM104); other arguments, or another place, report nothing and keep
  their read. So are `xm.wait_device_ops()` (NM104; with arguments, NM199's) and `eager_mode(True)` or `(False)`
  as a statement (NM103). `wait_device_ops` spelled other than as a call's function or an import's name (passed on
  as a function, imported under a name of its own, in a comment), the contexts of `torch_xla.step()` and eager mode,
  and the portable style go to LibCST; so does a fix that spells an attribute the file may patch a function in
  for (`_FIX_READS`).
- EagerStepOfCompiledBase's NM259: under `eager_mode(True)`, a derived class's method assigns `self.<a> =
  self.<method>` where a base class in another module compiles the step `<a>` names (`project.base_compiled`); a
  file that compiles a step itself (`torch_xla.compile`), and an assignment that shares its line, spans lines or
  holds parentheses or a comment, go to LibCST.
- Collectives' NM205 on a rendezvous with its tag alone, a statement alone on its line (or the sole body of an
  `if` without `else`): its message spells torchrun's world size as the rule's `env_int` does (the module's
  `WORLD_SIZE` where `rank_names` and `_os_at_top` let the fix bind it, else `int(os.environ.get(...))`) and
  torch.distributed by the name the fix reads (`module_ref_in`, LibCST's `module_ref` on the scopes of Python's
  tree). The rule's other collectives, its reduction constants and a rendezvous in a one-line block go to LibCST.
- ProcessGroup's NM201 where the file registers torch_xla's backend and gives `init_process_group` its backend from
  elsewhere (a parameter, an attribute: `ProcessGroup._map`), with the rule's note where a statement can go before
  the call; a call that spells an XLA backend or init method, a backend a name of the file is assigned, a program
  that pins its own cores and the portable style go to LibCST. Where the file imports no torch_xla and gives no XLA
  name as a backend, it reports nothing (`_XLA_QUIET`).
- RankAndWorldSize's NM203 on the rank and world-size calls and the master test, spelled with `env_int` as
  Collectives' world size is; a call in parentheses, or an argument LibCST may spell otherwise, goes to LibCST.
- CpuCopy's NM243 on `xm._maybe_convert_to_cpu(data, convert)`, as the rule spells it (PyTorch's tree walk of the
  data, the data itself where `convert` is False, or either as it says, in parentheses where its place binds
  tighter: `_loose`); its fix takes the function away and keeps the arguments' reads. A star, an argument in
  parentheses, over several lines or a string goes to LibCST.
- Save's and Load's NM222 on an xser save or load the program chooses (`checkpoint.xser_chosen` on Python's tree:
  a function named for xser, or a branch an option named so selects; `chosen_fields`), kept as written. Every
  other save or load (the rules rewrite it) and `xm.save` passed on as a function go to LibCST.
  Where the CUDA rules run, `facts.moving_to_neuron` is read from the program or the file (its torch_neuronx
  imports, its use of the neuron device, unless it is Inf1 code: `_Decisions.moving`). A file that moves is not
  written in the portable style and binds no name to torch.cuda or below. No fix may be refused for making a
  function patched in call itself (engine/patches.py): a file that only sets attributes of a module it imports to
  other values (`torch.backends.cudnn.benchmark = True`) patches no function, as long as no reported node is such
  a value (`_patched_values`: a fix replacing it whole could make it a function's name); where the file patches
  functions in (`torch.cuda.set_device = lambda x: None`, `torch.save = _save`), no reported node's statement
  shares a line with one of them or with their decorators (`_patched_bodies`: the bodies the self-call check reads
  stay as they were). NM404's removal and NM508's swap go to LibCST in a file that patches a function in.
- The code paths are engine/paths.py's, built on Python's tree (engine/treepaths.py): a finding is reported where
  they let its family act (`Paths.allows`), so a CUDA branch (`if torch.cuda.is_available():`) keeps its CUDA
  code, and a file that tests for XLA reports only its XLA path's. The CUDA family reports nothing in a file that
  does not move to neuron, and nothing but a group's NM117 in one that uses the XLA device and CUDA side by side
  (`paths._two_devices`). A file that tests for no backend has every statement on the common path, but for the
  CUDA family in a file that imports torch_neuronx, uses the neuron device or uses two devices: a neuron library,
  a neuron switch, a torch_neuronx import inside a function and a second device keep its CUDA code, so the paths
  are built there too. A finding of the XLA family that a
  multi-backend file would hold for its branch's marker is left to LibCST.
- Names resolve through the scopes of Python's tree (engine/treenames.py), as the rules resolve them through
  LibCST's; no name is bound to `torch.cuda` or below, nor to a float64 type (a name alone, or a definition's own
  name, could then be an API reference only LibCST's tree holds).
- LibCST's walk meets the nodes in the file's order, an assignment before the code of its value: NM401's NumPy
  arrays by name and NM403-NM405's one finding per statement and variable follow that order, with LibCST's
  statements (a line of `;`-joined statements, a block on its header's line: `_statement_keys`). A variable named
  in an f-string or in strings joined implicitly (LibCST's pieces) is left to LibCST. NeuronLibrary's and
  NxdInference's decisions on an import are the rules' own functions (`inference.library_import`,
  `optimum_finding`, `library_fields`, `nxd_finding`); libneuronxla's snapshot hook (NM258, a removal) is left to
  LibCST, and the counts leave out optimum-neuron's trainer classes unless NM509 keeps them (OptimumNeuronTrainer
  decides first, as its rule finishes first). Inferentia1 and InstanceType are the notes' own decisions
  (engine/notes.py): Inferentia1 where the file tests for no backend (its names resolve in the module scope),
  InstanceType's string literals anywhere, through the code paths.
- NeuronxTrace's messages are the rule's own fields (`inference.trace_options_fields`, `artifact_fields`,
  `api_fields`, `nki_fields`). A trace the rule rewrites (NM501, whose message is the rewritten code) is left to
  LibCST; so is a name of torch_neuronx's API that LibCST's tree holds where Python's holds none (a definition's,
  a parameter's, `global`'s, an exception's or a pattern's name), one bound other than by an assignment, and one
  read inside an f-string. A save is quoted with `model.state_dict()`: only a trace the rule rewrites names the
  model it saves. OptimumNeuronTrainer reads its classes' and helpers' names the same way, and the Neuron-only
  attributes as LibCST visits them: every attribute of that name, less the fields the file's own classes declare
  (not a class whose body is on its header's line, which LibCST holds as no block) and its `self.<name> = ...`;
  `getattr` / `hasattr` with the name as one plain string literal. Its swap (NM508) goes to LibCST in a file that
  patches a function.
- CudaDeviceString's names in device positions only (`.to("cuda")`, `torch.device("cuda")`, `device="cuda"` given
  to torch or a method, autocast's `device_type="cuda"`): a name anywhere else may join a group of device names
  (rules/device_names.py), which LibCST's tree decides. XlaDeviceString's NM102 the same way (`_strong_positions`),
  where the file may give an XLA device name as a device (else `_XLA_QUIET`); an f-string's name, autocast's XLA
  device type (whose fix writes XLA autocast's dtype) and the portable style go to LibCST.
- UnsupportedApi's references are `_references`' (as NeuronxTrace's), its sparse gradients a `sparse=True`
  keyword of an embedding; a conversion to a sparse layout (`x.to_sparse()`), which the rule reports on the
  attribute's name (no node of Python's tree), is left to LibCST.
- TensorParallel's NM230 is the rule's own: a layer not set in a model definition's `__init__` at once, the
  others with the first reason `_map_layers` or the model's build gives, read from the calls in LibCST's order
  (a call's start, an outer call before the calls it holds). Where the rule would rewrite the layers (NM233,
  whose message and fix spell the plan) the file goes to LibCST, as where the initialization shares its line.
- No reported node is inside an f-string. A node in parentheses is placed without them, as LibCST places it, and
  the code a message quotes of it holds them, as LibCST's node does (`_Decisions.short`); parentheses after a
  keyword (`if (x):`) or a comment at the end of a line of code before the node leave it to LibCST (a line that
  is all comment is white space, but where a string over several lines holds it). The code a message quotes is
  LibCST's code for its node (`_Decisions.code`). Reported nodes may nest (`f(x.cuda()).cuda()`,
  `torch.cuda.current_stream().cuda()`): the LibCST pass applies such edits inside out, and no fix of these
  rules can fail in `check`, which stops before rendering the fixed file. An argument's message quotes it with
  the comma after it, which LibCST's argument holds (`_argument_code`).

`tests/test_treecheck.py` holds it to the LibCST pass on every fixture and example, as a helper of a moving program
and as a file of its own, on generated files and in a set-aside file's probe, and in the slow suite over the
ecosystem and a sample of the standard library; `tests/test_notes.py` holds a set-aside file's notes pass to it.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable

from neuron_migrate.engine import lean, notes, paths
from neuron_migrate.engine.edits import MARKER_PREFIX, marker_code
from neuron_migrate.engine.facts import MAIN_BLOCK, uses_neuron_device
from neuron_migrate.engine.imports import LEGACY_ROOTS, STRANDED_CODE, UNUSED_CODE
from neuron_migrate.engine.names import Scope
from neuron_migrate.engine.notes import _LONE_CR, Unsure, _dotted
from neuron_migrate.engine.patches import may_patch
from neuron_migrate.engine.scan import nodes
from neuron_migrate.engine.treenames import TreeNames, exact_identifiers
from neuron_migrate.engine.treepaths import _COMPOUND, TreePaths, first_line
from neuron_migrate.findings import Finding
from neuron_migrate.rules.unsupported import lookup

_ONE_STRING = re.compile(r"""[rRuUbB]{0,2}(?:'[^'\\\n]*'|"[^"\\\n]*")""")  # one string literal, no escapes
_ATTRIBUTE_REST = re.compile(r"[ \t\f\r\n\\]*\.[ \t\f\r\n\\]*cuda")  # `<value> . cuda`, the value unparenthesized


class _Decisions:
    """The two rules' decisions on one walked tree, each reporting what the rule would, with its message fields."""

    def __init__(self, path: str, tree: notes._Tree, module: ast.Module, settings) -> None:
        self.path, self.tree, self.module, self.settings = path, tree, module, settings
        self._names: TreeNames | None = None  # the scopes of Python's tree, made where they are needed
        self._scopes: dict[int, Scope] | None = None
        self.paths: TreePaths | None = None  # the code paths, where the file tests for a backend
        self.found: list[tuple[str, ast.AST, dict, tuple[int, int] | None]] = []  # (code, node, fields, offset)
        self._quote: str | None = None
        self._torch: str | None = None
        self._assigned: dict[tuple[int, str], list] | None = None  # (scope, name) -> (start, value) of its assignments
        self._assign_targets: dict[int, type] | None = None
        self._parts: set[int] | None = None
        self.optimum_kept = False  # `facts.optimum_classes_kept` is not empty: the trainer classes stay (NM509)
        self.patched: frozenset[int] | None = frozenset()  # `_patched_values`: None where a function is patched in
        # (reported node, the code its fix takes away) of the findings whose fixes take torch_xla reads away
        self.fixes: list[tuple[ast.AST, ast.AST]] = []
        self.handled: list[ast.AST] = []  # every node a rule reported on, where the paths let it act or not
        self._parents: dict[int, ast.AST] | None = None

    def report(self, code: str, node: ast.AST, **fields) -> bool:
        """Record a finding where the code paths let its family act (True), as `ctx.report` asks them first; the
        node is handled either way (the NM199 step reports no torch_xla name of a handled call's function)."""
        self.handled.append(node)
        if not self._allowed(code, node):
            return False
        if id(node) in self.tree.in_fstring:
            raise Unsure("inside an f-string")  # where Python's places are its own before 3.12
        self.found.append((code, node, fields, None))  # placed without its parentheses, as LibCST places it
        return True

    def _allowed(self, code: str, node: ast.AST) -> bool:
        """Whether the code paths let `code`'s family act on `node`, as `ctx.report` asks them first: not on a CUDA
        branch, nor on a file's XLA-less code. A finding a multi-backend file holds for its branch's marker is left
        to LibCST."""
        if self.paths is not None:
            family = paths.acts_on(code)
            if not self.paths.allows(family, node):
                return False
            if family == paths.XLA_REWRITE and self.paths.multi_backend:
                raise Unsure("a finding held for its branch's marker")
        return True

    def short(self, node: ast.AST) -> str:
        """`patterns.short` of LibCST's node for `node`: its text with the parentheses LibCST gives it (which a
        finding's place leaves out, and the code a message quotes holds), on one line, cut to its length."""
        span = self._parentheses(node)
        if span is None:
            return self.tree.short(node)
        (first, a), (last, b) = span
        lines = self.tree._lines()
        text = lines[first][a:b] if first == last else lines[first][a:] + "".join(lines[first + 1:last]) \
            + lines[last][:b]
        return notes.one_line(text)

    def _parentheses(self, node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """Where the outermost parentheses LibCST gives `node` open and close ((line, column) from 0, the end's
        column past the `)`), or None where it has none: the nearest characters around it, past white space and
        line breaks, are `(` and `)`, and that `(` opens no call (`f(x)`: a name, a closing bracket or a string
        before it), again and again outward. A comment before the node, or a keyword before the `(` (`if(x)`,
        `match (x):`), leaves it unsure."""
        lines, found = self.tree._lines(), None
        start = node.lineno - 1, self.tree.column(node.lineno, node.col_offset)
        end = node.end_lineno - 1, self.tree.column(node.end_lineno, node.end_col_offset)
        while True:
            before = self._near(lines, *start, -1, lambda: self.tree.string_lines(self.module))
            if before is None or lines[before[0]][before[1]] != "(":
                return found
            after = self._near(lines, *end, 1, None)
            if after is None or lines[after[0]][after[1]] != ")":
                return found
            opens = notes.call_parenthesis(lines[before[0]][:before[1]].rstrip(" \t\f"))
            if opens:
                return found  # the parentheses of a call, around its one argument
            if opens is None:
                raise Unsure("in parentheses after a keyword")
            start, end = before, (after[0], after[1] + 1)
            found = start, end

    @staticmethod
    def _near(lines: list[str], line: int, at: int, step: int, in_strings: Callable[[], set[int]] | None) \
            -> tuple[int, int] | None:
        """The place (line, column) of the nearest character before (`step` -1) or after (1) column `at` of `line`
        that is no white space, no line continuation and no comment; None at either end of the file. A line before
        the node that is all comment is passed over, but in a string over several lines (`in_strings()`, lines
        from 1; asked only where there is such a line); raises Unsure where a line before the node holds code and
        a `#` (the end of that line may be a comment). Going forward (`in_strings` None), a line that opens with
        `#` is a comment: a string that reaches it opens on a line of code first."""
        first = True
        while 0 <= line < len(lines):
            text = lines[line].rstrip("\r\n")
            if step < 0:
                if not first and "#" in text:
                    if not text.lstrip(" \t\f").startswith("#") or line + 1 in in_strings():
                        raise Unsure("a comment before the node")
                    text = ""  # a comment line: LibCST's white space before the node, or between lines
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
    def moving(self, program: bool) -> bool:
        """`facts.moving_to_neuron` (`program`: `facts.program`): a moving program reaches the file, it imports
        torch_xla or torch_neuronx at module level (in any scope, where it is a program), or it spells a use of the
        neuron device and is no Inf1 code."""
        project = self.settings.project
        if project is not None and project.moving is not None:
            return True
        tree = self.tree
        if program:
            if any(q.partition(".")[0] in paths.XLA_PACKAGES for quals in tree.imported.values() for q in quals):
                return True
        elif any(b.kind == "import" and (b.qualname or "").partition(".")[0] in paths.XLA_PACKAGES
                 for bindings in tree.module.values() for b in bindings):
            return True
        return uses_neuron_device(tree.text) and not notes.inferentia1(tree)

    def qualname(self, expr: ast.AST, under: str | None = None) -> str | None:
        """`ctx.qualname(expr)`: None where no import in any scope binds the chain's first name; with `under`,
        also where no import could make the chain a name under that module."""
        quals = _any_quals(self.tree, expr)
        if not quals or under is not None and not any(q.startswith(under) for q in quals):
            return None
        try:
            return self.tree.qualname(expr)  # the module scope's bindings, where no other scope binds the name
        except Unsure:
            pass
        return self.names().qualname(expr, self.scope(expr))

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
        """`ctx.module_ref("torch")`: the one name the module scope binds to torch, bound nowhere else; or `torch`
        where no scope binds that name or another to torch (the fix imports it)."""
        if self._torch is None:
            names = [n for n, quals in self.tree.imported.items() if "torch" in quals]
            if not names and not any("torch" in scope.bindings for scope in self.names().scopes):
                self._torch = "torch"
                return self._torch
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
        with it (the rest of the line is the node's; an indentation of its own, less deep, stays). A line after a
        backslash continuation keeps its indentation: LibCST holds the backslash, the line break and the spaces
        after them as one piece of white space, written back as it was."""
        if "\n" not in text:
            return text
        if "\r" in text:
            raise Unsure("a Windows line end")  # LibCST writes its own
        for inner in ast.walk(node):
            if inner.__class__ in (ast.Constant, ast.JoinedStr) and inner.end_lineno != inner.lineno:
                raise Unsure("a string over several lines")  # its lines are its own
        statement = self.tree.statement[id(call)]
        line = self.tree.line_text(statement.lineno)
        indent = line[:len(line) - len(line.lstrip(" \t\f"))]
        lines = text.split("\n")
        out = [lines[0]]
        for before, line in zip(lines, lines[1:]):
            if before.endswith("\\"):  # a line continued by a backslash: LibCST keeps the next one as written
                if "#" in before:
                    raise Unsure("a comment that ends with a backslash")  # (a comment's backslash continues nothing)
                out.append(line)
            else:
                out.append(line[len(indent):] if line.startswith(indent) else line)
        return "\n".join(out)

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

    # XlaDeviceCall: `xm.xla_device()` -> the target device
    def xla_device_call(self) -> None:
        """`XlaDeviceCall`'s NM101 on each call of torch_xla's device function with no argument or its index alone,
        as a name or a number (LibCST's code for other indexes, and an index in parentheses, are left to LibCST).
        A call that is one side of a comparison (`p.device != xm.xla_device()`, which the rule rewrites as a
        comparison of device types) is left to LibCST, as is the portable style (its device variable is a
        definition the fix adds). The fix replaces the call: its function is the torch_xla read it takes away
        (`fixes`; an index stays)."""
        from neuron_migrate.rules.device import XLA_DEVICE
        from neuron_migrate.rules.target import ACCELERATOR

        compares = {id(o) for c in self.tree.compares for o in (c.left, *c.comparators)}
        for call in self.tree.calls:
            if self.qualname(call.func, "torch_xla") not in XLA_DEVICE:
                continue
            if id(call) in compares:
                raise Unsure("a device call compared")  # `XlaDeviceCall.visit_Comparison`
            if len(call.args) + len(call.keywords) > 1:
                continue  # `devkind=` and friends: left to NM199
            if call.args:
                index = call.args[0]
                if index.__class__ is ast.Starred:
                    continue
            elif call.keywords:
                if call.keywords[0].arg not in ("n", "index"):
                    continue
                index = call.keywords[0].value
            else:
                index = None
            if self.settings.device_style == ACCELERATOR:
                raise Unsure("the portable style's device variable")
            spelled = None
            if index is not None:
                if self._parentheses(index) is not None or not (index.__class__ is ast.Name or (
                        index.__class__ is ast.Constant and index.value.__class__ is int)):
                    raise Unsure("an index LibCST may spell otherwise")
                spelled = self.tree.segment(index)
            if self.report("NM101", call, call=self.short(call), fixed=self.target().device(spelled)):
                self.fixes.append((call, call.func))

    # MarkStep: `xm.mark_step()` goes (NM103), stays a graph cut in a model's forward (NM113) or waits (NM104)
    def mark_step(self) -> None:
        """`MarkStep`'s decisions on torch_xla's step calls: one as a statement goes (NM103; in a model's forward it
        becomes `torch._dynamo.graph_break()`, NM113), one that waits (`wait=True`) becomes the device's
        synchronize (NM104). A call with other arguments (left to NM199) or in another place reports nothing, and
        keeps its read. The rule's other calls (`wait_device_ops`, eager mode, `torch_xla.step()`), and the portable
        style, are left to LibCST."""
        from neuron_migrate.rules.execution import EAGER_CONTEXT, EAGER_MODE, MARK_STEP, STEP_CONTEXT, WAIT
        from neuron_migrate.rules.target import ACCELERATOR

        tree = self.tree
        if "wait_device_ops" in tree.text:
            self._waits_called()
        for call in tree.calls:
            qual = self.qualname(call.func, "torch_xla")
            if qual in EAGER_CONTEXT or qual in STEP_CONTEXT:
                raise Unsure("torch_xla's step context, or eager mode's")
            if qual in WAIT or qual in EAGER_MODE:
                self._wait_or_eager(call, qual in WAIT)
                continue
            if qual not in MARK_STEP:
                continue
            wait = next((k.value for k in call.keywords if k.arg == "wait"), None)
            if wait is None and call.args and call.args[0].__class__ is not ast.Starred:
                wait = call.args[0]
            if any(a is not wait for a in call.args) or any(
                    k.value is not wait and k.arg != "reset_scope" for k in call.keywords):
                continue  # devices=: left to NM199
            if wait is not None and not (wait.__class__ is ast.Name or (
                    wait.__class__ is ast.Constant and any(wait.value is v for v in (True, False, None)))):
                continue  # a computed wait=, a number: left to NM199 (`True`, `False` and `None` are names to LibCST)
            statement = tree.statement.get(id(call))
            alone = statement.__class__ is ast.Expr and statement.value is call
            if wait.__class__ is ast.Constant and wait.value is True:
                if self.settings.device_style == ACCELERATOR:
                    raise Unsure("the portable style's synchronize statement")
                if self.report("NM104", call, call=self.short(call), fixed=self.target().synchronize_call()):
                    self.fixes.append((call, call))
            elif alone and self._in_forward(self.scope(call.func)):
                if self.report("NM113", call, call=self.short(call), fixed=f"{self.torch()}._dynamo.graph_break()"):
                    self.fixes.append((call, call))
            elif alone:
                if self.report("NM103", call, call=self.short(call)):
                    self.fixes.append((call, statement))

    def _waits_called(self) -> None:
        """Every spelling of `wait_device_ops` where LibCST's tree holds a name (`_census`: not a comment) is a
        call's function or an import's name: a wait passed on as a function (`sync=xm.wait_device_ops`,
        `MarkStep._wait_function`), imported under a name of its own, or spelled otherwise (a parameter, a string
        that is the name) is left to LibCST."""
        tree = self.tree
        spelled = _census(self.module, {"wait_device_ops"})["wait_device_ops"]
        called = sum(1 for call in tree.calls if (call.func.attr if call.func.__class__ is ast.Attribute else
                                                   getattr(call.func, "id", None)) == "wait_device_ops")
        imported = sum(1 for node in tree.imports for alias in node.names if alias.name == "wait_device_ops")
        if spelled != called + imported or any(node.__class__ is ast.Import or alias.asname
                                                for node in tree.imports for alias in node.names
                                                if "wait_device_ops" in alias.name):
            raise Unsure("torch_xla's wait, which may be passed as a function")

    def _wait_or_eager(self, call: ast.Call, wait: bool) -> None:
        """`xm.wait_device_ops()` with no argument becomes the device's synchronize (NM104,
        `execution.wait_for_device`; its arguments are NM199's); `eager_mode(True)` or `(False)` as a statement
        goes (NM103: the native backend runs each operation as it is issued; a computed switch is NM199's)."""
        from neuron_migrate.rules.target import ACCELERATOR

        statement = self.tree.statement.get(id(call))
        if wait:
            if call.args or call.keywords:
                return
            if self.settings.device_style == ACCELERATOR:
                raise Unsure("the portable style's synchronize statement")
            if self.report("NM104", call, call=self.short(call), fixed=self.target().synchronize_call()):
                self.fixes.append((call, call))
        elif _switch(call) is not None and statement.__class__ is ast.Expr and statement.value is call:
            if self.report("NM103", call, call=self.short(call)):
                self.fixes.append((call, statement))

    # EagerStepOfCompiledBase: a subclass's eager step, where its base compiles the step (NM259)
    def eager_step(self) -> None:
        """`EagerStepOfCompiledBase`'s NM259: under `eager_mode(True)`, a method of a derived class assigns
        `self.<attr> = self.<method>`, where `<attr>` is an attribute a base class in another module assigns a
        compiled training step (`project.base_compiled`): the step runs under `torch.compiler.set_stance`. A file
        that compiles a step itself (`torch_xla.compile(...)`, whose training step the rule reads on LibCST's
        tree), and an assignment that shares its line, spans lines or holds parentheses, go to LibCST."""
        from neuron_migrate.rules.compile import TORCH_XLA_COMPILE
        from neuron_migrate.rules.execution import EAGER_MODE

        tree = self.tree
        eager = False
        for call in tree.calls:
            qual = self.qualname(call.func, "torch_xla")
            if qual in EAGER_MODE and _switch(call) is True:
                eager = True
            elif qual in TORCH_XLA_COMPILE and (call.args or call.keywords):
                raise Unsure("a step compiled in the file")
        project = self.settings.project
        elsewhere = set(project.base_compiled) if project is not None else set()
        if not eager or not elsewhere:
            return
        for node in nodes(self.module):
            if node.__class__ is not ast.Assign or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            if target.__class__ is not ast.Attribute or target.value.__class__ is not ast.Name \
                    or value.__class__ is not ast.Attribute or value.value.__class__ is not ast.Name:
                continue
            scope = self.scope(value.value)
            if not (_is_self(target.value.id, scope) and _is_self(value.value.id, scope)) \
                    or not scope.parent.node.bases or target.attr not in elsewhere:
                continue
            line = self.tree.line_text(node.lineno)
            if node.end_lineno != node.lineno or "#" in line or ";" in line or "(" in self.tree.segment(node):
                raise Unsure("an assignment LibCST may spell otherwise")
            fixed = f"{self.module_ref_in('torch', None, scope)}.compiler.set_stance(" \
                f"{self.string('force_eager')})({self.tree.segment(value)})"
            self.report("NM259", value, assignment=" ".join(self.tree.segment(node).split()), fixed=fixed,
                        base="NM110 in the module it comes from")

    def _in_forward(self, scope: Scope) -> bool:
        """`execution._in_forward` on the scopes of Python's tree: the code runs in a method `forward`, or in any
        method of a class derived from a module class (a function nested in the method counts as the method)."""
        from neuron_migrate.rules.compile import MODULE_BASES, _nn_class

        while scope is not None and scope.kind != "function":
            scope = scope.parent
        while scope is not None and scope.parent is not None and scope.parent.kind == "function":
            scope = scope.parent
        if scope is None or scope.parent is None or scope.parent.kind != "class":
            return False
        if scope.node.name == "forward":
            return True
        names, outer = self.names(), scope.parent.parent
        return any((q := names.qualname(base, outer)) in MODULE_BASES or _nn_class(q or "")
                   for base in scope.parent.node.bases)

    # RankAndWorldSize: ordinals and world size from torchrun's environment (NM203)
    def rank_and_world_size(self) -> None:
        """`RankAndWorldSize`'s NM203: a rank or world-size call (`xm.get_ordinal()`, `xr.world_size()`) becomes
        torchrun's variable (`env_int`, its `defval` as a name or a number), the master test
        (`xm.is_master_ordinal()`, `local=` True or False) a comparison of the local rank or rank with 0, in
        parentheses where its place binds tighter (`_loose`: `rewrites.LOOSE_PARENTS` on Python's tree), `not`
        folded into `!=`. Another argument, or a computed `local=`, reports nothing (NM199's: its read stays); a
        call or its argument in parentheses, and a `defval` other than a name or a number, go to LibCST."""
        from neuron_migrate.rules.distributed import IS_MASTER, RANK_CALLS

        tree = self.tree
        parents = None
        for call in tree.calls:
            qual = self.qualname(call.func, "torch_xla")
            if qual not in RANK_CALLS and qual not in IS_MASTER:
                continue
            if any(a.__class__ is ast.Starred for a in call.args) or any(k.arg is None for k in call.keywords):
                continue
            name = "defval" if qual in RANK_CALLS else "local"
            if len(call.args) + len(call.keywords) > 1 or any(k.arg != name for k in call.keywords):
                continue  # left to NM199
            given = call.args[0] if call.args else call.keywords[0].value if call.keywords else None
            if self._parentheses(call) is not None or (given is not None and self._parentheses(given) is not None):
                raise Unsure("a rank call or its argument in parentheses")
            scope = self.scope(call.func)
            parents = parents or self.parents()
            parent = parents.get(id(call))
            taken: ast.AST = call
            if qual in RANK_CALLS:
                variable, default = RANK_CALLS[qual]
                if given is not None:
                    default = _number_or_name(given, tree)
                fixed = self.env_int(variable, default, call, scope)
            else:
                if given is not None and not (given.__class__ is ast.Constant and given.value.__class__ is bool):
                    continue  # a computed `local=`: left to NM199
                local = given is None or given.value is True
                which = self.env_int("LOCAL_RANK" if local else "RANK", "0", call, scope)
                if parent.__class__ is ast.UnaryOp and parent.op.__class__ is ast.Not:
                    fixed, taken = f"{which} != 0", parent
                else:
                    fixed = f"{which} == 0" if _loose(parent, call) else f"({which} == 0)"
            if self.report("NM203", call, call=self.short(call), fixed=fixed):
                self.fixes.append((call, taken))

    # ProcessGroup: a backend a file that registered torch_xla's may be given as "xla" (NM201)
    def process_group(self) -> None:
        """`ProcessGroup`'s NM201 where the file registers torch_xla's `xla` backend and gives
        `init_process_group` its backend as a name or an attribute from elsewhere (`backend=args.dist_backend`, a
        parameter): it becomes the neuron backend where it is "xla", the process bound to its device first where a
        statement can go before the call (`ProcessGroup._map`). A call that spells an XLA backend or init method,
        a backend a name of the file is assigned, the program pinning its cores and the portable style go to
        LibCST; any other call reports nothing."""
        from neuron_migrate.rules.distributed import VISIBILITY, XLA_BACKEND, XLA_GROUP_STRINGS
        from neuron_migrate.rules.patterns import INIT_PROCESS_GROUP
        from neuron_migrate.rules.target import ACCELERATOR

        tree = self.tree
        registers = "xla_backend" in tree.text and any(
            alias.name == XLA_BACKEND if node.__class__ is ast.Import else
            f"{node.module}.{alias.name}" == XLA_BACKEND and not node.level
            for node in tree.imports for alias in node.names)
        for call in tree.calls:
            if self.qualname(call.func) not in INIT_PROCESS_GROUP:
                continue
            values = [*call.args, *(k.value for k in call.keywords)]
            if any(v.__class__ is ast.Constant and v.value in XLA_GROUP_STRINGS for v in values):
                raise Unsure("an XLA backend or init method spelled")
            if any(a.__class__ is ast.Starred for a in call.args):
                raise Unsure("a starred argument")
            backend = next((k.value for k in call.keywords if k.arg == "backend"), None)
            if backend is None and call.args:
                backend = call.args[0]
            if backend is None or backend.__class__ in (ast.Constant, ast.JoinedStr):
                continue  # a backend as a string: `_rewrite`'s, with no XLA spelling to respell
            if backend.__class__ is ast.Name:
                owner = self.names().lookup(backend.id, self.scope(backend))
                if owner is not None and any(b.kind == "assign" for b in owner.bindings.get(backend.id, ())):
                    raise Unsure("a backend a name of the file is assigned")
            parts = _dotted(backend)
            if not parts or not registers:
                continue
            name = tree.segment(backend)
            if name != ".".join(parts):
                raise Unsure("a backend spelled over several pieces")
            if self.settings.device_style == ACCELERATOR:
                raise Unsure("the portable style's process-group backend")
            if any(variable in tree.text for variable in VISIBILITY):
                raise Unsure("a program that may pin its own cores")
            xla = self.string("xla")
            statement = tree.statement.get(id(call))
            placeable = getattr(statement, "value", None) is call
            if placeable:
                line = tree.line_text(first_line(statement))
                if line[:tree.column(statement.lineno, statement.col_offset)].strip(" \t\f"):
                    raise Unsure("a call on the line of another statement")
            note = f", after binding the process to its own device when it is {xla}" if placeable else ""
            self.report("NM201", call, text=f"{name} == {xla}",
                        fixed=f"{self.string('neuron')} if {name} == {xla} else {name}", note=note)

    # Collectives: a rendezvous becomes a barrier where several processes run (NM205)
    def collectives(self) -> None:
        """`Collectives`' NM205 on a rendezvous with its tag alone (`xm.rendezvous("done")`): a statement alone on
        its line, or the sole body of an `if` without `else` (the barrier joins its test). The rule's other
        collectives, its reduction constants and a rendezvous in a one-line block (`else: xm.rendezvous()`) are
        left to LibCST; a rendezvous with a payload reports nothing (NM199's) and keeps its read."""
        from neuron_migrate.rules.distributed import GUARDED_COLLECTIVES, REDUCE_CONSTANTS, RENDEZVOUS

        tree = self.tree
        for node in tree.attributes:
            if node.attr.startswith("REDUCE_") and self.qualname(node, "torch_xla") in REDUCE_CONSTANTS:
                raise Unsure("a reduction constant")
        for call in tree.calls:
            qual = self.qualname(call.func, "torch_xla")
            if qual not in GUARDED_COLLECTIVES:
                continue
            if qual not in RENDEZVOUS:
                raise Unsure("a collective the rule rewrites")
            if len(call.args) + len(call.keywords) > 1 or any(a.__class__ is ast.Starred for a in call.args) \
                    or any(k.arg != "tag" for k in call.keywords):
                continue  # a payload to exchange: left to NM199
            statement = tree.statement.get(id(call))
            if statement.__class__ is not ast.Expr or statement.value is not call:
                continue
            line = tree.line_text(statement.lineno)
            before = line[:tree.column(statement.lineno, statement.col_offset)]
            if before.strip(" \t\f"):
                raise Unsure("a rendezvous in a one-line block, or after another statement")
            after = tree.line_text(statement.end_lineno)[tree.column(statement.end_lineno, statement.end_col_offset):]
            if after.strip(" \t\f\r\n") and not after.lstrip(" \t\f").startswith("#"):
                continue  # `xm.rendezvous("x"); y()`: no statement alone on its line, left to NM199
            scope = self.scope(call.func)
            guard = f"{self.env_int('WORLD_SIZE', '1', call, scope)} > 1"
            fixed = f"{self.module_ref_in('torch.distributed', 'dist', scope)}.barrier()"
            parent = self.parents().get(id(statement))
            if parent.__class__ is ast.If and parent.body == [statement] and not parent.orelse:
                fixed = f"if <its test> and {guard}: {fixed}"
            else:
                fixed = f"if {guard}: {fixed}"
            if self.report("NM205", call, call=self.short(call), fixed=fixed):
                self.fixes.append((call, call))

    def module_ref_in(self, module: str, alias: str | None, scope: Scope) -> str:
        """`ctx.module_ref(module, alias)` in `scope`, on the scopes of Python's tree: the name an import binds to
        the module there, else `alias` where no scope binds it (the fix adds the import), else the module's own
        dotted name where its root name is free or that module (LibCST's import added or there)."""
        from neuron_migrate.engine.names import import_target

        names = self.names()
        local = names.local_name_for(module, scope)
        if local is not None:
            return local
        if alias is not None and names.lookup(alias, scope) is None and not any(
                alias in s.bindings for s in names.scopes):
            return alias
        root = module.partition(".")[0]
        owner = names.lookup(root, scope)
        if owner is not None and import_target(owner.bindings[root]) != root:
            raise Unsure(f"the name {root} is taken")
        return module

    def env_int(self, variable: str, default: str, node: ast.AST, scope: Scope) -> str:
        """`processes.env_int` on Python's tree: the module's name for torchrun's variable where the fix may bind
        one (`rank_names`, with `os` imported at the top or nowhere: `_os_at_top`), else its read in place
        (`node`: the reported node, `scope`: where it is read)."""
        from types import SimpleNamespace

        from neuron_migrate.rules.processes import VARIABLES, rank_names

        if VARIABLES.get(variable) == default and variable in rank_names(SimpleNamespace(
                source=SimpleNamespace(text=self.tree.text))) and self._os_at_top(node):
            return variable
        quote = self.string("")[0]
        text = f"{quote}{default}{quote}" if default.lstrip("-").isdigit() else f"str({default})"
        return f"int({self.module_ref_in('os', None, scope)}.environ.get({quote}{variable}{quote}, {text}))"

    def _os_at_top(self, node: ast.AST) -> bool:
        """`processes._os_at_top`: `os` is bound only by imports at the module's top level, unconditionally, all
        before its other code (past a docstring), or before the code the finding is in (or that code is a
        function's). Lines of several statements, and `os` bound otherwise, are left to LibCST."""
        names = self.names()
        bindings = names.module_scope.bindings.get("os", [])
        if not all(b.kind == "import" and not b.conditional for b in bindings):
            return False
        body = self.module.body
        if any(a.end_lineno == b.lineno for a, b in zip(body, body[1:])):
            raise Unsure("statements of the module joined on one line")
        imports = [i for i, statement in enumerate(body) if statement.__class__ in (ast.Import, ast.ImportFrom)
                   and any((alias.asname or alias.name.partition(".")[0]) == "os" for alias in statement.names)]
        if len(imports) != len(bindings):
            raise Unsure("os bound by an import inside a block")
        leading = next((i for i, statement in enumerate(body) if not (
            statement.__class__ in (ast.Import, ast.ImportFrom) or (
                i == 0 and statement.__class__ is ast.Expr and statement.value.__class__ is ast.Constant
                and statement.value.value.__class__ in (str, bytes)))), len(body))
        last = max(imports, default=-1)
        if last < leading:
            return True
        site = next((i for i, statement in enumerate(body)
                     if first_line(statement) <= node.lineno <= statement.end_lineno), None)
        if site is None:
            raise Unsure("a finding outside the module's statements")
        if body[site].__class__ in (ast.FunctionDef, ast.AsyncFunctionDef):
            return True
        return site > last

    # CpuCopy: torch_xla's CPU copy of a structure of tensors becomes PyTorch's tree walk (NM243)
    def cpu_copy(self) -> None:
        """`CpuCopy`'s NM243 on `xm._maybe_convert_to_cpu(data, convert=...)`: the CPU copy of every tensor in
        `data` (`checkpoint.cpu_copy`), `data` itself where `convert` is False, or either as `convert` says; its
        fix takes the call's function away and keeps its arguments. Another argument reports nothing (NM199's); a
        star, an argument in parentheses, over several lines or a string LibCST may spell otherwise, go to
        LibCST."""
        from neuron_migrate.rules.checkpoint import TO_CPU

        tree = self.tree
        for call in tree.calls:
            if self.qualname(call.func, "torch_xla") not in TO_CPU:
                continue
            if _star(call):
                raise Unsure("a starred argument")
            data, convert = _argument(call, 0, "data"), _argument(call, 1, "convert")
            if data is None or any(_value(a) is not data and _value(a) is not convert
                                   for a in [*call.args, *call.keywords]):
                continue
            for value in (data, convert):
                if value is not None and (self._parentheses(value) is not None or value.lineno != value.end_lineno
                                          or value.__class__ is ast.Constant and value.value.__class__ in (str, bytes)):
                    raise Unsure("an argument LibCST may spell otherwise")
            flag = tree.segment(convert) if convert is not None else "True"
            text = tree.segment(data)
            scope = self.scope(call.func)
            if flag == "False":
                simple = data.__class__ in (ast.Name, ast.Attribute, ast.Call, ast.Subscript) or (
                    data.__class__ is ast.Constant and (data.value is None or data.value.__class__ in (
                        bool, int, float)))  # `patterns.paren`: LibCST's names, integers and floats
                fixed = text if simple else f"({text})"
            else:
                pytree = self.module_ref_in("torch.utils._pytree", "pytree", scope)
                torch = self.torch()
                fixed = f"{pytree}.tree_map_only({torch}.Tensor, {torch}.Tensor.cpu, {text})"
                if flag != "True":
                    fixed = f"{fixed} if {flag} else {text}"
                    if not _loose(self.parents().get(id(call)), call):
                        fixed = f"({fixed})"
            if self.report("NM243", call, call=self.short(call), fixed=fixed):
                self.fixes.append((call, call.func))

    # Save / Load: an xser save or load the program chooses is kept (NM222)
    def save(self) -> None:
        """`Save`'s NM222 on an xser save the program chooses (`checkpoint.xser_chosen`: in a function whose name
        says xser, or in a branch an option named so selects), which stays as written; every other save (the rule
        rewrites it) and `xm.save` passed on as a function are left to LibCST."""
        from neuron_migrate.rules.checkpoint import SAVE, XSER
        from neuron_migrate.rules.patterns import XM

        tree = self.tree
        funcs = {id(c.func) for c in tree.calls}
        for node in tree.attributes:
            if node.attr == "save" and id(node) not in funcs and self.qualname(node, "torch_xla") == f"{XM}.save":
                raise Unsure("xm.save passed on")
        for call in tree.calls:
            qual = self.qualname(call.func, "torch_xla")
            if qual in SAVE:
                self._chosen(call, qual if qual.startswith(XSER) else None)

    def load(self) -> None:
        """`Load`'s NM222 on an xser load the program chooses, as `save`; every other load is left to LibCST."""
        from neuron_migrate.rules.checkpoint import LOAD

        for call in self.tree.calls:
            qual = self.qualname(call.func, "torch_xla")
            if qual in LOAD:
                self._chosen(call, qual)

    def _chosen(self, call: ast.Call, qual: str | None) -> None:
        from neuron_migrate.rules.checkpoint import chosen_fields

        how = self._xser_chosen(call) if qual is not None else None
        if how is None:
            raise Unsure("a save or load the rule rewrites")
        self.report("NM222", call, call=self.short(call), **chosen_fields(qual, how))

    def _xser_chosen(self, call: ast.Call) -> str | None:
        """`checkpoint.xser_chosen` on Python's tree: the nearest `if` (or `x if c else y`) around the call, but in
        its test, whose test names xser (a name, an attribute, a keyword's or a parameter's name), or a function
        whose name says xser; how the program chooses it, or None."""
        parents = self.parents()
        child: ast.AST = call
        parent = parents.get(id(call))
        while parent is not None:
            kind = parent.__class__
            if kind in (ast.If, ast.IfExp) and child is not parent.test:
                if any("xser" in name.lower() for name in _identifiers(parent.test)):
                    test = self.short(parent.test)
                    return f"under `if {test}`" if kind is ast.If else f"where `{test}` chooses it"
            elif kind in (ast.FunctionDef, ast.AsyncFunctionDef) and "xser" in parent.name.lower():
                return f"in `{parent.name}`"
            child, parent = parent, parents.get(id(parent))
        return None

    def parents(self) -> dict[int, ast.AST]:
        """Each node's parent (by id), from one walk of the module."""
        if self._parents is None:
            found: dict[int, ast.AST] = {}
            stack: list[ast.AST] = [self.module]
            while stack:
                node = stack.pop()
                for child in ast.iter_child_nodes(node):
                    found[id(child)] = node
                    stack.append(child)
            self._parents = found
        return self._parents

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
            self.report("NM320", call, call=self.short(call), fixed=fixed)

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
        from neuron_migrate.rules.unsupported import spelled_as_text

        tree = self.tree
        chained = self._chained()
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
                if id(node) in self._targets():
                    continue  # `unsupported.reference`: a name patched here is not a read of the API
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
                self.report("NM323", node, **spelled_as_text(spelled, qual))


    # CudaDeviceString: `"cuda"` in a device position (`.to("cuda")`, `torch.device("cuda")`, `device="cuda"`,
    # autocast's `device_type="cuda"`) -> `"neuron"` (NM321)
    def cuda_device_string(self) -> None:
        """`CudaDeviceString`'s strong positions, where every CUDA device name of the file stands in one: a name in
        another place (a default, a comparison, an option, a configuration entry, an argument of the file's own
        function or of another module's) may join a group of device names (rules/device_names.py), whose decision
        is LibCST's; so is a name spelled with a prefix, escapes or triple quotes, in parentheses or inside an
        f-string, and a device given to a call that is compared (`t.device == torch.device("cuda")`)."""
        from neuron_migrate.rules.cuda import CUDA_STRING

        self._strong_positions([s for s in self.tree.strings if CUDA_STRING.match(s.value)], "NM321", "CUDA")

    def xla_device_string(self) -> None:
        """`XlaDeviceString`'s NM102 where every XLA device name of the file (`"xla"`, `"xla:1"`) stands in a strong
        position, as `cuda_device_string` reads them: respelled `"neuron"`, with its index. An f-string's name, an
        autocast's device type (whose fix writes XLA autocast's dtype) and the portable style go to LibCST, as do the
        weak positions (a comparison, a `device_type=` tag) and the names groups may hold."""
        from neuron_migrate.rules.patterns import DEVICE_PREFIX, DEVICE_STRING
        from neuron_migrate.rules.target import ACCELERATOR

        tree = self.tree
        literals = [s for s in tree.strings if DEVICE_STRING.match(s.value)
                    or id(s) in tree.in_fstring and DEVICE_PREFIX.match(s.value)]
        if literals and self.settings.device_style == ACCELERATOR:
            raise Unsure("the portable style's device names")
        self._strong_positions(literals, "NM102", "XLA")

    def _strong_positions(self, literals: list[ast.Constant], code: str, device: str) -> None:
        """The device names `literals` (a device's name and its index, `device` says which), each in a strong
        position (`XlaDeviceString.visit_Call`): `device=` given to a plain call (`_plain_call`), a device type given
        to autocast (CUDA's only: XLA's fix writes autocast's dtype), the first argument of `.to(...)` on a plain
        call or of `torch.device(...)`. Reported as `code`, respelled `neuron` with the index."""
        from neuron_migrate.rules.device import DEVICE_FIRST_ARG, _is_autocast

        if not literals:
            return
        tree = self.tree
        keywords = {id(k): c for c in tree.calls for k in c.keywords}
        operands = {id(o) for c in tree.compares for o in (c.left, *c.comparators)}
        name = device.lower()
        for literal in literals:
            if id(literal) in tree.in_fstring:
                raise Unsure(f"a {device} device name inside an f-string")
            text = tree.segment(literal)
            quote = text[:1]
            if quote not in ("'", '"') or text != f"{quote}{literal.value}{quote}":
                raise Unsure(f"a {device} device name with a prefix, escapes or triple quotes, or joined to another")
            if self._parentheses(literal) is not None:
                raise Unsure(f"a {device} device name in parentheses")  # the code the message quotes holds them
            parent = tree.parents.get(id(literal))
            if parent.__class__ is ast.keyword:
                call = keywords.get(id(parent))
                qual = self.qualname(call.func) if call is not None else None
                strong = call is not None and (parent.arg == "device" and self._plain_call(call, qual)
                                               or parent.arg == "device_type" and _is_autocast(qual))
            elif parent.__class__ is ast.Call and parent.args and parent.args[0] is literal:
                call, func = parent, parent.func
                qual = self.qualname(func)
                strong = qual in DEVICE_FIRST_ARG or (func.__class__ is ast.Attribute and func.attr == "to"
                                                      and self._plain_call(call, qual))
            else:
                strong = False
            if not strong:
                raise Unsure(f"a {device} device name where a group of device names may hold it")
            if id(call) in operands:
                raise Unsure(f"a {device} device compared")  # `XlaDeviceString._device_equality`
            if device == "XLA" and _is_autocast(qual):
                raise Unsure("autocast's XLA device type")  # `XlaDeviceString._autocast_dtype`
            self.report(code, literal, text=text, fixed=f"{quote}neuron{literal.value[len(name):]}{quote}")

    def _plain_call(self, call: ast.Call, qual: str | None) -> bool:
        """A call `DeviceNames.call` passes its device arguments through as device uses: not an option, an
        environment or configuration read, a test, `dict(...)`, a call of the file's own function or class or of
        another module of the project (each of which makes the value held data)."""
        from neuron_migrate.rules.device_names import ENV_READS

        func = call.func
        if func.__class__ is ast.Name:
            return qual is not None and qual.startswith("torch.")  # imported from torch: no name of the file
        if func.__class__ is not ast.Attribute or qual in ENV_READS or func.attr == "startswith" or (
                qual is None and func.attr in ("add_argument", "set_defaults", "get")):
            return False
        project = self.settings.project
        if project is not None and project.modules:
            parts = _dotted(func)
            if not parts or parts[0] in self.tree.elsewhere or any(
                    b.kind == "import" and b.qualname is None for b in self.tree.module.get(parts[0], ())) or (
                    qual is not None and any(qual == m or qual.startswith(m + ".") for m in project.modules)):
                return False  # perhaps another module of the project (`DeviceNames.project_target`)
        return True

    # Float64: float64 types, `.double()`, float64 dtype strings and tensors made from float64 NumPy arrays (NM401)
    def float64(self) -> None:
        from neuron_migrate.rules.precision import CONVERTED_AFTER, FLOAT64, FLOAT64_STRINGS, TO_TENSOR

        tree = self.tree
        if any(not FLOAT64.isdisjoint(quals) for quals in tree.imported.values()):
            raise Unsure("a float64 type imported under a name of its own")  # a bare name: the scopes decide
        chained = {id(a.value) for a in tree.attributes}  # a part of a longer chain: not a reference of its own
        for node in tree.attributes:  # `Float64._reference`
            if id(node) in chained or self.qualname(node, "torch.") not in FLOAT64:
                continue
            if node.ctx.__class__ is not ast.Load:
                raise Unsure("a float64 type bound or deleted")  # LibCST reads some targets as references
            self.report("NM401", node, text=self.short(node), what="is a float64 type")
        converted = {id(a.value) for a in tree.attributes if a.attr in CONVERTED_AFTER}
        for call in tree.calls:  # `Float64.visit_Call`
            func = call.func
            if func.__class__ is ast.Attribute and func.attr == "double" and not call.args and not call.keywords:
                self.report("NM401", call, text=self.short(call), what="converts to float64")
                continue
            qual = self.qualname(func) or ""
            if id(call) in tree.in_fstring and qual.startswith("torch."):
                raise Unsure("inside an f-string")  # where Python's places are its own before 3.12
            dtype = next((k for k in call.keywords if k.arg == "dtype"), None)
            if qual.startswith("torch.") and dtype is not None and self._string(dtype.value) in FLOAT64_STRINGS:
                self.report("NM401", dtype, text=self._argument_code(dtype), what="asks for float64")
            if qual in TO_TENSOR and dtype is None and id(call) not in converted and not _star(call):
                source = _first(call)
                if source is not None and (self._numpy_float64(source) or self._float64_name(source)):
                    self.report("NM401", call, text=self.short(call), what="makes a float64 tensor from a NumPy "
                                "array (NumPy's default dtype is float64)")

    def _string(self, node: ast.expr) -> str | None:
        """`patterns.string_value`: the value of one str literal (not joined to another, not an f-string)."""
        if node.__class__ is not ast.Constant or node.value.__class__ is not str or id(node) in self.tree.in_fstring:
            return None
        pieces = lean.literals(self.tree.segment(node))
        return node.value if pieces is not None and len(pieces) == 1 else None

    def _argument_code(self, keyword: ast.keyword) -> str:
        """`patterns.short` of LibCST's argument for `keyword`: its text, with the comma after it and the white
        space around that comma (which LibCST's argument holds), on one line."""
        tree = self.tree
        text = tree.segment(keyword)
        line = tree.line_text(keyword.end_lineno)
        rest = line[tree.column(keyword.end_lineno, keyword.end_col_offset):].lstrip(" \t\f")
        if "\n" in text or not rest or rest[0] not in ",)":
            raise Unsure("an argument over several lines")
        if rest[0] == ",":
            after = rest[1:]
            if "#" in after or "\\" in after:
                raise Unsure("a comment or a line continuation after the argument's comma")
            if not after.strip():
                lines, at = tree._lines(), keyword.end_lineno
                while at < len(lines) and (not lines[at].strip() or lines[at].lstrip().startswith("#")):
                    if lines[at].lstrip().startswith("#"):
                        raise Unsure("a comment line after the argument's comma")  # the comma's white space
                    at += 1
            text += ","
        return notes.one_line(text)

    def _numpy_float64(self, expr: ast.expr) -> bool:
        """`Float64._numpy_float64`: a NumPy array whose dtype is float64."""
        from neuron_migrate.rules.precision import NUMPY_FLOAT_DEFAULT, NUMPY_FROM_VALUES

        if expr.__class__ is not ast.Call:
            return False
        func, first = expr.func, _first(expr)
        if func.__class__ is ast.Attribute and func.attr == "astype" and first is not None:
            return self._float64_dtype(first)
        qual = self.qualname(func)
        dtype = next((k for k in expr.keywords if k.arg == "dtype"), None)
        if dtype is not None:
            return qual in NUMPY_FLOAT_DEFAULT | NUMPY_FROM_VALUES and self._float64_dtype(dtype.value)
        if qual in NUMPY_FLOAT_DEFAULT:
            return True
        return qual in NUMPY_FROM_VALUES and first is not None and _float_literal(first)

    def _float64_dtype(self, expr: ast.expr) -> bool:
        from neuron_migrate.rules.precision import FLOAT64_STRINGS, NUMPY_FLOAT64

        if self._string(expr) in FLOAT64_STRINGS:
            return True
        if expr.__class__ is ast.Name and expr.id == "float" and self.names().lookup("float", self.scope(expr)) \
                is None:
            return True  # the builtin
        return self.qualname(expr) in NUMPY_FLOAT64

    def _float64_name(self, expr: ast.expr) -> bool:
        """`Float64._float64_name`: a name whose last assignment in its scope before `expr` (in LibCST's walk, which
        meets an assignment before the code of its value) is a float64 NumPy array."""
        if expr.__class__ is not ast.Name:
            return False
        if self._assigned is None:
            self._assigned = {}
            for node in ast.walk(self.module):
                if node.__class__ is ast.Assign and len(node.targets) == 1 and node.targets[0].__class__ is ast.Name:
                    target = node.targets[0]
                    key = (id(self.scope(target)), target.id)
                    self._assigned.setdefault(key, []).append(((node.lineno, node.col_offset), node.value))
            for assigned in self._assigned.values():
                assigned.sort(key=lambda item: item[0])
        at, last = (expr.lineno, expr.col_offset), None
        for start, value in self._assigned.get((id(self.scope(expr)), expr.id), ()):
            if start >= at:
                break
            last = value
        return last is not None and self._numpy_float64(last)

    # EnvironmentVariable: a variable of the XLA stack named in a string literal (NM403-NM405)
    def environment(self) -> None:
        from neuron_migrate.rules.environment import READ_CODE, READ_FIELDS, code_for, env_pattern, env_table

        tree, pattern, table = self.tree, env_pattern(), env_table()
        named = []
        for string in tree.strings:
            if _env_names().search(string.value) is None:
                continue
            if id(string) in tree.in_fstring:
                raise Unsure("a variable named in an f-string")  # LibCST's literal parts are no strings
            pieces = lean.literals(tree.segment(string))
            if pieces is None or len(pieces) != 1:
                raise Unsure("a variable named in strings joined implicitly")  # LibCST visits each piece
            match = pattern.search(string.value)
            if match is not None:
                named.append((string, match.group(1)))
        named.sort(key=lambda item: (item[0].lineno, item[0].col_offset))  # LibCST's walk: the file's order
        keys = self._statement_keys() if named else {}
        seen, reads, set_here = set(), [], set()
        for string, name in named:  # `EnvironmentVariable.visit_SimpleString`
            statement = tree.statement[id(string)]
            key = (keys[id(statement)], name)
            if key in seen:
                continue  # one finding for each statement and variable
            seen.add(key)
            entry = table[name]
            if entry.get("bf16") and string.value == name and self._env_read(string, statement):
                reads.append((string, name))
                continue
            value, removable = self._env_setting(string, statement) if string.value == name else (None, False)
            code = code_for(name, value, removable)
            if code == "NM403":
                set_here.add(name)
            elif code == "NM404" and self.patched is None:
                raise Unsure("a removal in a file that patches a function")  # the fix pass checks self-calls
            self.report(code, string, var=name, did=entry["did"], instead=entry["instead"])
        project = self.settings.project
        elsewhere = set(project.sets_env) if project is not None else set()
        for string, name in reads:  # `EnvironmentVariable.finish`
            if name not in set_here and name not in elsewhere:
                self.report(READ_CODE, string, var=name, **READ_FIELDS)

    def _env_read(self, string: ast.Constant, statement: ast.stmt) -> bool:
        """`EnvironmentVariable._read`: the string names the variable only to read it (`os.environ.get(NAME)`,
        `os.getenv(NAME)`, `os.environ[NAME]` not assigned nor deleted, `NAME in os.environ`)."""
        from neuron_migrate.rules.environment import OS_ENVIRON, READERS

        parent = self.tree.parents[id(string)]
        kind = parent.__class__
        if kind is ast.Call:
            return bool(parent.args) and parent.args[0] is string and self.qualname(parent.func) in READERS
        if kind in (ast.keyword, ast.Starred):
            raise Unsure("a variable named as a keyword's or a star's value")
        if kind is ast.Subscript:
            if parent.slice is not string or self.qualname(parent.value) != OS_ENVIRON:
                return False
            kind = statement.__class__  # LibCST's small statement: `del a, b` deletes one tuple
            targets = statement.targets if kind is ast.Assign else [statement.target] \
                if kind in (ast.AugAssign, ast.AnnAssign) else statement.targets[:1] \
                if kind is ast.Delete and len(statement.targets) == 1 else []
            return all(t is not parent for t in targets)
        if kind is ast.Compare:
            return parent.left is string and len(parent.ops) == 1 \
                and parent.ops[0].__class__ in (ast.In, ast.NotIn) \
                and self.qualname(parent.comparators[0]) == OS_ENVIRON
        return False

    def _env_setting(self, string: ast.Constant, statement: ast.stmt) -> tuple[str | None, bool]:
        """`EnvironmentVariable._setting`: (the value, True) where the statement only sets the variable to a
        literal (`os.environ[NAME] = "1"`, `os.environ.setdefault(NAME, "1")`, `os.putenv(NAME, "1")`)."""
        from neuron_migrate.rules.environment import OS_ENVIRON, SETTERS

        kind = statement.__class__
        if kind is ast.Assign and len(statement.targets) == 1:
            target = statement.targets[0]
            if target.__class__ is ast.Subscript and self.qualname(target.value) == OS_ENVIRON:
                if target.slice.__class__ is ast.Slice:
                    raise Unsure("a slice of os.environ assigned")  # where the rule fails
                if target.slice is string:
                    value = self._string(statement.value)
                    return (value, True) if value is not None else (None, False)
        if kind is ast.Expr and statement.value.__class__ is ast.Call:
            call = statement.value
            if len(call.args) + len(call.keywords) == 2 and _argument(call, 0, "key") is string \
                    and _argument(call, 1, "value") is not None and self.qualname(call.func) in SETTERS:
                value = self._string(_argument(call, 1, "value"))
                return (value, True) if value is not None else (None, False)
        return None, False

    def _statement_keys(self) -> dict[int, int]:
        """For each statement of Python's tree, the LibCST statement that holds it (by its first statement's id):
        a compound statement is its own; simple statements joined by `;` are one line; a block written on its
        header's line (`if x: a; b`) belongs to its compound statement, an `except` or `case` block's to the
        `try` or `match`."""
        lines = self.tree._lines()
        keys: dict[int, int] = {}
        stack: list[tuple[list, ast.stmt | None]] = [(self.module.body, None)]
        while stack:
            body, owner = stack.pop()
            if not body:
                continue
            first = body[0]
            line = lines[first.lineno - 1]
            suite = owner is not None and line[:lean.column(line, first.col_offset)].rstrip().endswith(":")
            head = first
            for i, statement in enumerate(body):
                if i and body[i - 1].end_lineno != statement.lineno:
                    head = statement
                if statement.__class__ in _COMPOUND:
                    keys[id(statement)] = id(statement)
                    for name in ("body", "orelse", "finalbody"):
                        stack.append((getattr(statement, name, None) or [], statement))
                    for inner in (*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())):
                        stack.append((inner.body, statement))
                else:
                    keys[id(statement)] = id(owner) if suite else id(head)
        return keys

    # NeuronLibrary: the Neuron libraries of the XLA stack where they are imported, one finding per library (NM506),
    # and optimum-neuron's inference classes (NM524, or NM510 where the target keeps the XLA inference path)
    def library(self) -> None:
        from neuron_migrate.rules.inference import HLO_SNAPSHOT, library_fields, library_import, optimum_finding

        tree = self.tree
        if any(self.qualname(call.func) == HLO_SNAPSHOT for call in tree.calls):
            raise Unsure("libneuronxla's snapshot hook")  # NM258 removes it, and the imports only it reads
        found: dict[str, list[tuple[ast.AST, str, str, bool]]] = {}
        for node in sorted(tree.imports, key=lambda n: (n.lineno, n.col_offset)):  # LibCST's walk: the file's order
            if node.__class__ is ast.Import:
                parts = [(alias, alias.name, None) for alias in node.names]
            elif node.level or node.module is None:
                continue
            else:
                names = [a.name for a in node.names]
                parts = [(node, node.module, None if "*" in names else names)]
            for where, module, names in parts:
                served, library, hint, classes_only = library_import(module, names)
                if served:
                    code, fields = optimum_finding(served, self.settings)
                    self.report(code, where, **fields)
                if library is not None and (not classes_only or self.optimum_kept):  # (those NM509 keeps)
                    found.setdefault(library, []).append((where, module, hint, classes_only))
        for library, imports in found.items():  # `NeuronLibrary.finish`
            if all(classes_only for *_, classes_only in imports):
                continue  # nothing but the trainer classes: NM509 says what to port
            where, module, *_ = imports[0]
            self.report("NM506", where, **library_fields(library, module, [hint for _, _, hint, _ in imports]))

    # NxdInference: NxD Core's inference tracing and model builders, where they are imported by name or called
    # through a module, and NxD Inference, one finding at its first import (NM507; NM510 where the target keeps the
    # XLA inference path)
    def nxd(self) -> None:
        from neuron_migrate.rules.inference import NXD_INFERENCE, NXD_TRACE, nxd_finding, nxd_trace_import

        tree = self.tree
        inference: list[tuple[ast.stmt, str]] = []  # the imports of NxD Inference, and the module each names
        for node in sorted(tree.imports, key=lambda n: (n.lineno, n.col_offset)):  # LibCST's walk: the file's order
            if node.__class__ is ast.Import:
                module = next((a.name for a in node.names if a.name.split(".")[0] == NXD_INFERENCE), None)
                if module is not None:
                    inference.append((node, module))
            elif not node.level and node.module is not None:
                module = node.module
                if module.split(".")[0] == NXD_INFERENCE:
                    inference.append((node, module))
                    continue
                names = [a.name for a in node.names]
                found = None if "*" in names else nxd_trace_import(module, names)
                if found is not None:
                    code, fields = nxd_finding(*found, self.settings)
                    self.report(code, node, **fields)
        for call in tree.calls:
            if call.func.__class__ is ast.Attribute:
                what = NXD_TRACE.get(self.qualname(call.func) or "")
                if what is not None:
                    code, fields = nxd_finding(self.short(call), what, self.settings)
                    self.report(code, call, **fields)
        if inference:  # `NxdInference.finish`
            (node, module), n = inference[0], len(inference)
            code, fields = nxd_finding(NXD_INFERENCE if n > 1 else module,
                                       "NxD Inference" + (f" ({n} imports in this file)" if n > 1 else ""),
                                       self.settings)
            self.report(code, node, **fields)

    # NeuronxTrace: torch_neuronx's traces with compiler options, a star or other arguments (NM502), the saves and
    # loads of traced models (NM502), torch_neuronx's DataParallel and loading helpers (NM503, NM504), the XLA-era
    # NKI entry points (NM505) and the NKI namespace bundled with neuronx-cc (NM505, once a file); NM510 on each
    # trace where the target keeps the XLA inference path. A trace the rule rewrites (NM501) goes to LibCST.
    def neuronx_trace(self) -> None:
        from neuron_migrate.rules import inference

        tree = self.tree
        maintained = inference.release.xla_inference_maintained(self.settings)
        for call in tree.calls:  # `NeuronxTrace.visit_Call`
            qual = self.qualname(call.func)
            if qual == inference.TRACE:
                if maintained:
                    self.report("NM510", call, call=self.short(call), what=inference.TRACE_NOTE,
                                **inference.maintained_fields(self.settings))
                    continue
                named = {k.arg for k in call.keywords}
                if not (_star(call) or len(call.args) + len(call.keywords) != 2
                        or (not call.args and "func" not in named)
                        or (len(call.args) < 2 and "example_inputs" not in named)):
                    raise Unsure("a trace the rule rewrites")  # NM501: its message is the rewritten code
                self.report("NM502", call, **inference.trace_options_fields(self.short(call)))
            elif qual in inference.JIT_ARTIFACT and not maintained and self._uses_neuronx():
                self.report("NM502", call, **inference.artifact_fields(self.short(call), None,
                                                                       load=qual == inference.JIT_LOAD))
        if maintained:
            return
        nki: list[ast.AST] = []  # the imports of the NKI namespace bundled with neuronx-cc, then its reads
        for node in tree.imports:  # `visit_Import`, `visit_ImportFrom`
            if node.__class__ is ast.Import:
                bundled = any(inference._bundled_nki(a.name) for a in node.names)
            else:
                module = None if node.level else node.module
                bundled = inference._bundled_nki(module) or (
                    module == "neuronxcc" and any(a.name == "nki" for a in node.names))
            if bundled:
                nki.append(node)
        nki.sort(key=lambda n: (n.lineno, n.col_offset))
        imported = len(nki)
        for node, qual in self._references(inference.NEURONX_API):  # `_reference`
            found = lookup(inference.NEURONX_API, qual)
            if inference._bundled_nki(qual):
                nki.append(node)
            else:
                self.report(found, node, **inference.api_fields(found, qual, ".".join(_dotted(node))))
        if nki:  # `_nki_finding`: at the first import, or the first read
            self.report("NM505", nki[0], **inference.nki_fields(len(nki) - imported))

    def _uses_neuronx(self) -> bool:
        """`facts.imports_neuron_libraries and not facts.inferentia1`."""
        from neuron_migrate.rules.inference import NEURON_ROOTS

        return any(q.split(".")[0] in NEURON_ROOTS for quals in self.tree.imported.values() for q in quals) \
            and not notes.inferentia1(self.tree)

    def _references(self, table: dict[str, str], exact: bool = False) -> list[tuple[ast.expr, str]]:
        """`unsupported.reference` of every whole name chain read in the file that is one of `table`'s names (`exact`)
        or under one of them, in LibCST's order (the file's), with its qualified name; Unsure where a name an import
        binds to one of them stands where LibCST's tree holds a name that Python's does not (a definition, a
        parameter, `global`), is bound by something other than an assignment, or is read inside an f-string."""
        roots = {q.split(".")[0] for q in table}
        names = {n for n, quals in self.tree.imported.items() if any(q.split(".")[0] in roots for q in quals)}
        if not names:
            return []
        for node in ast.walk(self.module):
            kind = node.__class__
            if kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef) and node.name in names \
                    or kind is ast.arg and node.arg in names \
                    or kind in (ast.Global, ast.Nonlocal) and names.intersection(node.names) \
                    or kind in (ast.ExceptHandler, ast.MatchAs, ast.MatchStar) and node.name in names \
                    or kind is ast.MatchMapping and node.rest in names:
                raise Unsure("a name of the API that LibCST's tree holds where Python's does not")
            if kind is ast.JoinedStr and any(n.__class__ is ast.Name and n.id in names for n in ast.walk(node)):
                raise Unsure("the API named in an f-string")  # where Python's places are its own
        targets, chained = self._targets(), self._chained()
        found = []
        for node, _ in self.names().names:
            if id(node) in chained:
                continue
            parts = _dotted(node)
            if not parts or parts[0] not in names:
                continue
            qual = self.qualname(node)
            if qual is None or (qual not in table if exact else lookup(table, qual) is None):
                continue
            if node.ctx.__class__ is not ast.Load:
                if id(node) in targets:
                    continue  # `unsupported.reference`: a name bound here is not a read of the API
                raise Unsure("the API bound or deleted")
            found.append(node)
        found.sort(key=lambda n: (n.lineno, n.col_offset))
        return [(node, self.qualname(node)) for node in found]

    def _chained(self) -> set[int]:
        """The ids of the names and attributes that are a part of a longer chain: no reference of their own."""
        if self._parts is None:
            self._parts = {id(a.value) for a in self.tree.attributes}
        return self._parts

    def _targets(self) -> dict[int, type]:
        """The id of each target of an assignment, an annotated or an augmented one (not one inside a tuple) ->
        the kind of its statement."""
        if self._assign_targets is None:
            self._assign_targets = {
                id(t): n.__class__ for n in ast.walk(self.module) if n.__class__ in (ast.Assign, ast.AnnAssign,
                                                                                    ast.AugAssign)
                for t in (n.targets if n.__class__ is ast.Assign else (n.target,))}
        return self._assign_targets

    # OptimumNeuronTrainer: optimum-neuron's trainer classes become transformers' / trl's (NM508) where nothing of the
    # program needs the Neuron class; each reason it does gets NM509, and its imports count for NM506
    def optimum_trainer(self) -> None:
        from neuron_migrate.rules import huggingface as hf

        classes, helpers = hf.classes(), hf.helpers()
        uses, others = [], []
        for node, qual in self._references({**classes, **helpers}, exact=True):  # `_reference`
            (uses if qual in classes else others).append((node, qual))
        if not uses:
            return
        only, attributes = hf.neuron_only(), hf.neuron_only_attributes()
        blocking, splat = [], False
        for call in self.tree.calls:  # `visit_Call`
            qual = self.qualname(call.func)
            if qual in classes:
                splat = splat or any(k.arg is None for k in call.keywords)
                blocking += [(k, k.arg, qual) for k in call.keywords if k.arg in only]
        if any(set(name.split(".")) & attributes.keys() for node in self.tree.imports
               for name in [getattr(node, "module", None) or "", *(a.name for a in node.names)]):
            raise Unsure("an import that names a Neuron-only attribute")  # an attribute of LibCST's, not Python's
        reads = self._attribute_reads(attributes)
        if blocking or reads or others or (self.settings.project is not None and self.settings.project.neuron_flags):
            self._held(uses, blocking, reads, others)
            return
        if splat:
            return
        if self.patched is None:
            raise Unsure("a rewrite in a file that patches a function")  # the fix pass checks self-calls
        for node, qual in uses:
            self.report("NM508", node, name=self._code_of(node), what=hf.WHAT.get(qual.rpartition(".")[2], "class"),
                        fixed=classes[qual])

    def _held(self, uses: list, blocking: list, reads: list, others: list) -> None:
        """`OptimumNeuronTrainer._held`: an NM509 finding for each reason the program still needs the class."""
        from neuron_migrate.rules import huggingface as hf

        classes = hf.classes()
        self.optimum_kept = True  # `facts.optimum_classes_kept`: NeuronLibrary counts the classes' imports
        for keyword_, name, qual in blocking:
            fixed = classes[qual]
            self.report("NM509", keyword_, argument=name, fixed=fixed, native=hf.neuron_only()[name],
                        name=qual.rpartition(".")[2],
                        subject=f"`{name}` is an optimum-neuron argument that `{fixed}` does not have")
        node, qual = next(((n, q) for n, q in uses if q.endswith(hf._ARGUMENTS)), uses[0])
        fixed, short = classes[qual], qual.rpartition(".")[2]
        for read, attribute in reads:
            self.report("NM509", read, argument=attribute, fixed=fixed, name=short,
                        native=hf.neuron_only_attributes()[attribute],
                        subject=f"`{self._code_of(read)}` reads `{attribute}`, which optimum-neuron's `{short}` has "
                                f"and `{fixed}` does not")
        for other, helper in others:
            self.report("NM509", other, argument=helper.rpartition(".")[2], fixed=fixed, name=short,
                        native=hf.helpers()[helper],
                        subject=f"`{self._code_of(other)}` (`{helper}`) stays on optimum-neuron, with `{short}`")
        project = self.settings.project
        for item in project.neuron_flags if project is not None else ():
            flag, _, launcher = item.partition(":")
            self.report("NM509", node, argument=flag, fixed=fixed, name=short, native=hf.neuron_only()[flag],
                        subject=f"`{launcher}` passes this program `--{flag}`, an optimum-neuron argument that "
                                f"`{fixed}` does not have")

    def _attribute_reads(self, attributes: dict[str, str]) -> list[tuple[ast.AST, str]]:
        """What the file reads of the Neuron arguments object (`visit_Attribute`, and `getattr(x, "name")` /
        `hasattr` in `visit_Call`), less the fields its own classes declare (`visit_ClassDef`, `self.x = ...`)."""
        tree, own, reads = self.tree, set(), []
        targets = self._targets()
        for node in tree.attributes:
            if node.attr not in attributes:
                continue
            value = node.value
            if targets.get(id(node)) is ast.Assign and value.__class__ is ast.Name and value.id == "self":
                own.add(node.attr)  # `self.tensor_parallel_size = tp`: the file's own object
            else:
                reads.append((node, node.attr))
        for call in tree.calls:
            func = call.func
            if func.__class__ is not ast.Name or func.id not in ("getattr", "hasattr") \
                    or len(call.args) + len(call.keywords) < 2:
                continue
            if len(call.args) < 2 or any(a.__class__ is ast.Starred for a in call.args[:2]):
                raise Unsure("getattr's name as a keyword or a star")  # LibCST's second argument
            name = call.args[1]
            if name.__class__ is ast.Constant and name.value.__class__ is str and name.value in attributes \
                    and self.qualname(func) is None:
                if not _ONE_STRING.fullmatch(tree.segment(name)):
                    raise Unsure("getattr's name in strings joined implicitly")  # no SimpleString to LibCST
                reads.append((call, name.value))
        if not reads:
            return reads
        for node in ast.walk(self.module):
            if node.__class__ is not ast.ClassDef or not node.body:
                continue
            first = node.body[0]
            if self.tree.line_text(first.lineno)[:self.tree.column(first.lineno, first.col_offset)].strip():
                continue  # `class A: x = 1`: a body on the header's line is no block of statement lines to LibCST
            for statement in node.body:
                if statement.__class__ is ast.AnnAssign and statement.target.__class__ is ast.Name:
                    own.add(statement.target.id)
                elif statement.__class__ is ast.Assign:
                    own.update(t.id for t in statement.targets if t.__class__ is ast.Name)
        return [(node, attribute) for node, attribute in reads if attribute not in own]

    def _code_of(self, node: ast.AST) -> str:
        """`patterns.code` of a name chain or call on one line: its text, with the parentheses LibCST gives it."""
        span = self._parentheses(node)
        if span is None:
            text = self.tree.segment(node)
        elif span[0][0] == span[1][0]:
            text = self.tree._lines()[span[0][0]][span[0][1]:span[1][1]]
        else:
            raise Unsure("code over several lines")
        if "\n" in text or "\r" in text:
            raise Unsure("code over several lines")  # LibCST writes its own
        return text

    # UnsupportedApi: PyTorch APIs the native backend does not run as written (NM301-NM306)
    def unsupported_api(self) -> None:
        from neuron_migrate.rules import release
        from neuron_migrate.rules.unsupported import (DENSE, DENSE_GRADIENTS, SPARSE_GRADIENT, TO_SPARSE,
                                                      UNSUPPORTED, spelled_as_text)

        torchao = release.torchao_supported(self.settings)
        for node, qual in self._references(UNSUPPORTED):  # `UnsupportedApi._reference`
            code = lookup(UNSUPPORTED, qual)
            if code == "NM306" and torchao:
                continue  # MX formats: supported through TorchAO Neuron on this target
            spelled = ".".join(_dotted(node))
            if self.tree.segment(node) != spelled:
                raise Unsure("a dotted name written with spaces, lines or parentheses")
            self.report(code, node, hint=DENSE, status=release.torchao_status(self.settings),
                        **spelled_as_text(spelled, qual))
        for call in self.tree.calls:  # `UnsupportedApi.visit_Call`
            func = call.func
            if func.__class__ is ast.Attribute and func.attr in TO_SPARSE:
                if lookup(UNSUPPORTED, self.qualname(func)) is None:
                    raise Unsure("a conversion to a sparse layout")  # reported on the attribute's name: no node here
            if self.qualname(func) in SPARSE_GRADIENT:
                sparse = next((k for k in call.keywords if k.arg == "sparse"), None)
                if sparse is not None and sparse.value.__class__ is ast.Constant and sparse.value.value is True:
                    self.report("NM301", sparse, name=self.short(call), qualname=" (sparse gradients)",
                                hint=DENSE_GRADIENTS)

    # Inferentia1 (NM513, once per file where Inf1 code first shows) and InstanceType (NM520, a string that asks for
    # a trn1 instance): the notes' own decisions (engine/notes.py), in a file that tests for no backend
    def inferentia1(self) -> None:
        self._notes("inferentia1")

    def instance_type(self) -> None:
        self._notes("instance_type")

    def _notes(self, rule: str) -> None:
        """The notes' own decisions (engine/notes.py), each let through by the code paths where the file tests for
        a backend. Inf1's names resolve in the module scope only there, so that rule is left to LibCST in such a
        file; a trn1 instance is a string literal, which no scope changes."""
        if self.paths is not None and rule != "instance_type":
            raise Unsure("a file that tests for a backend")  # the notes resolve names in the module scope only
        decided = notes._Notes(self.path, self.tree, self.settings)
        getattr(decided, rule)()
        self.found += [found for found in decided.found if self._allowed(found[0], found[1])]

    # TensorParallel: NxD's tensor-parallel layers, where the rule marks them (NM230); its rewrite is LibCST's
    def tensor_parallel(self) -> None:
        """`sharding.TensorParallel` where it reports NM230 on every layer: a layer not set in a model definition's
        `__init__` at once, then the others with the first reason the rule finds (`_map_layers`, then the model's
        build and `initialize_model_parallel`). Where the rule would rewrite (NM233, whose fix spells the plan),
        or where a reason rests on a statement's neighbours on its line, the file is left to LibCST."""
        from neuron_migrate.rules import sharding as tp

        layers: list[tuple[ast.Call, str, str, str]] = []  # (call, class, attribute, kind), in LibCST's order
        children: dict[str, list[tuple[str, str]]] = {}  # class -> [(attribute path part, child class)]
        inits: list[ast.Call] = []
        builds: list[tuple[ast.Call, str, int]] = []  # (call, class, order)
        calls = sorted(self.tree.calls, key=notes._place)  # LibCST's walk meets them in this order
        order = {id(call): i for i, call in enumerate(calls)}
        in_fstring = self.tree.in_fstring
        for call in calls:
            func = call.func
            qual = self.qualname(func) if func.__class__ in (ast.Name, ast.Attribute) else None
            if id(call) in in_fstring and (qual is not None or func.__class__ is ast.Name):
                raise Unsure("a call the rule reads inside an f-string")  # placed by LibCST's walk
            if qual in tp.LAYERS:
                where = self._attribute_of(call)
                if where is None:
                    self.report("NM230", call, call=self.short(call), fixed=f"{tp.TP_HINT} (the layer is not set "
                                "in a model definition's `__init__`)", todo=tp.TODO_TP)
                else:
                    layers.append((call, *where, tp.LAYERS[qual]))
            elif qual in tp.INIT_TP:
                inits.append(call)
            elif func.__class__ is ast.Name:
                where = self._attribute_of(call)
                statement = self.tree.statement.get(id(call))
                if where is not None:
                    children.setdefault(where[0], []).append((where[1], func.id))
                elif statement.__class__ is ast.Assign and len(statement.targets) == 1 \
                        and statement.targets[0].__class__ is ast.Name \
                        and self.scope(func).kind in ("module", "function") \
                        and (statement.value is call or _moved(statement.value, call)):
                    builds.append((call, func.id, order[id(call)]))
            elif func.__class__ is ast.Attribute and qual in tp.MODULE_LIST:
                self._module_list(call, children)
        if not layers:
            return
        why = self._unmapped(layers)

        def paths(cls: str, seen: frozenset = frozenset()) -> bool:  # `TensorParallel._paths` is not empty
            if cls in seen:
                return False
            return any(owner == cls for _call, owner, _attribute, _kind in layers) \
                or any(paths(child, seen | {cls}) for _attribute, child in children.get(cls, ()))

        roots = [b for b in builds if paths(b[1])]
        if not why:
            if len(inits) != 1:
                why = "`initialize_model_parallel(...)` is not called once in this file"
            elif len(roots) != 1:
                why = "the model is not built once in this file"
            else:
                init, build = inits[0], roots[0]
                size = _argument(init, 0, "tensor_model_parallel_size")
                statement = self.tree.statement.get(id(init))
                if self.scope(build[0].func) is not self.scope(init.func) or order[id(init)] > build[2]:
                    why = "the model is not built after `initialize_model_parallel(...)` in the same function"
                elif size is None or len(init.args) + len(init.keywords) != 1:
                    why = "`initialize_model_parallel(...)` takes more than the tensor-parallel size"
                elif statement.__class__ is not ast.Expr or statement.value is not init:
                    why = "`initialize_model_parallel(...)` is not a statement of its own"
                else:  # NM233, or a statement that shares its line (`;`)
                    raise Unsure("a tensor-parallel rewrite")
        for call, _owner, _attribute, _kind in layers:
            self.report("NM230", call, call=self.short(call), fixed=f"{tp.TP_HINT} ({why})", todo=tp.TODO_TP)

    def _attribute_of(self, call: ast.Call) -> tuple[str, str] | None:
        """`TensorParallel._attribute_of`: (class, attribute) of `self.<attribute> = <call>` alone in a class's
        `__init__`."""
        statement = self.tree.statement.get(id(call))
        if statement.__class__ is not ast.Assign or statement.value is not call or len(statement.targets) != 1:
            return None
        scope = self.scope(call.func)  # a name or a dotted name: the callers resolved it
        if scope.kind != "function" or scope.parent is None or scope.parent.kind != "class" \
                or scope.node.name != "__init__":
            return None
        target = statement.targets[0]
        if target.__class__ is ast.Attribute and target.value.__class__ is ast.Name and target.value.id == "self":
            return scope.parent.node.name, target.attr
        return None

    def _module_list(self, call: ast.Call, children: dict[str, list[tuple[str, str]]]) -> None:
        """`self.blocks = nn.ModuleList(Block(...) for _ in ...)`: the class of the list's items, under `blocks.*`
        (`TensorParallel.visit_Attribute`)."""
        where = self._attribute_of(call)
        if where is None:
            return
        inner = _argument(call, 0, "modules")
        if inner.__class__ in (ast.GeneratorExp, ast.ListComp):
            inner = inner.elt
        elif inner.__class__ is ast.List and inner.elts:
            inner = inner.elts[0]
            if inner.__class__ is ast.Starred:
                raise Unsure("a starred element")  # LibCST's element holds the star
        if inner.__class__ is ast.Call and inner.func.__class__ is ast.Name:
            children.setdefault(where[0], []).append((f"{where[1]}.*", inner.func.id))

    def _unmapped(self, layers: list[tuple[ast.Call, str, str, str]]) -> str:
        """`TensorParallel._map_layers`: why the first layer that cannot be made a plain layer cannot; "" where
        every one can."""
        from neuron_migrate.rules import sharding as tp

        for call, _owner, _attribute, kind in layers:
            arguments = sorted([*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset))
            if any(a.__class__ is ast.Starred or (a.__class__ is ast.keyword and a.arg is None) for a in arguments):
                return "a layer takes `*args` / `**kwargs`"
            if kind == "ParallelEmbedding":
                values = {name: _argument(call, i, name) for i, name in enumerate(tp.EMBEDDING_PASSED)}
                passed = {id(v) for v in values.values() if v is not None}
                if any(id(_value(a)) not in passed for a in arguments):
                    return "an argument `ParallelEmbedding` does not take"
                sparse = values["sparse"]
                if sparse is not None and _literal(sparse) != "False":
                    return "`sparse` of `ParallelEmbedding`"
                init, pad = values.pop("init_method"), values.pop("pad")
                if init is not None or (pad is not None and _literal(pad) != "False"):
                    return f"`{'init_method' if init is not None else 'pad'}` of `ParallelEmbedding`"
                across = values.pop("shard_across_embedding")
                if (_literal(across) if across is not None else "False") not in ("True", "False"):
                    return "`shard_across_embedding` is not a literal"
            else:
                values = {name: _argument(call, i, name) for name, i in tp.LINEAR_PASSED.items()}
                passed = {id(v) for v in values.values() if v is not None}
                flag = "gather_output" if kind == "ColumnParallelLinear" else "input_is_parallel"
                known = set(tp.LINEAR_PASSED) | tp.LINEAR_DROPPED | set(tp.LINEAR_DEFAULTS) | {flag}
                fourth = _argument(call, 3, None)
                for a in arguments:
                    name = a.arg if a.__class__ is ast.keyword else None
                    if name is not None and name not in known:
                        return f"`{name}` of `{kind}`"
                    if name is None and id(a) not in passed and a is not fourth:
                        return f"positional options of `{kind}`"
                    if name in tp.LINEAR_DEFAULTS and (_literal(a.value) or "") != tp.LINEAR_DEFAULTS[name] \
                            and not (name == "stride" and self._spelled_one(a.value)):
                        return f"`{name}` of `{kind}`"
                given = _argument(call, 3, flag)
                value = _literal(given) if given is not None else ("True" if flag == "gather_output" else "False")
                if value not in ("True", "False"):
                    return f"`{flag}` is not a literal"
            if any(v is None for k, v in values.items() if k in ("input_size", "output_size", "num_embeddings",
                                                                  "embedding_dim")):
                return f"the sizes of `{kind}` are not passed plainly"
        return ""

    def _spelled_one(self, value: ast.expr) -> bool:
        """LibCST's code for `value` is `1`: the literal spelled so, in no parentheses of its own."""
        return value.__class__ is ast.Constant and self.tree.segment(value) == "1" and self._parentheses(value) is None

    def scope(self, node: ast.expr) -> Scope:
        """The scope a name or attribute of the tree is read in (engine/treenames.py)."""
        if self._scopes is None:
            self._scopes = {id(n): scope for n, scope in self.names().names}
        return self._scopes[id(node)]


def _switch(call: ast.Call) -> bool | None:
    """`execution._switch`: the call's one argument (`enable`) is the literal True or False; None otherwise."""
    given = [*call.args, *call.keywords]
    if len(given) != 1 or (call.keywords and call.keywords[0].arg != "enable"):
        return None
    value = _value(given[0])
    return value.value if value.__class__ is ast.Constant and value.value.__class__ is bool else None


def _is_self(name: str, scope: Scope) -> bool:
    """`compile._is_self` on the scopes of Python's tree: `name` is the first parameter (not positional-only) of
    the undecorated method (`async` too, a FunctionDef to LibCST) `scope` is the body of."""
    node = scope.node
    if scope.kind != "function" or scope.parent is None or scope.parent.kind != "class" \
            or node.__class__ not in (ast.FunctionDef, ast.AsyncFunctionDef) or not node.args.args:
        return False
    return node.args.args[0].arg == name and not node.decorator_list


def _number_or_name(value: ast.expr, tree: notes._Tree) -> str:
    """LibCST's code for an argument that is a name or a number (signed) as written; Unsure for anything else."""
    inner = value.operand if value.__class__ is ast.UnaryOp and value.op.__class__ is ast.USub else value
    if value.__class__ is ast.Name or (inner.__class__ is ast.Constant and inner.value.__class__ is int):
        text = tree.segment(value)
        if "\n" not in text and "#" not in text and "\\" not in text:
            return text
    raise Unsure("an argument LibCST may spell otherwise")


def _loose(parent: ast.AST, node: ast.expr) -> bool:
    """`isinstance(<LibCST's parent>, rewrites.LOOSE_PARENTS)` on Python's tree: `node` is an argument (not
    starred), a keyword's value, the test of an `if` or a `while`, an assigned or returned value, a part of
    `a if c else b` or of `a and b`, or a statement of its own."""
    kind = parent.__class__
    if kind is ast.Call:
        return node is not parent.func
    if kind is ast.Starred:
        raise Unsure("a starred argument")
    return kind in (ast.keyword, ast.If, ast.While, ast.Assign, ast.AnnAssign, ast.IfExp, ast.Return, ast.BoolOp,
                    ast.Expr)


def _identifiers(expr: ast.expr) -> list[str]:
    """`checkpoint._names` on Python's tree: the identifiers LibCST holds as names in `expr` (a name, an attribute
    taken, a keyword's name, a lambda's parameter)."""
    found = []
    for node in ast.walk(expr):
        kind = node.__class__
        if kind is ast.Name:
            found.append(node.id)
        elif kind is ast.Attribute:
            found.append(node.attr)
        elif kind is ast.keyword and node.arg is not None:
            found.append(node.arg)
        elif kind is ast.arg:
            found.append(node.arg)
    return found


def _star(call: ast.Call) -> bool:
    return any(a.__class__ is ast.Starred for a in call.args) or any(k.arg is None for k in call.keywords)


def _first(call: ast.Call) -> ast.expr | None:
    """The value of the call's first argument as written (LibCST's `args[0].value`), positional or named."""
    first = min((*call.args, *call.keywords), key=lambda a: (a.lineno, a.col_offset), default=None)
    if first is None:
        return None
    return first.value if first.__class__ in (ast.Starred, ast.keyword) else first


def _float_literal(expr: ast.expr) -> bool:
    """`precision._has_float_literal`: a float literal, signed, or in a list or tuple."""
    if expr.__class__ is ast.Constant:
        return expr.value.__class__ is float
    if expr.__class__ in (ast.List, ast.Tuple):
        return any(_float_literal(e.value if e.__class__ is ast.Starred else e) for e in expr.elts)
    return expr.__class__ is ast.UnaryOp and expr.operand.__class__ is ast.Constant \
        and expr.operand.value.__class__ is float


def _literal(value: ast.expr | None) -> str | None:
    """`sharding._literal`: True / False / None as text (names to LibCST); None for anything else."""
    if value.__class__ is ast.Constant and (value.value is None or value.value.__class__ is bool):
        return repr(value.value)
    return None


def _value(argument: ast.expr | ast.keyword) -> ast.expr:
    return argument.value if argument.__class__ is ast.keyword else argument


def _moved(value: ast.expr, call: ast.Call) -> bool:
    """`sharding._moved`: `Net(...).to(device)`, the build placed."""
    return value.__class__ is ast.Call and value.func.__class__ is ast.Attribute and value.func.attr == "to" \
        and value.func.value is call


def _argument(call: ast.Call, position: int | None, keyword: str | None) -> ast.expr | None:
    """`patterns.arg`: the value of the argument named `keyword`, or else of the one at `position` among the
    positional ones before any star."""
    for k in call.keywords:
        if keyword is not None and k.arg == keyword:
            return k.value
    if position is None:
        return None
    positional = []
    for a in call.args:
        if a.__class__ is ast.Starred:
            break
        positional.append(a)
    return positional[position] if position < len(positional) else None


@functools.lru_cache(maxsize=1)
def _env_names() -> re.Pattern[str]:
    """A variable of the XLA stack's table anywhere in a text, a part of a longer word too."""
    from neuron_migrate.rules.environment import env_table

    return re.compile("|".join(sorted(env_table(), key=len, reverse=True)))


_RULES = {"CudaMethod": "cuda_method", "TorchCudaApi": "torch_cuda_api", "Float64": "float64",
          "EnvironmentVariable": "environment", "NeuronLibrary": "library", "NxdInference": "nxd",
          "Inferentia1": "inferentia1", "InstanceType": "instance_type", "NeuronxTrace": "neuronx_trace",
          "OptimumNeuronTrainer": "optimum_trainer", "TensorParallel": "tensor_parallel",
          "UnsupportedApi": "unsupported_api", "CudaDeviceString": "cuda_device_string",
          "XlaDeviceCall": "xla_device_call", "MarkStep": "mark_step", "Save": "save", "Load": "load",
          "Collectives": "collectives", "RankAndWorldSize": "rank_and_world_size",
          "ProcessGroup": "process_group",
          "EagerStepOfCompiledBase": "eager_step", "CpuCopy": "cpu_copy", "XlaDeviceString": "xla_device_string"}
# rules whose findings take reads of torch_xla names away (their fixes: `_Decisions.fixes`) or keep them handled
_TAKE_READS = frozenset({"XlaDeviceCall", "MarkStep", "Save", "Load", "Collectives", "RankAndWorldSize", "CpuCopy"})
# they report only where the file moves to neuron
_CUDA_RULES = frozenset({"CudaMethod", "TorchCudaApi", "CudaDeviceString"})
# rules which report nothing (and take no node) in a file that imports no torch_xla and takes no XLA device name
# where a device, a device type or a process group's backend is given (`_xla_quiet`): the "xla" their byte
# pre-filter found is a comparison's, a comment's (`if backend == "xla":` after a rewrite); elsewhere NM102's and
# NM201's decisions are ported in part (`xla_device_string`, `process_group`), NM107's are LibCST's
_XLA_QUIET = frozenset({"XlaDeviceString", "CompilePlacedModel", "ProcessGroup"})
# where an XLA device name stands without being given as a device: a comparison, a collection, a subscript, a return,
# `a or b`, a statement of its own
_QUIET_PLACES = (ast.Compare, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Subscript, ast.Return, ast.BoolOp, ast.Expr)


def _xla_quiet(walked: notes._Tree) -> bool:
    """Whether `_XLA_QUIET`'s rules report nothing in the file: it imports torch_xla in no scope (no XLA device call,
    no `xla` backend registered, no module-level import that lets NM102 act on device names held as data), and
    every XLA device name (`"xla"`, `"xla:0"`, an f-string's `xla:`) or process-group string (`"xla://"`,
    `"pjrt://"`) stands in one of `_QUIET_PLACES`: none is an argument, a keyword's value, an assigned value or a
    branch of `x if c else y`, the places where NM102 respells, NM107 finds a device and NM201 a backend (a name
    bound to "xla" is bound by an assignment)."""
    from neuron_migrate.rules.distributed import XLA_GROUP_STRINGS
    from neuron_migrate.rules.patterns import DEVICE_PREFIX, DEVICE_STRING

    if any(q.partition(".")[0] == "torch_xla" for quals in walked.imported.values() for q in quals):
        return False
    for string in walked.strings:
        value = string.value
        if "xla" not in value:
            continue
        if DEVICE_STRING.match(value) or value in XLA_GROUP_STRINGS or (
                id(string) in walked.in_fstring and DEVICE_PREFIX.match(value)):
            if walked.parents.get(id(string)).__class__ not in _QUIET_PLACES:
                return False
    return True


def _placements_quiet(walked: notes._Tree, tree: ast.Module, settings) -> bool:
    """Whether `CompilePlacedModel` (NM107) reports nothing in a file that may import torch_xla: no placement it
    follows (`x = y.to(d)` with one target, or `y.to(d)` as a statement, `d` the one argument, positional or
    `device=`) is given what may be the XLA device and moves what may be a module, as the rule asks, in any order
    and scope. The device, as `_is_device` asks: a call of torch_xla's device function or of `torch.device`, a
    string or an f-string naming xla, either branch of `a if c else b`, or a name whose last part some assignment
    (one target, a name or an attribute chain) gives such a value, one name to the next (`self.device = device`).
    The module, as `_modules` and `_builds_module` ask (`_may_be_modules`). (`settings.compile` off, it reports
    nothing.)"""
    from neuron_migrate.rules.device import XLA_DEVICE

    if not settings.compile:
        return True
    devices = XLA_DEVICE | {"torch.device"}

    def may_be_device(expr: ast.expr, names: set[str]) -> bool:
        kind = expr.__class__
        if kind is ast.Constant:
            return expr.value.__class__ is str and "xla" in expr.value
        if kind is ast.JoinedStr:
            return True
        if kind is ast.Call:
            return not devices.isdisjoint(_any_quals(walked, expr.func))
        if kind is ast.IfExp:
            return may_be_device(expr.body, names) or may_be_device(expr.orelse, names)
        if kind is ast.Starred:
            return may_be_device(expr.value, names)
        parts = _dotted(expr)
        return bool(parts) and parts[-1] in names

    assigned: list[tuple[list[str], ast.expr]] = []
    given: list[tuple[ast.expr, str | None, ast.expr]] = []  # (the device, the name placed, the object moved)
    for node in nodes(tree):
        kind = node.__class__
        if kind is ast.Assign and len(node.targets) == 1:
            parts = _dotted(node.targets[0])
            if parts:
                assigned.append((parts, node.value))
                given += [(device, ".".join(parts), node.value.func.value) for device in _placed_on(node.value)]
        elif kind is ast.Expr:
            for device in _placed_on(node.value):
                moved = node.value.func.value
                given.append((device, ".".join(_dotted(moved) or ()) or None, moved))
    if not given:
        return True
    names: set[str] = set()
    changed = True
    while changed:
        changed = False
        for parts, value in assigned:
            if parts[-1] not in names and may_be_device(value, names):
                names.add(parts[-1])
                changed = True
    placed = [(name, moved) for device, name, moved in given if may_be_device(device, names) and name is not None]
    if not placed:
        return True
    builds = _may_be_modules(walked, tree)
    return builds is not None and not any(builds(moved, name) for name, moved in placed)


def _may_be_modules(walked: notes._Tree, tree: ast.Module) -> Callable[[ast.expr, str], bool] | None:
    """`CompilePlacedModel._modules` and `_builds_module` on Python's tree, as a test `builds(moved, name)`: the
    name placed may hold a module, or the object moved may build one. Each name's qualified name is any an import of
    it binds (LibCST's `qualname` is the one import the scope finds), so the test says yes wherever the rule may;
    None where the file compiles a step with torch_xla (the rule takes its model for a module: `_eager_step_model`,
    read on LibCST's tree)."""
    from neuron_migrate.rules.compile import (FACTORIES, LOADERS, MODULE_BASES, MODULE_ONLY, NOT_MODULES,
                                              PRETRAINED_MODEL, RETURNS_SELF, TORCH_XLA_COMPILE, _nn_class)

    quals = functools.partial(_any_quals, walked)

    def module_class(expr: ast.expr, classes: set[str]) -> bool:
        return any(q in MODULE_BASES or _nn_class(q) for q in quals(expr)) \
            or ".".join(_dotted(expr) or ()) in classes

    defined: list[ast.ClassDef] = []
    used: set[str] = set()  # owners of a module-only method called (`model.parameters()`)
    annotated: list[tuple[str, ast.expr]] = []
    assigned: list[tuple[str, ast.expr]] = []
    for node in nodes(tree):
        kind = node.__class__
        if kind is ast.Call:
            if not TORCH_XLA_COMPILE.isdisjoint(quals(node.func)):
                return None
            func = node.func
            if func.__class__ is ast.Attribute and func.attr in MODULE_ONLY and _dotted(func.value):
                used.add(".".join(_dotted(func.value)))
        elif kind is ast.ClassDef:
            defined.append(node)
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef):
            if any(not TORCH_XLA_COMPILE.isdisjoint(quals(d)) for d in node.decorator_list):
                return None
            arguments = node.args
            for a in [*arguments.posonlyargs, *arguments.args, arguments.vararg, *arguments.kwonlyargs,
                      arguments.kwarg]:
                if a is not None and a.annotation is not None:
                    annotated.append((a.arg, a.annotation))
        elif kind is ast.Assign and len(node.targets) == 1 and _dotted(node.targets[0]):
            assigned.append((".".join(_dotted(node.targets[0])), node.value))
        elif kind is ast.AnnAssign and _dotted(node.target):
            name = ".".join(_dotted(node.target))
            annotated.append((name, node.annotation))
            if node.value is not None:
                assigned.append((name, node.value))
    classes: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in defined:
            if node.name not in classes and any(module_class(base, classes) for base in node.bases):
                classes.add(node.name)
                changed = True
    modules = used | {name for name, annotation in annotated if module_class(annotation, classes)}

    def builds(expr: ast.expr) -> bool:
        while expr.__class__ is ast.Call and expr.func.__class__ is ast.Attribute and expr.func.attr in RETURNS_SELF:
            expr = expr.func.value
        if expr.__class__ is not ast.Call:
            return ".".join(_dotted(expr) or ()) in modules
        func = expr.func
        if func.__class__ is ast.Name and func.id in classes:
            return True
        if any((_nn_class(q) or q in FACTORIES or q.startswith("torchvision.models."))
               and q.split(".")[-1] not in NOT_MODULES for q in quals(func)):
            return True
        return func.__class__ is ast.Attribute and func.attr in LOADERS and any(
            q.startswith(("transformers.", "diffusers.")) and PRETRAINED_MODEL.search(q) for q in quals(func.value))

    changed = True
    while changed:
        changed = False
        for name, value in assigned:
            if name not in modules and builds(value):
                modules.add(name)
                changed = True
    return lambda moved, name: name in modules or builds(moved)


def _any_quals(walked: notes._Tree, expr: ast.AST) -> list[str]:
    """Every dotted name a name chain may stand for: its first name as each import in any scope binds it (LibCST's
    `qualname` is the one the chain's scope finds, one of these); none for no chain or a name no import binds."""
    parts = _dotted(expr)
    if not parts:
        return []
    rest = parts[1:]
    return [".".join([q, *rest]) for q in walked.imported.get(parts[0], ())]


def _placed_on(value: ast.expr) -> list[ast.expr]:
    """The device of `<obj>.to(<device>)` with one argument (`compile.placed_object`; a star's too), as a list."""
    if value.__class__ is not ast.Call or value.func.__class__ is not ast.Attribute or value.func.attr != "to":
        return []
    if len(value.args) + len(value.keywords) != 1:
        return []
    if value.args:
        return [value.args[0]]
    keyword = value.keywords[0]
    return [keyword.value] if keyword.arg in (None, "device") else []


def _patched_values(text: str, walked: notes._Tree, tree: ast.Module) -> frozenset[int] | None:
    """What the fix pass's self-call check (engine/patches.py) reads, on Python's tree: None where the file may
    patch a name it imports with a function, a lambda or a bare name (`torch.cuda.synchronize = _sync`,
    `setattr(torch, "save", lambda *a: None)`), whose body the check counts the late reads of; else the ids of the
    values its attribute assignments and `setattr` calls set (`torch.backends.cudnn.benchmark = True`). With no
    function patched in, the check finds nothing to count and refuses no fix, as long as no fix replaces one of
    those values whole (it could make it a name): `decide` hands a file where a reported node is one to LibCST.

    The values are `patches._Assignments`'s and more: every `a.b = value` target, and every argument after
    the second of a `setattr` call, whatever its attribute's spelling."""
    if not may_patch(text, walked.module):
        return frozenset()  # no patch of an imported module at all
    values = _patch_sites(tree)[0]
    if any(type(v) in (ast.Lambda, ast.Name, ast.Starred) for v in values):
        return None
    return frozenset(id(v) for v in values)


def _patch_sites(tree: ast.Module) -> tuple[list[ast.expr], set[str]]:
    """What the file's `a.b = value` assignments and `setattr` calls set: the values (every `setattr` argument after
    the second, whatever its attribute's spelling), and the attributes (each target's last name, and the name a
    `setattr` gives as a string literal, the only one the self-call check reads)."""
    values: list[ast.expr] = []
    attributes: set[str] = set()
    for node in nodes(tree):
        kind = type(node)
        if kind is ast.Assign:
            targets = [t.attr for t in node.targets if type(t) is ast.Attribute]
            if targets:
                values.append(node.value)
                attributes.update(targets)
        elif kind is ast.Call and type(node.func) is ast.Name and node.func.id == "setattr":
            values += node.args[2:]
            values += [k.value for k in node.keywords]
            name = node.args[1] if len(node.args) > 1 else None
            if type(name) is ast.Constant and name.value.__class__ is str:
                attributes.add(name.value)
    return values, attributes


def _patched_bodies(tree: ast.Module) -> list[tuple[int, int]] | None:
    """The lines of the functions and lambdas the file may patch in (where `_patched_values` is None): each lambda
    value's, and every `def` of a name given as a value (`patches._patches` finds one of them, or none); None where
    a value is starred. A fix that touches no statement of these lines leaves each body as it was, so the fix pass's
    self-call check (which counts the late reads in a body before and after) refuses nothing."""
    values = _patch_sites(tree)[0]
    if any(type(v) is ast.Starred for v in values):
        return None
    names = {v.id for v in values if type(v) is ast.Name}
    bodies = [(v.lineno, v.end_lineno) for v in values if type(v) is ast.Lambda]
    if names:
        bodies += [(first_line(n), n.end_lineno) for n in nodes(tree)
                   if n.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef) and n.name in names]
    return bodies


# the attribute each fix of a torch_xla read spells where it reads a name late (engine/patches.py): the device's
# `torch.device`, `torch.neuron.synchronize`, `torch._dynamo.graph_break`, `dist.barrier`, `torch.neuron.set_device`
# and torchrun's variables behind `os.environ.get`; a removal (NM103) and a device name respelled (NM102) spell none
_FIX_READS = {"NM101": ("device",), "NM102": (), "NM103": (), "NM104": ("synchronize",), "NM113": ("graph_break",),
              "NM201": ("set_device", "environ", "get"), "NM203": ("environ", "get"),
              "NM205": ("barrier", "environ", "get")}


def _unpatched_fix(code: str, patched: set[str]) -> bool:
    """Whether the fix of a finding of `code` can change no function patched in to call itself: of `_FIX_READS`, it
    reads none of the attributes the file may patch a function in for (`patched`: `_patch_sites`), and so no
    patched name the function did not read before (its other code is as it was); the self-call check refuses it
    nowhere, in a function patched in too."""
    return code in _FIX_READS and patched.isdisjoint(_FIX_READS[code])


def _touches(found: list, walked: notes._Tree, bodies: list[tuple[int, int]]) -> bool:
    """Whether a reported node's statement (the node itself, where the walk records none) shares a line with one of
    `bodies` (`_patched_bodies`)."""
    for _code, node, _fields, _offset in found:
        held = walked.statement.get(id(node), node)
        first = first_line(held)
        if any(first <= end and start <= held.end_lineno for start, end in bodies):
            return True
    return False


def _cuda_sure(walked: notes._Tree, settings, bodies: list[tuple[int, int]] | None) -> bool:
    """Whether the CUDA family's decisions can be taken on Python's tree: the file patches no function in a way
    Python's tree cannot follow (`bodies`: `_patched_bodies`), is not written in the portable style (whose
    spellings define a device variable) and binds no name to torch.cuda or below."""
    from neuron_migrate.rules.target import ACCELERATOR

    if bodies is None or settings.device_style == ACCELERATOR:
        return False
    return not any(q == "torch.cuda" or q.startswith("torch.cuda.") for quals in walked.imported.values()
                   for q in quals)


def decide(path: str, text: str, tree: ast.Module, rules: list, settings, made: dict | None = None,
           step: bool = False) -> list[Finding] | None:
    """The findings of a `check` of the file from the `rules` the pre-filters left, or None where the LibCST pass
    must decide (see the module docstring). `made`: what the passes over one file share (python.Shared). `step`:
    the NM199 step runs (then `rules` are every rule that may report, enabled or not)."""
    markers = MARKER_PREFIX in text
    if any(r.__name__ not in _RULES and r.__name__ not in _XLA_QUIET for r in rules) or _LONE_CR.search(text):
        return None
    tidy = "torch_xla" in text and any(settings.enabled(code, path) for code in (UNUSED_CODE, STRANDED_CODE))
    if not rules and not markers and not step and not tidy:
        return None

    def run() -> list[Finding] | None:
        walked = notes.walk(tree, text, made) if rules or step or tidy else None
        legacy = [node for node in walked.imports if notes._legacy_import(node, LEGACY_ROOTS)] if walked else []
        spelled: dict[str, int] = {}  # each name the torch_xla imports bind: how often the rest of the file spells it
        if legacy and (step or tidy):
            imported = _legacy_spellings(tree, legacy)
            if imported is None:
                return None  # `from torch_xla... import *`
            unread, spelled = imported  # (a torch_xla import, its module); the names' spellings
            if any(spelled.values()) and not any(r.__name__ in _TAKE_READS for r in rules):
                return None  # a torch_xla name read: the NM199 step and the fix pass report on it
        else:
            unread = []
        if not rules and not unread:
            return []  # only the markers: the LibCST pass decides nothing either
        names = {r.__name__ for r in rules}
        if names & _XLA_QUIET:
            quiet = _xla_quiet(walked)
            if not quiet and "CompilePlacedModel" in names and not _placements_quiet(walked, tree, settings):
                return None
            # ProcessGroup's and XlaDeviceString's decisions are ported (`process_group`, `xla_device_string`) where
            # they may report
            rules_left = [r for r in rules if r.__name__ not in _XLA_QUIET
                          or not quiet and r.__name__ in ("ProcessGroup", "XlaDeviceString")]
        else:
            rules_left = rules
        cuda = any(r.__name__ in _CUDA_RULES for r in rules_left)
        patched = _patched_values(text, walked, tree)
        bodies = _patched_bodies(tree) if patched is None else []
        decisions = _Decisions(path, walked, tree, settings)
        decisions.patched = patched
        project = settings.project
        program = bool(project is not None and project.entry) or MAIN_BLOCK.search(text) is not None  # `facts.program`
        chosen = rules_left
        two_devices = cuda and paths._two_devices(text)
        if cuda:
            moving = decisions.moving(program)
            if not moving or two_devices:
                # a file that stays: the family reports nothing; a CUDA path on purpose: nothing but the groups of
                # CUDA device names (NM117 acts where XLA code does), which `cuda_device_string` leaves to LibCST
                chosen = [r for r in chosen if r.__name__ not in _CUDA_RULES
                          or moving and r.__name__ == "CudaDeviceString"]
                if not chosen and not unread:
                    return []
            if any(r.__name__ in _CUDA_RULES for r in chosen) and not _cuda_sure(walked, settings, bodies):
                return None
        if not exact_identifiers(text):
            return None  # Python's tree holds an identifier as it normalized it, LibCST's as spelled
        # where no statement can be on another path, a family acts everywhere; but the CUDA family's paths are
        # narrower, with no test of a backend, in a neuron library, a file with a neuron switch, one that imports
        # torch_neuronx inside a function (XLA optional) and one that uses two devices on purpose
        if not walked.tests_nothing() or any(r.__name__ in _CUDA_RULES for r in chosen) and (
                walked.xla_names or uses_neuron_device(text) or two_devices):
            decisions.paths = TreePaths(decisions.names(), program)
            if not decisions.paths.exact:
                return None
        for rule in chosen:
            getattr(decisions, _RULES[rule.__name__])()
        if patched and any(id(node) in patched for _code, node, _fields, _offset in decisions.found):
            return None  # a fix would replace a value patched in whole (see `_patched_values`)
        if bodies:
            attributes = _patch_sites(tree)[1]
            if _touches([f for f in decisions.found if not _unpatched_fix(f[0], attributes)], walked, bodies):
                return None  # a fix would change a function patched in, which the self-call check reads
        marks = _Marks(walked, tree) if markers else None
        staying: set[str] = set()
        read: set[str] = set()
        if any(spelled.values()):
            kept = _reads_left(path, walked, decisions, settings, spelled, marks)
            if kept is None:
                return None  # a read of a torch_xla name the NM199 step may report: LibCST decides
            read = _read_before(decisions, {name for name, count in spelled.items() if count})
            staying = kept & read  # read by a handled call that keeps it
            if staying and any(_in_try(decisions, node) for node in legacy):
                return None  # an import that stays in a guard: the fix pass's NM191 is LibCST's
        codes = frozenset(c for r in rules for c in r.codes)
        found = notes._findings(path, walked, decisions.found, settings, codes, marks)
        unread = [(alias, module) for alias, module in unread
                  if (alias.asname or alias.name.partition(".")[0]) not in staying]
        if unread and settings.enabled(UNUSED_CODE, path) and not (
                decisions.paths is not None and decisions.paths.multi_backend):  # a multi-backend file keeps them
            found = sorted(found + _unused_findings(path, walked, unread, read), key=lambda f: f.sort_key())
        return found

    found = notes.sure(run)
    if found is not None and markers:  # a person's markers, as `transform` reports them (NM900)
        from neuron_migrate.engine.python import marker_findings

        found = sorted(found + marker_findings(text, path, settings), key=lambda f: f.sort_key())
    return found


def _legacy_spellings(tree: ast.Module, legacy: list[ast.stmt]) \
        -> tuple[list[tuple[ast.alias, str]], dict[str, int]] | None:
    """Each torch_xla import of the `legacy` import statements, with the module NM190 names, and for each name they
    bind, how often the file's code spells it outside those statements (`_census`: as a name, an attribute, a
    parameter, a keyword, a definition, a string that is the name itself; not in a comment or a longer string).
    None where one imports `*`; Unsure where two imports bind a name the file spells elsewhere, but both in the
    module's scope.

    A name spelled nowhere else is read by no name of Python's tree, nor by LibCST's scope analysis, which reads no
    name that is not spelled (a string only in `__all__`, as the name itself): the NM199 step has nothing to
    report on it, no fix can leave a read of it behind, and the fix pass finds its import unused as it was (NM190),
    not read as an availability flag, and no guard that keeps one (no NM191). A name spelled only in code the
    fixes take away, or in handled calls, is decided by `_reads_left`."""
    unread: list[tuple[ast.alias, str]] = []
    for node in legacy:
        if isinstance(node, ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                return None
            unread.extend((alias, node.module) for alias in node.names)
        else:
            unread.extend((alias, alias.name) for alias in node.names if alias.name.partition(".")[0] in LEGACY_ROOTS)
    bound = [alias.asname or alias.name.partition(".")[0] for alias, _module in unread]
    spelled = _census(tree, set(bound))
    for node in legacy:
        for name, count in _census(node, set(bound)).items():
            spelled[name] -= count
    twice = [name for name, count in spelled.items() if count and bound.count(name) > 1]
    if twice and not _module_level(tree).issuperset(id(node) for node in legacy):
        raise Unsure("a torch_xla name bound twice, in a function or a class, and read")  # which one a read finds
    return unread, spelled


def _module_level(tree: ast.Module) -> set[int]:
    """The ids of the statements in the module's scope (in its blocks too, not in a function or a class): a name
    two of them bind is one name of the module scope, every read of which LibCST's analysis gives to both."""
    found: set[int] = set()
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        statement = stack.pop()
        found.add(id(statement))
        if statement.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(statement, field, ()):
                stack.extend(child.body if child.__class__ in (ast.ExceptHandler, ast.match_case) else (child,))
    return found


def _census(root: ast.AST, names: set[str]) -> dict[str, int]:
    """How often the code under `root` spells each of `names` where LibCST's tree holds a name (a name, an
    attribute taken, a parameter, a keyword, a definition's, an import's, a `global`'s, an exception's or a
    pattern's name), or as a string that is the name itself (`__all__`'s entries)."""
    counts = dict.fromkeys(names, 0)
    for node in nodes(root):
        kind = node.__class__
        if kind is ast.Name:
            spelled: tuple = (node.id,)
        elif kind is ast.Attribute:
            spelled = (node.attr,)
        elif kind is ast.Constant:
            if node.value.__class__ is not str:
                continue
            spelled = (node.value,)
        elif kind in (ast.arg, ast.keyword):
            spelled = (node.arg,)
        elif kind is ast.alias:
            spelled = (*node.name.split("."), node.asname)
        elif kind is ast.ImportFrom:
            spelled = tuple((node.module or "").split("."))
        elif kind in (ast.Global, ast.Nonlocal):
            spelled = tuple(node.names)
        elif kind is ast.MatchMapping:
            spelled = (node.rest,)
        elif kind is ast.MatchClass:
            spelled = tuple(node.kwd_attrs)
        else:
            name = getattr(node, "name", None)  # a definition's, an exception's, a pattern's, a type parameter's
            if name.__class__ is not str:
                continue
            spelled = (name,)
        for name in spelled:
            if name in counts:
                counts[name] += 1
    return counts


def _reads_left(path: str, walked: notes._Tree, decisions: _Decisions, settings, spelled: dict[str, int],
                marks: _Marks | None) -> set[str] | None:
    """The names the torch_xla imports bind that the fixed file still spells as a name (of which `decide` keeps
    those the file reads, `_read_before`), where every spelling of one outside those imports (`spelled`) is in code
    a fix takes away (`_Decisions.fixes`: `xm.xla_device` of `xm.xla_device()`, whose call the fix replaces; a
    step's statement it removes) or in the function of a call a rule reported and does not fix (an xser save the
    program chooses, a call with its code not enabled or a marker above it): a handled call, whose torch_xla names
    the NM199 step leaves alone, and whose read keeps its import. None where a spelling is in neither (a read
    NM199 may report, an attribute, a string, a comment)."""
    from neuron_migrate.policy import Policy, _never

    policy = Policy(settings, path, rewrite=True)
    reported = {id(node): (code, fields) for code, node, fields, _offset in decisions.found}
    left = dict(spelled)

    def take(node: ast.AST) -> None:
        for name, count in _census(node, set(left)).items():
            left[name] -= count

    def fixes(node: ast.AST) -> bool:
        """The finding on `node` is reported and its fix made (as `ctx.report` answers the rule)."""
        code, fields = reported[id(node)]
        marked = (lambda: marks(code, node)) if marks is not None else _never
        decision = policy.decide(code, None, None, fields, migrating=lambda: False, marked=marked)
        return decision is not None and decision.fix

    fixed: set[int] = set()
    for node, taken in decisions.fixes:
        if fixes(node):
            take(taken)
            fixed.add(id(node))
    staying: set[str] = set()
    kept: set[int] = set()
    for node in decisions.handled:
        if id(node) in fixed or id(node) in kept:
            continue
        kept.add(id(node))
        chain = node.func if node.__class__ is ast.Call else node
        if not _dotted(chain):
            continue  # no name chain: NM199 reports what it reads
        if id(node) in reported and any(_census(chain, set(left)).values()) and fixes(node):
            raise Unsure("another rule's fix of a call that reads torch_xla")  # it may take the read away
        take(chain)
        for inner in ast.walk(chain):
            if inner.__class__ is ast.Name and inner.id in left:
                staying.add(inner.id)
    return None if any(left.values()) else staying


def _in_try(decisions: _Decisions, node: ast.AST) -> bool:
    """Whether `node` is inside a `try` statement (a guard, whose imports the fix pass reports with NM191)."""
    parents = decisions.parents()
    parent = parents.get(id(node))
    while parent is not None:
        if parent.__class__ in (ast.Try, getattr(ast, "TryStar", ast.Try)):
            return True
        parent = parents.get(id(parent))
    return False


def _read_before(decisions: _Decisions, spelled: set[str]) -> set[str]:
    """Which of the names the torch_xla imports bind, `spelled` in the code the fixes take away, the file as it was
    reads (a name, not an attribute's: `mark_step` of `xm.mark_step()` reads no `from ... import mark_step`), as
    LibCST's scope analysis finds it: a name resolved to a torch_xla import (bound once, by that import alone, as
    `_legacy_spellings` and `_reads_left` made sure)."""
    if not spelled:
        return set()
    from neuron_migrate.engine.treenames import _READS

    names = decisions.names()
    read = set()
    for node, scope in names.names:
        if node.__class__ is ast.Name and node.id in spelled and node.ctx.__class__ in _READS:
            qual = names.qualname(node, scope)
            if qual is not None and qual.partition(".")[0] in LEGACY_ROOTS:
                read.add(node.id)
    return read


def _unused_findings(path: str, walked: notes._Tree, unread: list[tuple[ast.alias, str]],
                     read: set[str] = frozenset()) -> list[Finding]:
    """NM190 for each torch_xla import the fixed file no longer reads (`imports.unused_decisions`), placed at its
    alias: "once the other fixes are made" where the file as it was reads it (`read`: `_read_before`)."""
    from neuron_migrate import catalogue

    message = catalogue.rule(UNUSED_CODE).format
    out = []
    for alias, module in unread:
        after = " once the other fixes are made" if (alias.asname or alias.name.partition(".")[0]) in read else ""
        out.append(Finding(path, alias.lineno, walked.column(alias.lineno, alias.col_offset) + 1, UNUSED_CODE,
                           message(module=module, after=after), True, end_line=alias.end_lineno,
                           end_col=walked.column(alias.end_lineno, alias.end_col_offset) + 1))
    return out


class _Marks:
    """`edits.has_marker` on Python's tree, as `ctx.report` asks it: whether the comment lines above a finding's
    statement hold a marker of its code (`# TODO(neuron-migrate CODE): ...`), whose NM900 then stands for it.

    LibCST holds the comment lines between a statement and the code before it as the statement's leading lines
    (the module's header, for its first statement), but those indented deeper than the statement after a block:
    they close that block. So a marker of the code on a comment line right above the statement (blank lines
    between), at the statement's indentation, marks it; with no marker of the code there, nothing does. A marker
    of the code at another indentation there, above an `elif`, or where a string over several lines reaches
    those lines, is left to LibCST."""

    def __init__(self, walked: notes._Tree, tree: ast.Module) -> None:
        self.walked, self.tree = walked, tree
        # the codes of the comment lines that are markers, the only lines `__call__` reads as one
        self.codes = {marker_code(line.strip()) for line in walked._lines() if MARKER_PREFIX in line}
        self._statements: dict[int, ast.stmt] | None = None

    def __call__(self, code: str, node: ast.AST) -> bool:
        if code not in self.codes:
            return False  # the common case: no marker of this code in the file
        statement = node if isinstance(node, ast.stmt) else self.walked.statement.get(id(node)) \
            or self.statements().get(id(node))
        if statement is None:
            raise Unsure("a marked code on a node without its statement")
        first = first_line(statement)
        head = self.walked.line_text(first)
        if head.lstrip().startswith("elif"):
            raise Unsure("a marked code above an elif")  # LibCST's elif may own other lines
        indent = head[:len(head) - len(head.lstrip(" \t\f"))]
        marked = False
        line = first - 1
        while line >= 1:
            text = self.walked.line_text(line)
            stripped = text.strip()
            if stripped and not stripped.startswith("#"):
                break
            if marker_code(stripped) == code:
                if text[:len(text) - len(text.lstrip(" \t\f"))] != indent or line in self.in_strings():
                    raise Unsure("a marker of the code at another indentation, or in a string")
                marked = True
            line -= 1
        if not marked and any(n in self.in_strings() for n in range(line + 1, first)):
            raise Unsure("a string over several lines above a marked code's statement")
        return marked

    def statements(self) -> dict[int, ast.stmt]:
        """Each node's innermost statement (a name's, which the walk does not record), as LibCST's walk gives an
        occurrence its statement: a simple statement's line or a compound statement."""
        if self._statements is None:
            found: dict[int, ast.stmt] = {}
            stack: list[tuple[ast.AST, ast.stmt | None]] = [(self.tree, None)]
            while stack:
                node, statement = stack.pop()
                if isinstance(node, ast.stmt):
                    statement = node
                found[id(node)] = statement
                stack.extend((child, statement) for child in ast.iter_child_nodes(node))
            self._statements = found
        return self._statements

    def in_strings(self) -> set[int]:
        return self.walked.string_lines(self.tree)
