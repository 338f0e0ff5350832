"""NM223-NM228: logging, step closures, seeds, renamed utilities and metrics (sharding: rules/sharding.py); NM244:
torch_xla's test utilities that have a native form."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from neuron_migrate.engine.names import dotted_str, not_a_read
from neuron_migrate.engine.shared import RATE_TRACKER_DOC
from neuron_migrate.rules.patterns import XM, arg, code, reads_setting, short
from neuron_migrate.rules import Rule
from neuron_migrate.rules.device import XLA_DEVICE
from neuron_migrate.rules.distributed import IS_MASTER, RANK_CALLS
from neuron_migrate.rules.target import target
from neuron_migrate.rules.rewrites import (LOOSE_PARENTS, alone_on_line, guard_statement, is_statement, only_args,
                                           paren, rank, replace_statement, replace_with_guard, under_rank_zero, free_name,
                                           moved, one_line, shift_lines)
from neuron_migrate.syntax import positions
from neuron_migrate.syntax.parse import expression
from neuron_migrate.syntax.walk import children

MASTER_PRINT = frozenset({f"{XM}.master_print"})
STEP_CLOSURE = frozenset({f"{XM}.add_step_closure"})
SEED = frozenset({f"{XM}.set_rng_state", "torch_xla.manual_seed", "torch_xla.torch_xla.manual_seed"})
GET_STATE = f"{XM}.get_rng_state"

# Same callable, other home: legacy qualified name -> (module, attribute).
RENAMES = {
    "torch_xla.utils.checkpoint.checkpoint": ("NM226", "torch.utils.checkpoint", "checkpoint"),
    "torch_xla.amp.syncfree.SGD": ("NM227", "torch.optim", "SGD"),
    "torch_xla.amp.syncfree.Adam": ("NM227", "torch.optim", "Adam"),
    "torch_xla.amp.syncfree.AdamW": ("NM227", "torch.optim", "AdamW"),
}
for _name in ("SGD", "Adam", "AdamW"):
    RENAMES[f"torch_xla.amp.syncfree.{_name.lower()}.{_name}"] = RENAMES[f"torch_xla.amp.syncfree.{_name}"]

METRICS = "torch_xla.debug.metrics."
METRICS_REPORTS = frozenset({f"{METRICS}metrics_report", f"{METRICS}short_metrics_report",
                             "torch_xla._XLAC._xla_metrics_report"})
LOGGING = frozenset(f"logging.{level}" for level in ("debug", "info", "warning", "error", "critical"))


INITIALIZE_CACHE = frozenset({"torch_xla.runtime.initialize_cache"})


class CompileCache(Rule):
    """NM236: `xr.initialize_cache(path, readonly=...)` set up the XLA runtime's persistent compilation cache. The
    native backend caches every compiled NEFF on disk by itself, so the statement goes where its arguments only
    read settings (a call among them may do something more: NM199 marks it then)."""

    codes = ("NM236",)
    triggers = (b"initialize_cache",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in INITIALIZE_CACHE:
            return
        small = ctx.current.small
        if type(small) is not cst.Expr or small.value is not node:
            return  # its result is used: by hand (NM199)
        if any(a.star or (a.keyword is not None and a.keyword.value not in ("path", "readonly"))
               or not reads_setting(a.value) for a in node.args):
            return
        if ctx.report("NM236", node, call=short(node)):
            ctx.remove(small)


# A file with this many `xm.master_print` calls gets one function that prints on rank 0 (six lines with the blank
# lines around it) instead of an `if` at each call.
MASTER_PRINT_HELPER_AT = 7
MASTER_PRINT_HELPER = '''\
def {name}(*args, **kwargs):
    """print() on the process of rank 0 only, as xm.master_print printed."""
    if {condition}:
        print(*args, **kwargs)'''


class MasterPrint(Rule):
    codes = ("NM223",)
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(MASTER_PRINT)  # every report is on a name that stands for it (a call or a value)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in MASTER_PRINT or not alone_on_line(ctx, node) or not is_statement(ctx, node):
            return
        fd, finalizer = arg(node, None, "fd"), arg(node, None, "finalizer")
        flush = arg(node, None, "flush")
        if any(a.keyword is not None and a not in (fd, finalizer, flush) for a in node.args):
            return
        extra = [f"{code(finalizer.value)}()"] if finalizer is not None else []
        condition = f"{rank(ctx)} == 0"

        def build(call: cst.Call) -> cst.Call:
            args = []
            for a in call.args:
                name = a.keyword.value if a.keyword is not None else None
                if name == "finalizer":
                    continue
                if name == "fd":
                    a = a.with_changes(keyword=cst.Name("file"))
                args.append(a)
            if len(args) == 1 and args[0].keyword is None and isinstance(args[0].value, cst.SimpleString) \
                    and args[0].value.evaluated_value == "":
                args = []  # `print()` prints the empty line (`print("")`: ruff's FURB105)
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return call.with_changes(func=cst.Name("print"), args=args)

        if ctx.facts.single_process:  # one process is rank 0
            if ctx.report("NM223", node, call=short(node), fixed="; ".join([code(build(node)), *extra])):
                ctx.replace(node, build)
                if extra:
                    ctx.insert_after(ctx.current.statement, "".join(f"{x}\n" for x in extra))
            return
        # the metrics report printed alone reads this process's figures (NM245 prints the native ones): no hoist
        if prints_only(ctx, node) is None \
                and any(_runs_collective(ctx, a.value) for a in node.args if a not in (fd, finalizer, flush)) \
                and isinstance(ctx.current.small, cst.Expr) and not under_rank_zero(ctx, ctx.current.statement):
            self._hoisted(node, build, condition, extra)
            return
        helper = self._helper(condition) if not extra and not under_rank_zero(ctx, ctx.current.statement) else None
        if helper is not None:
            def build_helper(call: cst.Call) -> cst.Call:
                return build(call).with_changes(func=cst.Name(helper))
            if ctx.report("NM223", node, call=short(node), fixed=f"{code(build_helper(node))}`, a function the fix "
                          f"defines that prints on rank 0 only: `{helper}(*args, **kwargs)"):
                ctx.replace(node, build_helper)
                ctx.define(MASTER_PRINT_HELPER.format(name=helper, condition=condition))
            return
        if ctx.report("NM223", node, call=short(node), fixed=f"if {condition}: {code(build(node))}"):
            ctx.replace(node, build)
            guard_statement(ctx, ctx.current.statement, condition, extra)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "master_print":
            self._passed_on(node)

    def visit_Name(self, node: cst.Name) -> None:
        imported = getattr(self, "_imported", None)
        if imported is None:  # the names the file imports master_print as
            imported = self._imported = {binding.name for scope in self.ctx.analysis.scopes
                                         for bindings in scope.bindings.values() for binding in bindings
                                         if binding.kind == "import" and binding.qualname in MASTER_PRINT}
        if node.value in imported:
            self._passed_on(node)

    def _passed_on(self, node: cst.BaseExpression) -> None:
        """`Logger(log_fn=xm.master_print)`: the function itself, passed on or stored, becomes the file's own
        `master_print` (print on rank 0 only; `print` in a program of one process)."""
        ctx = self.ctx
        parent = ctx.current.parent
        if (isinstance(parent, cst.Call) and parent.func is node) or isinstance(parent, (
                cst.Attribute, cst.ImportAlias, cst.AsName)) or not_a_read(node, parent) \
                or ctx.qualname(node) not in MASTER_PRINT:
            return
        if ctx.facts.single_process:
            if ctx.report("NM223", node, call=short(node), fixed="print"):
                ctx.replace(node, cst.Name("print"))
            return
        condition = f"{rank(ctx)} == 0"
        name = self._helper(condition, always=True)
        if name is not None and ctx.report("NM223", node, call=short(node), fixed=f"{name}`, a function the fix "
                                           f"defines that prints on rank 0 only: `{name}(*args, **kwargs)"):
            ctx.replace(node, cst.Name(name))
            ctx.define(MASTER_PRINT_HELPER.format(name=name, condition=condition))

    def _helper(self, condition: str, always: bool = False) -> str | None:
        """The name of the file's own `master_print` (print on rank 0 only), where the file prints that way often
        enough (MASTER_PRINT_HELPER_AT calls) that one function reads shorter than an `if` at each, and the rank is
        a module constant the function can read; else None."""
        ctx = self.ctx
        name = getattr(self, "_helper_name", False)
        if name is False or (name is None and always):
            name = None
            if condition.split()[0].isidentifier() and (
                    always or ctx.source.text.count("master_print(") >= MASTER_PRINT_HELPER_AT):
                name = free_name(ctx, "master_print")
            self._helper_name = name
        return name

    def _hoisted(self, node: cst.Call, build, condition: str, extra: list[str]) -> None:
        """A collective in the arguments must still run on every rank, or the others wait for rank 0 for ever:
        the statement computes the arguments on every rank (`printed = (...)`) and only the print is guarded."""
        ctx = self.ctx
        small, statement = ctx.current.small, ctx.current.statement
        name = free_name(ctx, "printed")
        keywords = [a for a in node.args if a.keyword is not None]
        printing = build(node.with_changes(args=[cst.Arg(value=cst.Name(name), star="*", comma=cst.Comma(
            whitespace_after=cst.SimpleWhitespace(" "))) if keywords else cst.Arg(value=cst.Name(name), star="*"),
            *keywords]))
        guarded = "".join(f"    {x}\n" for x in [code(printing), *extra])
        if ctx.report("NM223", node, call=short(node), fixed=f"{name} = (...); if {condition}: {code(printing)}"):
            def assign(new: cst.Expr) -> cst.Assign:
                values = [cst.Element(value=a.value) if not a.star else cst.StarredElement(value=a.value)
                          for a in new.value.args if a.keyword is None]
                return cst.Assign(targets=[cst.AssignTarget(target=cst.Name(name))],
                                  value=cst.Tuple(elements=[*values[:-1], values[-1].with_changes(
                                      comma=cst.Comma())] if values else []))
            ctx.replace(small, assign)
            ctx.insert_after(statement, f"if {condition}:\n{guarded}")


# torch_xla and torch.distributed calls that only read this process's state: the rank and world size, the device
# (no graph runs, no other process waits for them). Not the metrics: their NM228 marker stays above the statement
# that holds the call, which a guard would move it away from.
LOCAL_CALLS = frozenset({*RANK_CALLS, *IS_MASTER, f"{XM}.xla_device", "torch_xla.device", "torch.distributed.get_rank",
                         "torch.distributed.get_world_size", "torch.distributed.is_initialized",
                         "torch.distributed.is_available"})


def _runs_collective(ctx, value: cst.CSTNode) -> bool:
    """Whether an expression calls torch_xla or torch.distributed (a collective, a rendezvous, a step that runs
    the graph) anywhere in it; the calls that read only this process's state (`LOCAL_CALLS`, `test_utils.now()`)
    do not count."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call):
            qualname = ctx.qualname(node.func) or ""
            if qualname.startswith(("torch_xla.", "torch.distributed.")) and not (
                    qualname in LOCAL_CALLS or qualname in NOW):
                return True
        if not isinstance(node, (cst.Lambda, cst.FunctionDef)):
            stack.extend(children(node, tokens=False))  # no call is held in whitespace, comments or punctuation
    return False


