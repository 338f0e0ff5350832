"""NM210-NM212: torch_xla's device loaders and copies become the plain loader plus an explicit move.

A device loader is replaced by the loader it wrapped only when every loop that reads its batches is found
(a `for` over it, or over `enumerate(...)` of it, in the same function, its closures, or a function of the
same file it is passed to); the move goes at the top of each such loop. One kept on an object, or on a name that
is only iterated, becomes the file's own class that moves each batch (NM247). Anything else is marked (NM211).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.engine.names import Occurrence, Scope
from neuron_migrate.rules.patterns import arg, code, short
from neuron_migrate.rules import Rule
from neuron_migrate.rules.compile import XLA_DEVICE
from neuron_migrate.rules.rewrites import assigned_name, free_name, only_args
from neuron_migrate.syntax.parse import expression
from neuron_migrate.syntax.walk import walk

PL = "torch_xla.distributed.parallel_loader"
MP_DEVICE_LOADER = frozenset({f"{PL}.MpDeviceLoader"})
PARALLEL_LOADER = frozenset({f"{PL}.ParallelLoader"})
PROGRESS_BARS = frozenset({"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.std.tqdm"})
SEND_TO_DEVICE = frozenset({"torch_xla.core.xla_model.send_cpu_data_to_device"})
# Keyword arguments of MpDeviceLoader that only tune prefetching.
# `batches_per_execution` only set how many batches the loader sent and yielded between its own `mark_step`s: no
# graph is cut natively, so it goes with them.
PREFETCH = frozenset({"loader_prefetch_size", "device_prefetch_size", "host_to_device_transfer_threads",
                      "batchdim", "fixed_batch_size", "batches_per_execution"})
# Built-ins that only iterate a loader or take its length.
ITERATING = frozenset({"iter", "enumerate", "zip", "len"})

# The stand-in for a device loader whose loops are out of sight (kept on `self`, or on a name that is only iterated):
# each batch moved as it is read, as often as it is iterated, with the loader's length. `{pytree}` / `{torch}` are
# the file's names for the modules.
DEVICE_LOADER_CLASS = '''\
class {name}:
    """The batches of `loader`, each moved to `device` as it is read (torch_xla's MpDeviceLoader, without prefetch)."""

    def __init__(self, loader, device):
        self.loader, self.device = loader, device

    def __iter__(self):
        for batch in self.loader:
            yield {pytree}.tree_map_only({torch}.Tensor, lambda t: t.to(self.device, non_blocking=True), batch)

    def __len__(self):
        return len(self.loader)'''


@dataclass
class Loop:
    occ: Occurrence
    node: cst.For
    enumerated: bool  # `for i, batch in enumerate(loader)`


@dataclass
class DeviceLoader:
    occ: Occurrence
    node: cst.Call
    loader: cst.BaseExpression
    device: cst.BaseExpression
    made: cst.Assign | None = None  # `para_loader = pl.ParallelLoader(loader, [device])` the call reads
    spelled: bool = False  # the loops move batches to `torch.device("neuron")`: the device's name is not theirs


def tree_mover(ctx):
    """A function giving the code that moves every tensor inside a value (a tensor, or tuples, lists and dicts
    of them) to a device; the imports it needs are added now."""
    pytree = ctx.module_ref("torch.utils._pytree", "pytree")
    torch = ctx.module_ref("torch")

    def move(device: str, value: str, non_blocking: bool = True) -> str:
        extra = ", non_blocking=True" if non_blocking else ""
        t = next(n for n in ("t", "tensor", "t_") if not re.search(rf"\b{n}\b", device))
        return f"{pytree}.tree_map_only({torch}.Tensor, lambda {t}: {t}.to({device}{extra}), {value})"
    return move


class DeviceLoaders(Rule):
    codes = ("NM210", "NM211", "NM247")
    triggers = (b"MpDeviceLoader", b"per_device_loader")
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """Every report is on a device loader's call (`_device_loader`): of a name that can be torch_xla's
        `MpDeviceLoader`, or of an attribute `per_device_loader` (a loader's name in a comment calls nothing)."""
        return scan.any_qual(MP_DEVICE_LOADER) or "per_device_loader" in scan.called

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.loaders: list[DeviceLoader] = []
        self.loops: dict[cst.CSTNode, Loop] = {}  # iterated expression -> its loop
        self.functions: dict[str, list[tuple[Occurrence, cst.FunctionDef]]] = {}
        # the reads of each name, in file order, and the call each argument belongs to where its function is a name
        self.reads_of: dict[str, list[tuple[Occurrence, cst.Name]]] = {}
        self.call_of: dict[cst.Arg, cst.Call] = {}

    def visit_Call(self, node: cst.Call) -> None:
        found = self._device_loader(node)
        if found is not None:
            self.loaders.append(DeviceLoader(self.ctx.current, node, *found))

    def visit_For(self, node: cst.For) -> None:
        iterated = self._unwrapped(node.iter)
        enumerated = isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Name) \
            and iterated.func.value == "enumerate" and bool(iterated.args) and iterated.args[0].keyword is None
        if enumerated:
            iterated = self._unwrapped(iterated.args[0].value)
        self.loops[iterated] = Loop(self.ctx.current, node, enumerated)

    def _unwrapped(self, iterated: cst.BaseExpression) -> cst.BaseExpression:
        """The iterable a progress bar wraps (`tqdm(loader, total=...)` yields the loader's items), else itself."""
        if isinstance(iterated, cst.Call) and iterated.args and iterated.args[0].keyword is None \
                and not iterated.args[0].star and self.ctx.qualname(iterated.func) in PROGRESS_BARS:
            return iterated.args[0].value
        return iterated

    def visit_Name(self, node: cst.Name) -> None:
        occ = self.ctx.current
        self.reads_of.setdefault(node.value, []).append((occ, node))
        parent = occ.parent
        if type(parent) is cst.Call and parent.func is node:
            for argument in parent.args:
                self.call_of.setdefault(argument, parent)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.setdefault(node.name.value, []).append((self.ctx.current, node))

    def _device_loader(self, node: cst.Call) -> tuple | None:
        qual = self.ctx.qualname(node.func)
        if qual in MP_DEVICE_LOADER:
            loader, device = arg(node, 0, "loader"), arg(node, 1, "device")
            tuning = [a for a in node.args if a.keyword is not None and a.keyword.value in PREFETCH]
            if loader is None or device is None or not only_args(node, loader, device, *tuning):
                return None
            return loader.value, device.value
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "per_device_loader" \
                and isinstance(func.value, cst.Call) and self.ctx.qualname(func.value.func) in PARALLEL_LOADER:
            inner = func.value
            loader, device = arg(inner, 0, "loader"), arg(node, 0, "device")
            if loader is None or device is None or not only_args(node, device) or inner.args[0] is not loader:
                return None
            return loader.value, device.value
        if isinstance(func, cst.Attribute) and func.attr.value == "per_device_loader" \
                and isinstance(func.value, cst.Name):
            made = self._made_just_before(func.value)
            device = arg(node, 0, "device")
            if made is None or device is None or not only_args(node, device):
                return None
            return made.value.args[0].value, device.value, made
        return None

    def _made_just_before(self, name: cst.Name) -> cst.Assign | None:
        """`para_loader = pl.ParallelLoader(loader, [device])`, the statement right before the one that reads
        `para_loader.per_device_loader(device)`, in the same block."""
        ctx = self.ctx
        block = getattr(ctx.current.block, "body", ())
        index = next((i for i, s in enumerate(block) if s is ctx.current.statement), 0)
        before = block[index - 1] if index > 0 else None
        small = before.body[0] if isinstance(before, cst.SimpleStatementLine) and len(before.body) == 1 else None
        if not isinstance(small, cst.Assign) or len(small.targets) != 1 \
                or not isinstance(small.targets[0].target, cst.Name) or small.targets[0].target.value != name.value \
                or not isinstance(small.value, cst.Call) or ctx.qualname(small.value.func) not in PARALLEL_LOADER:
            return None
        call = small.value
        loader, devices = arg(call, 0, "loader"), arg(call, 1, "devices")
        if loader is None or devices is None or not only_args(call, loader, devices) or call.args[0] is not loader \
                or not isinstance(devices.value, cst.List) or len(devices.value.elements) != 1:
            return None
        return small

    def _two_step_alone(self, found: DeviceLoader) -> bool:
        """The name `para_loader = pl.ParallelLoader(...)` binds is read only by `.per_device_loader(...)` calls,
        one right after each binding: the binding can go with the call."""
        ctx = self.ctx
        name = found.made.targets[0].target.value
        scope = ctx.analysis.lookup(name, found.occ.scope)
        if scope is None:
            return False
        reads = [(occ, node) for occ, node in self.reads_of.get(name, ())
                 if ctx.analysis.lookup(name, occ.scope) is scope and not isinstance(occ.parent, cst.AssignTarget)]
        calls = [found_.node.func.value for found_ in self.loaders if found_.made is not None]
        return len(reads) == len(scope.bindings.get(name, ())) and all(any(node is c for c in calls)
                                                                        for _occ, node in reads)

    def finish(self) -> None:
        ctx = self.ctx
        for found in self.loaders:
            ctx.current = found.occ
            if found.made is not None and not self._two_step_alone(found):
                continue  # the ParallelLoader is read elsewhere too: left to NM199
            loops = self._loops(found) if self._known_device(found) else None
            if loops is None or any(_batch(loop) is None for loop in loops):
                if found.made is not None or not self._kept(found):
                    ctx.report("NM211", found.node, call=short(found.node))
                    self._handled(found)  # one marker: NM211 says what to do, no NM199 beside it
                    if found.made is not None:
                        ctx.handled.add(found.made.value.func)
                continue
            if not ctx.report("NM210", found.node, call=short(found.node), fixed=code(found.loader)):
                continue
            if found.made is not None:
                ctx.replace(found.node, expression(code(found.loader)))
                ctx.remove(found.made)
                ctx.handled.add(found.made.value.func)
            else:
                ctx.replace(found.node, _loader_of)
            self._handled(found)
            self._drop_alias(found)
            device = self._device_code(found)
            for loop in loops:
                if _moves_batch(loop.node.body, _batch(loop)):
                    continue  # the loop moves its batch itself (a no-op with the device loader): once is enough
                ctx.current = loop.occ
                ctx.insert_before(loop.node.body.body[0], self._move(_batch(loop), device) + "\n")
        ctx.current = None

    def _drop_alias(self, found: DeviceLoader) -> None:
        """`device_loader = pl.MpDeviceLoader(loader, device)` would leave `device_loader = loader`, a second
        name for the loader: where the statement stands in a function's (or the module's) own block, the name is
        bound there once and read only there, and `loader` is a name that block binds only in statements before
        it, the reads take `loader` and the statement goes."""
        ctx = self.ctx
        small, occ = found.occ.small, found.occ
        if not isinstance(small, cst.Assign) or small.value is not found.node or len(small.targets) != 1 \
                or not isinstance(alias := small.targets[0].target, cst.Name) \
                or not isinstance(original := found.loader, cst.Name) or found.node.args[0].value is not original:
            return
        scope, block = occ.scope, occ.block
        owner = ctx.analysis.lookup(alias.value, scope)
        if owner is not scope or len(scope.bindings.get(alias.value, ())) != 1 \
                or ctx.analysis.lookup(original.value, scope) is not scope or len(occ.statement.body) != 1 \
                or block is not getattr(scope.node, "body", None) and block is not scope.node:
            return
        body = list(block.body)
        where = body.index(occ.statement)
        for binding in scope.bindings[original.value]:
            if binding.kind == "param":
                continue  # the function's parameter: bound before any statement of it
            top = _top_statement(ctx, binding.node, block)
            if top is None or body.index(top) >= where:
                return  # bound again after the alias (or out of sight): the two names differ there
        reads = []
        for read_occ, node in self.reads_of.get(alias.value, ()):
            if node is alias:
                continue
            parent = read_occ.parent
            if isinstance(parent, cst.Attribute) and parent.attr is node \
                    or isinstance(parent, cst.Arg) and parent.keyword is node:
                continue  # `x.device_loader`, `f(device_loader=...)`: another name
            if ctx.analysis.lookup(alias.value, read_occ.scope) is not scope:
                continue  # another function's own name (`def evaluate(model, device_loader)`)
            if read_occ.scope is not scope:
                return  # read in a nested function or class: left as written
            reads.append(node)
        ctx.remove(small)
        for node in reads:
            ctx.replace(node, cst.Name(original.value))

    def _kept(self, found: DeviceLoader) -> bool:
        """NM247: a device loader whose loops are out of sight but that is only ever iterated: kept on an object
        (`self.loader = pl.MpDeviceLoader(loader, device)`, read in other methods), or bound to a name that is
        only iterated, measured, deleted, rebound or passed to `iter` / `enumerate` / `zip` or to a function of
        the file that does the same with it (`train_loop_fn(device_loader, ...)`, `iter(cyclic_iter(loader))`).
        The file's own class that moves each batch to the device as it is read stands in for it. False when it
        is not kept so."""
        ctx = self.ctx
        small = found.occ.small
        if not isinstance(small, cst.Assign) or small.value is not found.node or len(small.targets) != 1:
            return False
        target = small.targets[0].target
        if isinstance(target, cst.Attribute):
            if ctx.qualname(found.node.func) not in MP_DEVICE_LOADER:
                return False  # `per_device_loader(...)` also has `next()`, which code out of sight may call
        elif not isinstance(target, cst.Name) \
                or not self._iterated_only(target.value, ctx.analysis.lookup(target.value, found.occ.scope), 1):
            return False
        name = self._device_loader_class(define=False)
        fixed = short(_stand_in(found.node, name))
        if ctx.report("NM247", found.node, call=short(found.node), target=code(target), fixed=fixed):
            self._device_loader_class()
            ctx.replace(found.node, lambda call: _stand_in(call, name))
            self._handled(found)
        return True

    def _handled(self, found: DeviceLoader) -> None:
        """The torch_xla names of the replaced construction need no NM199 of their own."""
        func = found.node.func
        self.ctx.handled.add(func.value if isinstance(func, cst.Attribute) else func)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
            self.ctx.handled.add(func.value.func)

    def _iterated_only(self, name: str, scope: Scope | None, depth: int) -> bool:
        """Every read of `name` (bound in `scope`) only iterates the loader or takes its length (see `_kept`)."""
        ctx = self.ctx
        if scope is None:
            return False
        for occ, node in self.reads_of.get(name, ()):
            if ctx.analysis.lookup(name, occ.scope) is not scope:
                continue
            parent = occ.parent
            if node in self.loops or isinstance(parent, (cst.AssignTarget, cst.Param, cst.Del)):
                continue
            if not isinstance(parent, cst.Arg) or parent.keyword is not None or parent.star:
                return False
            call = self.call_of.get(parent)
            if call is None or not isinstance(call.func, cst.Name):
                return False
            if call.func.value in ITERATING and ctx.analysis.lookup(call.func.value, occ.scope) is None:
                continue
            inner = self._parameter(occ, call) if depth else None
            if inner is None or not self._iterated_only(*inner, depth - 1):
                return False
        return True

    def _device_loader_class(self, define: bool = True) -> str:
        """The name of the file's device loader class (defined once after the imports when `define`)."""
        ctx = self.ctx
        name = getattr(self, "_class_name", None)
        if name is None:
            name = self._class_name = free_name(ctx, "DeviceLoader")
        if define and not getattr(self, "_class_defined", False):
            self._class_defined = True
            scope = ctx.analysis.module_scope
            pytree = ctx.module_ref("torch.utils._pytree", "pytree", scope=scope)
            torch = ctx.module_ref("torch", scope=scope)
            ctx.define(DEVICE_LOADER_CLASS.format(name=name, pytree=pytree, torch=torch))
        return name

    def _known_device(self, found: DeviceLoader) -> bool:
        device = found.device
        return isinstance(device, cst.Name) or (
            isinstance(device, cst.Call) and not device.args and self.ctx.qualname(device.func) in XLA_DEVICE)

    def _device_code(self, found: DeviceLoader) -> str:
        if isinstance(found.device, cst.Name) and not found.spelled:
            return found.device.value
        return f"{self.ctx.module_ref('torch')}.device({self.ctx.string('neuron')})"

    def _loops(self, found: DeviceLoader) -> list[Loop] | None:
        """Every loop over the device loader's batches, or None when some use of it is out of sight."""
        ctx = self.ctx
        occ = found.occ
        if found.node in self.loops:
            return [self.loops[found.node]]
        name = assigned_name(ctx, found.node)
        if name is None:
            argument = ctx.analysis.parents.get(found.node)
            call = ctx.analysis.parents.get(argument)
            if not isinstance(argument, cst.Arg) or argument.star or not isinstance(call, cst.Call):
                return None
            inner = self._parameter_of(occ, call, argument)  # `train_loop(pl.MpDeviceLoader(...), ...)`
            loops = self._reads_as_loops(*inner, depth=0) if inner is not None else None
            return loops if loops and self._device_usable(found, loops) else None
        loops = self._reads_as_loops(name, ctx.analysis.lookup(name, occ.scope), depth=1)
        if loops is None or not loops:
            return None
        if not self._device_usable(found, loops):
            return None
        return loops

    def _reads_as_loops(self, name: str, scope: Scope | None, depth: int) -> list[Loop] | None:
        ctx = self.ctx
        if scope is None or len(scope.bindings.get(name, [])) != 1:
            return None
        loops = []
        for occ, node in self.reads_of.get(name, ()):
            if ctx.analysis.lookup(name, occ.scope) is not scope:
                continue
            if node in self.loops:
                loops.append(self.loops[node])
            elif isinstance(occ.parent, cst.Arg) and self._length(occ, occ.parent):
                continue  # `len(device_loader)`: the loader itself has the same length
            elif depth and isinstance(occ.parent, cst.Arg) and occ.parent.keyword is None:
                inner = self._through_call(occ, node, depth)
                if inner is None:
                    return None
                loops.extend(inner)
            elif not isinstance(occ.parent, (cst.Param, cst.AssignTarget)):
                return None
        return loops

    def _through_call(self, occ: Occurrence, node: cst.Name, depth: int) -> list[Loop] | None:
        """`train_loop(device_loader, ...)` with `def train_loop(loader, ...)` in this file: its loops."""
        call = self.call_of.get(occ.parent)
        inner = self._parameter(occ, call) if call is not None else None
        return None if inner is None else self._reads_as_loops(*inner, depth - 1)

    def _parameter(self, occ: Occurrence, call: cst.Call) -> tuple[str, Scope | None] | None:
        """The parameter of the file's own function `call` calls that receives the positional argument `occ`
        stands in, and the function's scope; None when the function or the parameter is not found."""
        return self._parameter_of(occ, call, occ.parent)

    def _parameter_of(self, occ: Occurrence, call: cst.Call, argument: cst.Arg) -> tuple[str, Scope | None] | None:
        """The parameter of the file's own function `call` calls that receives `argument` (by position or by
        keyword), and the function's scope; None when the function or the parameter is not found."""
        ctx = self.ctx
        if not isinstance(call.func, cst.Name):
            return None
        defs = self.functions.get(call.func.value, [])
        if len(defs) != 1:
            return None
        def_occ, function = defs[0]
        if ctx.analysis.lookup(call.func.value, occ.scope) is not def_occ.scope:
            return None
        params = function.params.params
        body_scope = next((s for s in ctx.analysis.scopes if s.node is function), None)
        if argument.keyword is not None:
            names = [p.name.value for p in (*params, *function.params.kwonly_params)]
            return (argument.keyword.value, body_scope) if argument.keyword.value in names else None
        positional = [a for a in call.args if a.keyword is None and not a.star]
        position = next((i for i, a in enumerate(positional) if a is argument), None)
        if position is None or position >= len(params):
            return None
        return params[position].name.value, body_scope

    def _length(self, occ: Occurrence, argument: cst.Arg) -> bool:
        """`argument` is the one argument of the built-in `len` (not a function of the file's own of that name)."""
        call = self.call_of.get(argument)
        return call is not None and isinstance(call.func, cst.Name) and call.func.value == "len" \
            and len(call.args) == 1 and argument.keyword is None and not argument.star \
            and self.ctx.analysis.lookup("len", occ.scope) is None

    def _device_usable(self, found: DeviceLoader, loops: list[Loop]) -> bool:
        """The loops can name the device: by the loader's own name for it, or, where that name means something else
        in them (a function's own `device` parameter) and it is bound once to the XLA device, spelled out."""
        if self._device_visible(found, loops):
            return True
        device = found.device
        owner = self.ctx.analysis.lookup(device.value, found.occ.scope) if isinstance(device, cst.Name) else None
        bindings = owner.bindings.get(device.value, []) if owner is not None else []
        if len(bindings) != 1 or bindings[0].kind != "assign":
            return False
        target = self.ctx.analysis.parents.get(bindings[0].node)
        assign = self.ctx.analysis.parents.get(target)
        value = assign.value if isinstance(target, cst.AssignTarget) and isinstance(assign, cst.Assign) else None
        if not (isinstance(value, cst.Call) and not value.args and self.ctx.qualname(value.func) in XLA_DEVICE):
            return False
        found.spelled = True
        return True

    def _device_visible(self, found: DeviceLoader, loops: list[Loop]) -> bool:
        """The device name means the same thing inside every loop as where the loader was built."""
        device = found.device
        if not isinstance(device, cst.Name):
            return True
        lookup = self.ctx.analysis.lookup
        home = lookup(device.value, found.occ.scope)
        return all(lookup(device.value, loop.occ.scope) is home for loop in loops)

    def _move(self, batch: cst.BaseExpression, device: str) -> str:
        """The statement that moves the loop's batch to the device, keeping its structure."""
        if isinstance(batch, cst.Name):
            return f"{batch.value} = {tree_mover(self.ctx)(device, batch.value)}"
        names = [e.value.value for e in batch.elements]
        moved = [f"{n}.to({device}, non_blocking=True)" for n in names]
        return f"{', '.join(names)} = {', '.join(moved)}"


def _batch(loop: Loop) -> cst.BaseExpression | None:
    """What the loop binds each batch to (a name, or a tuple of names), or None when no move can follow it."""
    node = loop.node
    if not isinstance(node.body, cst.IndentedBlock):
        return None
    target = node.target
    if loop.enumerated:
        if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != 2:
            return None
        target = target.elements[1].value
    if isinstance(target, cst.Name):
        return target
    if isinstance(target, (cst.Tuple, cst.List)) and target.elements \
            and all(isinstance(e.value, cst.Name) for e in target.elements):
        return target
    return None


MOVERS = frozenset({"to", "cuda", "send_to_device", "move_to_device", "to_device", "tree_map_only", "tree_map"})


def _moves_batch(body: cst.IndentedBlock, batch: cst.BaseExpression) -> bool:
    """The first statement of the loop that reads the batch is an assignment that moves it (`batch =
    batch.to(device)`, `x, y = x.to(device), y.to(device)`, `batch = {k: v.to(device) for k, v in batch.items()}`,
    `batch = send_to_device(batch, device)`)."""
    names = {batch.value} if isinstance(batch, cst.Name) else {e.value.value for e in batch.elements}
    for statement in body.body:
        found = _BatchReads(names)
        walk(statement, found, tokens=False)  # as statement.visit(found), faster (syntax/walk.py)
        if not found.reads:
            continue
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
            else None
        return isinstance(small, cst.Assign) and found.moved
    return False


def _moves(call: cst.Call) -> bool:
    """The call is one of MOVERS, by its function's or method's name."""
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return name in MOVERS


class _BatchReads(cst.CSTVisitor):
    """Reads of the batch names in a statement, and whether one of them is inside a call that moves tensors."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.reads = 0
        self.movers = 0  # calls that move tensors, open around the current node
        self.moved = False
        self.moving: set[cst.CSTNode] = set()  # comprehensions whose element moves tensors

    def visit_Call(self, node: cst.Call) -> None:
        if _moves(node):
            self.movers += 1

    def leave_Call(self, node: cst.Call) -> None:
        if _moves(node):
            self.movers -= 1

    def visit_DictComp(self, node: cst.DictComp) -> None:
        self._comprehension(node, node.value, +1)

    def leave_DictComp(self, node: cst.DictComp) -> None:
        self._comprehension(node, node.value, -1)

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._comprehension(node, node.elt, +1)

    def leave_ListComp(self, node: cst.ListComp) -> None:
        self._comprehension(node, node.elt, -1)

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._comprehension(node, node.elt, +1)

    def leave_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._comprehension(node, node.elt, -1)

    def _comprehension(self, node: cst.CSTNode, element: cst.CSTNode, step: int) -> None:
        """`{k: v.to(device) for k, v in batch.items()}`: the batch is moved element by element, so the whole
        comprehension counts as a call that moves it."""
        if node not in self.moving:
            found = _Movers()
            walk(element, found, tokens=False)
            if not found.any:
                return
            self.moving.add(node)
        self.movers += step

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names:
            self.reads += 1
            self.moved = self.moved or self.movers > 0


class _Movers(cst.CSTVisitor):
    """Whether a subtree calls a function that moves tensors."""

    def __init__(self) -> None:
        self.any = False

    def visit_Call(self, node: cst.Call) -> None:
        self.any = self.any or _moves(node)


def _stand_in(call: cst.Call, name: str) -> cst.Call:
    """`name(loader, device)` for `MpDeviceLoader(loader, device, <tuning>...)` or
    `ParallelLoader(loader, [device], ...).per_device_loader(device)`."""
    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call):
        loader, device = call.func.value.args[0], arg(call, 0, "device")
    else:
        loader, device = arg(call, 0, "loader"), arg(call, 1, "device")
    dropped = len(call.args) > 2  # tuning arguments go: what is left fits on the line as the call opens it
    first = loader if loader.comma != cst.MaybeSentinel.DEFAULT and not dropped \
        else loader.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args = [first, device.with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    spacing = {"whitespace_before_args": cst.SimpleWhitespace("")} if dropped else {}
    return call.with_changes(func=cst.Name(name), args=args, **spacing)


def _top_statement(ctx, node: cst.CSTNode | None, block: cst.CSTNode) -> cst.CSTNode | None:
    """The statement of `block` that holds `node`, or None."""
    parents = ctx.analysis.parents
    while node is not None and parents.get(node) is not block:
        node = parents.get(node)
    return node


def _loader_of(call: cst.Call) -> cst.BaseExpression:
    if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call):
        call = call.func.value  # ParallelLoader(loader, [device]).per_device_loader(device)
    value = call.args[0].value
    return value.with_changes(lpar=[], rpar=[]) if isinstance(value, cst.BaseExpression) else value


class SendToDevice(Rule):
    codes = ("NM212",)
    triggers = (b"send_cpu_data_to_device",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in SEND_TO_DEVICE:
            return
        data, device = arg(node, 0, "data"), arg(node, 1, "device")
        if data is None or device is None or not only_args(node, data, device):
            return
        move = tree_mover(ctx)

        def build(call: cst.Call) -> cst.BaseExpression:
            device, value = code(arg(call, 1, "device").value), code(arg(call, 0, "data").value)
            return expression(move(device, value, non_blocking=False))

        if ctx.report("NM212", node, call=short(node), fixed=code(build(node))):
            ctx.replace(node, build)