class StepClosure(Rule):
    codes = ("NM224",)
    triggers = (b"add_step_closure",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in STEP_CLOSURE or not is_statement(ctx, node):
            return
        fn, args, run_async = arg(node, 0, "closure"), arg(node, 1, "args"), arg(node, 2, "run_async")
        if fn is None or not only_args(node, fn, args, run_async):
            return
        if args is None:
            call_args = []
        elif isinstance(args.value, cst.Tuple):
            call_args = [_as_arg(e, last=i == len(args.value.elements) - 1) for i, e in enumerate(args.value.elements)]
            closing = args.value.rpar[-1].whitespace_before if args.value.rpar and call_args else None
            if isinstance(closing, cst.ParenthesizedWhitespace) and (closing.first_line.comment is not None or any(
                    line.comment is not None for line in closing.empty_lines)):
                # the comment after the last element (`args.num_kept, # kept`) stays on its line; `)` goes below,
                # at the statement's indentation
                last = args.value.elements[-1].comma
                call_args[-1] = call_args[-1].with_changes(
                    comma=last.with_changes(whitespace_after=cst.SimpleWhitespace("")) if isinstance(
                        last, cst.Comma) else last,
                    whitespace_after_arg=closing.with_changes(indent=True, last_line=cst.SimpleWhitespace("")))
        else:
            call_args = [cst.Arg(value=args.value, star="*")]
        if closure_update(ctx, node) is not None:
            return  # a torch_xla progress line: NM244 writes the print itself
        target = fn.value
        if not isinstance(target, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not target.lpar:
            target = target.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        # built from the nodes, so comments between the arguments stay where they were; lines aligned with the
        # tuple's first element move with it
        fixed = cst.Call(func=target, args=call_args)
        if call_args and isinstance(args.value, cst.Tuple):
            first = args.value.elements[0].value
            delta, start, block = _shift(ctx, node, first, len(code(target)) + 1) if "\n" in code(args.value) \
                else (0, 0, 0)
            fixed = fixed.with_changes(args=[shift_lines(a, delta, start, block) for a in call_args])
        said = ", ".join(("*" if a.star else "") + code(a.value) for a in call_args)  # without the comments
        if ctx.report("NM224", node, call=short(node), fixed=f"{code(target)}({said})"):
            ctx.replace(node, fixed)


def _as_arg(element: cst.BaseElement, last: bool) -> cst.Arg:
    """A tuple element as a call argument; a last comma goes unless a comment or line break follows it."""
    comma = element.comma
    if last and isinstance(comma, cst.Comma) and isinstance(comma.whitespace_after, cst.SimpleWhitespace):
        comma = cst.MaybeSentinel.DEFAULT
    return cst.Arg(value=element.value, star="*" if isinstance(element, cst.StarredElement) else "", comma=comma)


class Seed(Rule):
    """NM225: `xm.set_rng_state(seed)` re-seeds the device generator: the Target's manual_seed.

    torch_xla's generator state is an integer seed; the native one is a tensor. In a file that also reads the
    state, a save and restore (`saved = xm.get_rng_state()` ... `xm.set_rng_state(saved)`, the saved name read
    nowhere else) becomes the native pair `torch.neuron.get_rng_state()` / `torch.neuron.set_rng_state(saved)`
    together; a literal seed is still a seed. NM252: a read that is only shown (an f-string, str(), a print or log
    argument) becomes the seed last set, `torch.neuron.initial_seed()`. NM253: any other read is marked with both
    native calls. A `device=` naming the process's device goes; another device is marked (NM253) or, for a seed,
    left to NM199.
    """

    codes = ("NM225", "NM252", "NM253")
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(SEED) or GET_STATE in scan.quals  # a call of a seed or of a read of the state

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        # Files that may read the state wait for the whole file before deciding (bytes first: that is rare).
        self.reads_state = "get_rng_state" in ctx.source.text
        self.reads: list[tuple[object, cst.Call, str | None]] = []  # (occurrence, call, name it is assigned to)
        self.seeds: list[tuple[object, cst.Call]] = []

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if self.reads_state and qual == GET_STATE:
            small = ctx.current.small
            saved = None
            if isinstance(small, cst.Assign) and small.value is node and len(small.targets) == 1:
                saved = dotted_str(small.targets[0].target)
            self.reads.append((ctx.current, node, saved))
        if qual not in SEED:
            return
        if self.reads_state:
            self.seeds.append((ctx.current, node))
        else:
            self._seed(node)

    def finish(self) -> None:
        ctx = self.ctx
        restores: dict[str, list[tuple[object, cst.Call]]] = {}
        saved_names = {saved for _occ, _node, saved in self.reads if saved is not None}
        for occ, node in self.seeds:
            ctx.current = occ
            seed, device = arg(node, 0, "seed"), arg(node, 1, "device")
            name = dotted_str(seed.value) if seed is not None and only_args(node, seed, device) \
                and (device is None or self._process_device(device.value)) else None
            if ctx.qualname(node.func, occ.scope) == f"{XM}.set_rng_state" and name in saved_names:
                restores.setdefault(name, []).append((occ, node))
            elif seed is not None and (name is not None or isinstance(seed.value, (cst.Integer, cst.BinaryOperation))):
                # a literal, arithmetic (`base + rank`), or a name no read of the state assigns is a seed, as in a
                # file that reads no state (the shown reads are gone after a rewrite: the next run decides alike)
                self._seed(node)
        for occ, node, saved in self.reads:
            ctx.current = occ
            device = arg(node, 0, "device")
            if not only_args(node, device):
                continue  # arguments torch_xla's function does not take: left to NM199
            if device is not None and not self._process_device(device.value):
                ctx.report("NM253", node, call=short(node), hint="device not followed: pick its generator",
                           where=f" of a device the tool does not follow (`{code(device.value)}`)")
                continue
            paired = restores.get(saved, []) if saved is not None else []
            if paired and self._only_restored(saved, occ, len(paired)):
                self._restore(occ, node, saved, paired)
            elif self._displayed(node):
                fixed = target(ctx).initial_seed()
                if ctx.report("NM252", node, call=short(node), fixed=fixed):
                    ctx.replace(node, expression(fixed))
            else:
                ctx.report("NM253", node, call=short(node), hint="initial_seed() (int) or get_rng_state()", where="")
        ctx.current = None

    def _restore(self, occ, node: cst.Call, saved: str, paired: list) -> None:
        """The save and its restores become the native pair together."""
        ctx = self.ctx
        fixed = target(ctx).get_rng_state()
        if ctx.report("NM225", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))
        for set_occ, set_node in paired:
            ctx.current = set_occ
            fixed = target(ctx).set_rng_state(saved)
            if ctx.report("NM225", set_node, call=short(set_node), fixed=fixed):
                if is_statement(ctx, set_node):
                    text = target(ctx).set_rng_state_statement(saved).rstrip()
                    replace_statement(ctx, set_occ.statement, lambda _call, text=text: [text])
                else:
                    ctx.replace(set_node, expression(fixed))

    def _displayed(self, node: cst.Call) -> bool:
        """The value read only goes into text: an f-string, str() / repr() / format(), a string's `%` or
        `.format(...)`, or an argument of print, `xm.master_print` or logging's functions."""
        ctx = self.ctx
        parents = ctx.analysis.parents
        parent = parents.get(node)
        if type(parent) is cst.FormattedStringExpression:
            return parent.expression is node
        if type(parent) is cst.Element and type(parents.get(parent)) is cst.Tuple:  # `"%d %s" % (seed, name)`
            node, parent = parents.get(parent), parents.get(parents.get(parent))
        if type(parent) is cst.BinaryOperation:
            return type(parent.operator) is cst.Modulo and parent.right is node and _is_text(parent.left)
        if type(parent) is not cst.Arg or parent.value is not node or parent.star:
            return False
        call = parents.get(parent)
        if type(call) is not cst.Call:
            return False
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "format" and _is_text(func.value):
            return True
        if parent.keyword is not None:
            return False
        qual = ctx.qualname(func)
        if type(func) is cst.Name and func.value in SHOWN and qual in (None, func.value):
            return True
        return qual in MASTER_PRINT or qual in LOGGING

    def _only_restored(self, saved: str, occ, restores: int) -> bool:
        """The saved state is read only by its restores (so its type may change), in the same scope."""
        if "." not in saved:
            scope = self.ctx.analysis.lookup(saved, occ.scope)
            return scope is occ.scope and len(scope.bindings.get(saved, [])) == 1 \
                and scope.reads.get(saved, 0) == restores
        return self.ctx.source.text.count(saved) == restores + 1

    def _seed(self, node: cst.Call) -> None:
        ctx = self.ctx
        seed = arg(node, 0, "seed")
        device = arg(node, 1, "device")
        if seed is None or not only_args(node, seed, device):
            return
        if device is not None and not self._process_device(device.value):
            return  # `device=pick(...)`: a call the tool does not follow is left to NM199
        fixed = target(ctx).manual_seed()
        if ctx.report("NM225", node, call=short(node), fixed=f"{fixed}({code(seed.value)})"):
            if device is None:
                ctx.replace(node.func, expression(fixed))
            else:  # the process's one device, the native generator's current one: `device=` goes
                ctx.replace(node, node.with_changes(func=expression(fixed), args=[seed.with_changes(
                    comma=cst.MaybeSentinel.DEFAULT)]))

    def _process_device(self, value: cst.BaseExpression) -> bool:
        """`device=` of a seed that torch_xla accepted names the process's XLA device (each process has one): a
        name or attribute that holds it, or `xm.xla_device()` itself. Dropped, nothing else goes unevaluated."""
        if dotted_str(value) is not None:
            return True
        return isinstance(value, cst.Call) and not value.args and self.ctx.qualname(value.func) in XLA_DEVICE


SHOWN = frozenset({"print", "str", "repr", "format"})  # builtins that print a value or turn it into text


def _is_text(value: cst.BaseExpression) -> bool:
    """A string literal (plain, f-string or concatenated)."""
    return isinstance(value, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString))


class Metrics(Rule):
    """NM228: torch_xla's metrics are read (marked: what to log instead is a person's choice); NM245: a statement
    that only prints or logs the metrics report prints the native backend's compilation metrics instead (unsafe:
    the program prints other figures)."""

    codes = ("NM228", "NM245")
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(METRICS_REPORTS) or any(q.startswith(METRICS) for q in scan.quals)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func) or ""
        small = ctx.current.small
        if qual in METRICS_REPORTS and ctx.enabled("NM245") and isinstance(small, cst.Expr) \
                and isinstance(small.value, cst.Call) and prints_only(ctx, small.value) is node:
            fixed = target(ctx).compile_metrics()
            if ctx.report("NM245", node, call=short(small.value), fixed=fixed):
                ctx.replace(node, expression(fixed))
        elif qual.startswith(METRICS):
            ctx.report("NM228", node, call=short(node))


def prints_only(ctx, call: cst.Call) -> cst.Call | None:
    """The metrics report that `call` prints or logs as its only argument (`print(met.metrics_report())`,
    `xm.master_print`, `logging.info`, ..., with `flush=`, `file=` or `fd=` given as names), or None."""
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) != 1 or positional[0].star or not isinstance(report := positional[0].value, cst.Call) \
            or ctx.qualname(report.func) not in METRICS_REPORTS:
        return None
    if any(a.keyword.value not in ("flush", "file", "fd") or not isinstance(a.value, (cst.Name, cst.Attribute))
           for a in call.args if a.keyword is not None):
        return None
    func = ctx.qualname(call.func)
    builtin = isinstance(call.func, cst.Name) and call.func.value == "print" and func in (None, "print")
    return report if builtin or func in MASTER_PRINT or func in LOGGING else None


TEST_UTILS = "torch_xla.test.test_utils"
NOW = frozenset({f"{TEST_UTILS}.now"})
SAMPLE_GENERATOR = frozenset({"torch_xla.utils.utils.SampleGenerator"})
RATE_TRACKER = frozenset({f"{XM}.RateTracker"})
# torch_xla's RateTracker (items a second since the last `rate()`, smoothed, and since it was made), defined once in
# the file that uses it: no native API measures it. `{clock}` is the file's name for the time module.
RATE_TRACKER_CLASS = '''\
class {name}:
    """''' + RATE_TRACKER_DOC + '''"""

    def __init__(self, smooth_factor=None):
        self.smooth_factor = 0.4 if smooth_factor is None else smooth_factor
        self.start = self.last = {clock}.time()
        self.count, self.total, self.last_rate = 0.0, 0.0, None

    def add(self, count):
        self.count += count

    def rate(self):
        now = {clock}.time()
        if now <= self.last:
            return 0.0
        rate = self.count / (now - self.last)
        if self.last_rate is not None:
            rate = (1 - self.smooth_factor) * rate + self.smooth_factor * self.last_rate
        self.total, self.count, self.last, self.last_rate = self.total + self.count, 0.0, now, rate
        return rate

    def global_rate(self):
        elapsed = {clock}.time() - self.start
        return (self.total + self.count) / elapsed if elapsed > 0 else 0.0'''
# The progress lines of torch_xla's example scripts: (label, [(parameter, format, omitted when a literal None)]).
# torch_xla prints "| <label> Device=... <field>=<value>... Time=<now()>" (fields given as None are left out).
TRAINING_UPDATE = ("Training", [("device", "Device={}", False), ("step", "Step={}", False),
                                ("loss", "Loss={:.5f}", False), ("rate", "Rate={:.2f}", False),
                                ("global_rate", "GlobalRate={:.2f}", False), ("epoch", "Epoch={}", True)])
TEST_UPDATE = ("Test", [("device", "Device={}", False), ("accuracy", "Accuracy={:.2f}", True),
                        ("epoch", "Epoch={}", True), ("step", "Step={}", True)])
UPDATES = {f"{TEST_UTILS}.print_training_update": TRAINING_UPDATE, f"{TEST_UTILS}.print_test_update": TEST_UPDATE}
# The order torch_xla prints the fields in (the parameters' order differs).
PRINT_ORDER = {"Training": ("device", "epoch", "step", "loss", "rate", "global_rate"),
               "Test": ("device", "step", "epoch", "accuracy")}
# torch_xla's summary-writer helpers (test_utils), defined once in the file that uses them, as they were less the
# XLA metrics: `{writer}` / `{write}` / `{close}` / `{update}` are the file's names for them, `{clock}` for time.
WRITE_TO_SUMMARY = '''\
def {write}(summary_writer, global_step=None, dict_to_write=None):
    """Writes each value of `dict_to_write` as a TensorBoard scalar at `global_step` (none without a writer)."""
    if summary_writer is None:
        return
    for k, v in (dict_to_write or {{}}).items():
        summary_writer.add_scalar(k, v, global_step)'''
GET_SUMMARY_WRITER = '''\
def {writer}(logdir):
    """A TensorBoard writer for `logdir` (None without one) that has written its start time."""
    if logdir:
        from tensorboardX import SummaryWriter

        writer = SummaryWriter(log_dir=logdir)
        writer.add_scalar("TensorboardStartTimestamp", {clock}.time(), 0)
        return writer'''
CLOSE_SUMMARY_WRITER = '''\
def {close}(summary_writer):
    """Flushes and closes a TensorBoard writer (nothing without one)."""
    if summary_writer is not None:
        summary_writer.flush()
        summary_writer.close()'''
TRAINING_UPDATE_HELPER = '''\
def {update}(device, step, loss, rate, global_rate, epoch=None, summary_writer=None):
    """Prints the progress line of a training step, and writes the two rates to TensorBoard."""
    epoch_text = "" if epoch is None else " Epoch={{}}".format(epoch)
    print("| Training Device={{}}{{}} Step={{}} Loss={{:.5f}} Rate={{:.2f}} GlobalRate={{:.2f}} Time={{}}".format(
        device, epoch_text, step, loss, rate, global_rate, {clock}.strftime("%H:%M:%S")), flush=True)
    if summary_writer:
        summary_writer.add_scalar("examples/sec", rate)
        summary_writer.add_scalar("average_examples/sec", global_rate)'''
# qualified name -> (helper, its template, the parameters a call may pass)
SUMMARY_HELPERS = {
    f"{TEST_UTILS}.write_to_summary": ("write", WRITE_TO_SUMMARY,
                                       ("summary_writer", "global_step", "dict_to_write", "write_xla_metrics")),
    f"{TEST_UTILS}.get_summary_writer": ("writer", GET_SUMMARY_WRITER, ("logdir",)),
    f"{TEST_UTILS}.close_summary_writer": ("close", CLOSE_SUMMARY_WRITER, ("summary_writer",)),
    f"{TEST_UTILS}.print_training_update": ("update", TRAINING_UPDATE_HELPER,
                                            ("device", "step", "loss", "rate", "global_rate", "epoch",
                                             "summary_writer")),
}
HELPER_NAMES = {"write": "write_to_summary", "writer": "get_summary_writer", "close": "close_summary_writer",
                "update": "print_training_update"}
# the helpers engine/shared.py writes into a module of the folder, by the name it gives them
SHARED_NAMES = frozenset({"RateTracker", *HELPER_NAMES.values()})


class TestUtilities(Rule):
    """NM244: the helpers torch_xla's example scripts are made of, where a native form computes the same:
    `test_utils.now()` (the wall-clock time, as text), `xu.SampleGenerator(data, n)` (fake data: `data`, n times,
    as often as it is iterated, with a length), `print_training_update` / `print_test_update` without a summary
    writer (one `print` of the same fields; the device without torch_xla's ordinal suffix) and `xm.RateTracker()`
    (pure Python with no native counterpart: the file gets a class of its own that measures the same)."""

    codes = ("NM244", "NM246")
    triggers = (b"test_utils", b"SampleGenerator", b"print_training_update", b"print_test_update", b"RateTracker",
                b"summary_writer", b"write_to_summary")
    torch_xla_names_only = True  # every call it reports is one of torch_xla's (test_utils, SampleGenerator, ...)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in NOW:
            fmt = arg(node, 0, "format")
            if not only_args(node, fmt) or (fmt is not None and "%f" in code(fmt.value)):
                return  # microseconds: time.strftime has none
            clock, default = ctx.module_ref("time"), ctx.string("%H:%M:%S")

            def build(call: cst.Call) -> cst.BaseExpression:
                given = arg(call, 0, "format")
                return expression(f"{clock}.strftime({code(given.value) if given else default})")
        elif qual in SAMPLE_GENERATOR:
            data, count = arg(node, 0, "data"), arg(node, 1, "sample_count")
            if data is None or count is None or not only_args(node, data, count):
                return

            delta = _shift(ctx, node, data.value, 1)[0] if "\n" in code(data.value) else 0

            def build(call: cst.Call) -> cst.BaseExpression:
                # one list of `count` references to the same batch: iterated again at every epoch, with a length
                # (the batch's lines keep their alignment where it moves; the count is written on one line)
                batch, times = arg(call, 0, "data").value, arg(call, 1, "sample_count").value
                return expression(f"[{moved(code(batch), delta)}] * {paren(one_line(code(times)))}")
        elif qual in RATE_TRACKER:
            smooth = arg(node, 0, "smooth_factor")
            if not only_args(node, smooth):
                return
            name = self.rate_tracker(define=False)

            def build(call: cst.Call) -> cst.BaseExpression:
                return call.with_changes(func=cst.Name(name))
        elif qual in UPDATES and (build := update_print(ctx, node, qual)) is not None:
            pass
        elif qual in SUMMARY_HELPERS:
            self._summary_helper(node, qual)
            return
        elif qual in STEP_CLOSURE and (closure := closure_update(ctx, node)) is not None:
            direct, build_direct = closure
            ctx.handled.add(direct.func)  # the helper passed as the closure goes with the call (no NM199)
            if ctx.report("NM244", node, call=short(node), fixed=short(build_direct(direct))):
                ctx.replace(node, build_direct(direct))  # the arguments are names and literals: nothing to keep
            return
        else:
            return
        fixed = short(build(node))
        if qual in RATE_TRACKER and self._imported is None and (shared := self._shared(name)) is not None:
            fixed += f"`, a class imported from {shared}.py, which the fix writes beside the file for the scripts " \
                "of its folder, with `add(n)`, `rate()` and `global_rate()"
        elif qual in RATE_TRACKER:
            fixed += "`, a class the fix defines after the imports, with `add(n)`, `rate()` and `global_rate()"
        if ctx.report("NM244", node, call=short(node), fixed=fixed):
            ctx.replace(node, build)  # from the call as the other rules left it (`xr.world_size()` inside)
            if qual in RATE_TRACKER:
                self.rate_tracker()


    def _summary_helper(self, node: cst.Call, qual: str) -> None:
        """A summary-writer helper of test_utils: the same call to the file's own copy of it. Writing XLA's
        metrics as scalars (`write_xla_metrics=`) has no native form: that argument goes, an unsafe fix (NM246)."""
        ctx = self.ctx
        helper, _, params = SUMMARY_HELPERS[qual]
        given = [arg(node, i, p) for i, p in enumerate(params)]
        if not only_args(node, *given):
            return  # a star or an unknown keyword
        xla = given[-1] if params[-1] == "write_xla_metrics" else None
        code_ = "NM244" if xla is None or isinstance(xla.value, cst.Name) and xla.value.value == "False" else "NM246"
        if (inline := _inline_summary(ctx, node, helper, given)) is not None:
            fixed, build_statement = inline
            if ctx.report(code_, node, call=short(node), fixed=fixed):
                replace_with_guard(ctx, ctx.current.statement, build_statement)
            return
        dropped = node.args.index(xla) if xla is not None else None
        name = self.summary_helper(helper, define=False)

        def build(call: cst.Call) -> cst.Call:
            args = [a for i, a in enumerate(call.args) if i != dropped]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return call.with_changes(func=cst.Name(name), args=args)

        fixed = f"{short(build(node))}`, the file's own copy of `test_utils.{HELPER_NAMES[helper]}"
        if (shared := self._shared(name)) is not None:
            fixed = f"{short(build(node))}`, from {shared}.py, which the fix writes beside the file for the scripts " \
                f"of its folder: a copy of `test_utils.{HELPER_NAMES[helper]}"
        if ctx.report(code_, node, call=short(node), fixed=fixed):
            self.summary_helper(helper)
            ctx.replace(node, build)

    def summary_helper(self, helper: str, define: bool = True) -> str:
        """The file's name for a summary-writer helper; defined after the imports when `define`."""
        ctx = self.ctx
        names = getattr(self, "_summary_names", None)
        if names is None:
            names = self._summary_names = {key: free_name(ctx, base) for key, base in HELPER_NAMES.items()}
        if define and (shared := self._shared(names[helper])) is not None:
            ctx.import_from(shared, names[helper])
        elif define:
            clock = ctx.module_ref("time", scope=ctx.analysis.module_scope) if helper in ("writer", "update") else ""
            template = next(t for h, t, _ in SUMMARY_HELPERS.values() if h == helper)
            ctx.define(template.format(clock=clock, **names))
        return names[helper]

    def _shared(self, name: str) -> str | None:
        """The module of the folder's shared helpers the file imports the helper `name` from (engine/shared.py),
        where the file binds that name nowhere (its copy then keeps another name); else None."""
        project = self.ctx.settings.project
        module = project.shared_helpers if project is not None else None
        return module if module is not None and name in SHARED_NAMES else None

    def rate_tracker(self, define: bool = True) -> str:
        """The name of the file's RateTracker class; with `define`, made once: imported from the project module
        that has it (the program's base module, see FileProject.rate_tracker_from), else defined after the
        imports."""
        ctx = self.ctx
        if getattr(self, "_rate_tracker", None) is None:
            self._imported = _import_from(ctx, "RateTracker")
            self._rate_tracker = "RateTracker" if self._imported is not None else free_name(ctx, "RateTracker")
            self._rate_tracker_made = False
        name = self._rate_tracker
        if define and not self._rate_tracker_made:
            self._rate_tracker_made = True
            if self._imported is not None:
                ctx.replace(self._imported, lambda node: _add_name(node, name))
            elif (shared := self._shared(name)) is not None:
                ctx.import_from(shared, name)
            else:
                clock = ctx.module_ref("time", scope=ctx.analysis.module_scope)
                ctx.define(RATE_TRACKER_CLASS.format(name=name, clock=clock))
        return name


def _import_from(ctx, name: str) -> cst.ImportFrom | None:
    """The file's `from <module> import ...` at its top (outside any `if` / `try`) of the project module that
    defines `name` for it (FileProject.rate_tracker_from), where the file binds `name` nowhere."""
    project = ctx.settings.project
    module = project.rate_tracker_from if project is not None else None
    if module is None or ctx._name_taken(name):
        return None
    for statement in ctx.module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None \
                        and dotted_str(small.module) == module and not isinstance(small.names, cst.ImportStar):
                    return small
    return None


def _add_name(node: cst.ImportFrom, name: str) -> cst.ImportFrom:
    """`from m import B, C` -> `from m import A, B, C`: in order where the names are sorted, else last."""
    names = list(node.names)
    keys = [dotted_str(a.name) or "" for a in names]
    at = len(names)
    if keys == sorted(keys, key=str.lower):
        at = next((i for i, key in enumerate(keys) if key.lower() > name.lower()), len(names))
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    new = cst.ImportAlias(name=cst.Name(name))
    if at == len(names):
        names[-1] = names[-1].with_changes(comma=comma)
        names.append(new.with_changes(comma=node.names[-1].comma))
    else:
        names.insert(at, new.with_changes(comma=comma))
    return node.with_changes(names=names)


def _shift(ctx, node: cst.CSTNode, part: cst.CSTNode, offset: int) -> tuple[int, int, int]:
    """How many columns `part` of `node` moves when the code that replaces `node` starts with it `offset`
    characters in, the column `part` started at, and the indentation of the statement's block."""
    statement = ctx.current.statement
    found = positions.positions_of(ctx.module, [(node, statement), (part, statement), (statement, statement)])
    if node not in found or part not in found or statement not in found:
        return 0, 0, 0
    start = found[part].start.column
    return found[node].start.column + offset - start, start, found[statement].start.column


def _inline_summary(ctx, node: cst.Call, helper: str, given: list) -> tuple[str, Callable] | None:
    """`write_to_summary(writer, step, dict_to_write={"k": v, ...})` and `close_summary_writer(writer)`, alone on
    their line with the writer a name or an attribute of one, as the native lines they run: `if writer is not None:`
    and an `add_scalar(k, v, step)` per key of the literal dict, or `writer.close()` (which flushes first). The
    message and a builder of the new statement from the statement as the other rules left it."""
    writer = given[0]
    if helper not in ("write", "close") or writer is None or not is_statement(ctx, node) \
            or not isinstance(writer.value, (cst.Name, cst.Attribute)) or dotted_str(writer.value) is None:
        return None
    if helper == "write":
        scalars = given[2]
        if scalars is None or not isinstance(scalars.value, cst.Dict) \
                or not all(isinstance(e, cst.DictElement) for e in scalars.value.elements):
            return None
        step_index = node.args.index(given[1]) if given[1] is not None else None
        scalars_index = node.args.index(scalars)

        def lines(call: cst.Call) -> list[str]:
            name, step = code(call.args[0].value), call.args[step_index].value if step_index is not None else None
            tail = "" if step is None or isinstance(step, cst.Name) and step.value == "None" else f", {code(step)}"
            return [f"{name}.add_scalar({code(e.key)}, {code(e.value)}{tail})"
                    for e in call.args[scalars_index].value.elements]
    else:
        def lines(call: cst.Call) -> list[str]:
            return [f"{code(call.args[0].value)}.close()"]

    def build(statement: cst.SimpleStatementLine) -> cst.BaseStatement:
        call = statement.body[0].value
        body = cst.parse_module("".join(f"{line}\n" for line in lines(call))).body
        test = expression(f"{code(call.args[0].value)} is not None")
        return cst.If(test=test, body=cst.IndentedBlock(body=body, header=statement.trailing_whitespace),
                      leading_lines=statement.leading_lines)

    shown = lines(node)
    fixed = f"if {code(writer.value)} is not None: {shown[0]}{'; ...' if len(shown) > 1 else ''}"
    return fixed, build


def update_print(ctx, node: cst.Call, qual: str) -> Callable[[cst.Call], cst.BaseExpression] | None:
    """`print("| <label> Device={} ... Time={}".format(...), flush=True)`, as torch_xla's helper prints it."""
    label, params = UPDATES[qual]
    given = {name: arg(node, i, name) for i, (name, _, _) in enumerate(params)}
    if not only_args(node, *given.values()) or any(given[name] is None for name, _, omit in params if not omit):
        return None  # a summary writer (it also writes scalars), a star, or a required field missing
    formats, optional = {name: fmt for name, fmt, _ in params}, {name for name, _, omit in params if omit}
    fields = [name for name in PRINT_ORDER[label] if given[name] is not None and not (
        name in optional and isinstance(given[name].value, cst.Name) and given[name].value.value == "None")]
    template = ctx.string(" ".join(["|", label, *(formats[name] for name in fields), "Time={}"]))
    clock = f"{ctx.module_ref('time')}.strftime({ctx.string('%H:%M:%S')})"
    positions = {name: i for i, (name, _, _) in enumerate(params)}

    def build(call: cst.Call) -> cst.BaseExpression:
        values = [code(arg(call, positions[name], name).value) for name in fields]
        return expression(f"print({template}.format({', '.join([*values, clock])}), flush=True)")
    return build


def closure_update(ctx, node: cst.Call) -> tuple[cst.Call, Callable[[cst.Call], cst.BaseExpression]] | None:
    """`xm.add_step_closure(test_utils.print_test_update, args=(device, None, epoch))` alone on its line, the
    arguments names and literals: the direct call and the print that replaces it."""
    if ctx.qualname(node.func) not in STEP_CLOSURE or not is_statement(ctx, node):
        return None
    fn, args = arg(node, 0, "closure"), arg(node, 1, "args")
    qual = ctx.qualname(fn.value) if fn is not None else None
    if qual not in UPDATES or args is None or not only_args(node, fn, args) or not isinstance(args.value, cst.Tuple):
        return None
    simple = (cst.Name, cst.Integer, cst.Float, cst.SimpleString)
    if not all(isinstance(e, cst.Element) and isinstance(e.value, simple) for e in args.value.elements):
        return None
    direct = cst.Call(func=fn.value, args=[cst.Arg(value=e.value) for e in args.value.elements])
    build = update_print(ctx, direct, qual)
    return None if build is None else (direct, build)


MODEL_WRAPPER = frozenset({"torch_xla.distributed.xla_multiprocessing.MpModelWrapper"})


class ModelWrapper(Rule):
    """NM260: `xmp.MpModelWrapper(model)` -> `model` (its one method, `.to(device)`, returned the model moved)."""

    codes = ("NM260",)
    triggers = (b"MpModelWrapper",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        model = arg(node, 0, "model")
        if ctx.qualname(node.func) not in MODEL_WRAPPER or model is None or not only_args(node, model):
            return
        loose = isinstance(ctx.current.parent, LOOSE_PARENTS)  # `x = <it>`: no parentheses needed there
        if ctx.report("NM260", node, call=short(node), fixed=code(model.value)):
            ctx.replace(node, lambda new: expression(code(arg(new, 0, "model").value) if loose
                                                     else paren(code(arg(new, 0, "model").value))))

