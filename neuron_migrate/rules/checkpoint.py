"""NM220 / NM221 / NM222: torch_xla checkpoint writers and readers become torch.save / torch.load (an xser call that
is the program's chosen format is marked instead); NM243: the CPU copy they made, asked for directly
(`xm._maybe_convert_to_cpu`); NM235 marks NxD's readers of per-rank shards."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.rules.patterns import XM, arg, code, short
from neuron_migrate.rules import Rule
from neuron_migrate.rules.rewrites import LOOSE_PARENTS, dist, free_name, guard_statement, is_statement, local_rank, \
    only_args, paren, rank, several_processes, under_rank_zero
from neuron_migrate.syntax.parse import expression

XSER = "torch_xla.utils.serialization"
SAVE = frozenset({f"{XM}.save", f"{XSER}.save"})
LOAD = frozenset({f"{XSER}.load"})
TO_CPU = frozenset({f"{XM}._maybe_convert_to_cpu"})
MEETINGS = frozenset({f"{XM}.rendezvous", "torch.distributed.barrier"})  # every process waits there
REPORTING = frozenset({"print", "master_print", "info", "debug", "warning", "log"})  # calls that wait for nobody


def cpu_copy(ctx, value: str) -> str:
    pytree = ctx.module_ref("torch.utils._pytree", "pytree")
    torch = ctx.module_ref("torch")
    return f"{pytree}.tree_map_only({torch}.Tensor, {torch}.Tensor.cpu, {value})"


# Names of objects whose state dict nests its tensors (optimizers, schedulers, scalers), not a module's
NESTED_STATE = ("opt", "sched", "scaler", "state")
PLAIN_CALLS = frozenset({"item", "tolist", "float", "int", "bool", "str", "len", "round"})


def plain_value(value: cst.BaseExpression) -> bool:
    """Values that hold no tensor: numbers, strings, and what `.item()`, `float()`, `int()`, ... return."""
    if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
        return True
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Attribute):
            return func.attr.value in ("item", "tolist") and not value.args
        return isinstance(func, cst.Name) and func.value in PLAIN_CALLS - {"item", "tolist"}
    return False


SIZE_CALLS = frozenset({"size", "dim", "numel", "nelement", "element_size"})


def holds_no_tensor(ctx, value: cst.BaseExpression, depth: int = 3) -> bool:
    """`value` is a number or a string, as far as the function reads: a plain value, arithmetic on plain values
    and sizes (`x.size()[0]`, `x.shape[0]`, `len(x)`), or a local name every assignment of which is one
    (`accuracy = 100.0 * correct.item() / total`, `total += data.size()[0]`). torch_xla's CPU copy of such a
    value copies nothing, so the migration makes none."""
    if plain_value(value):
        return True
    if depth <= 0:
        return False
    if type(value) is cst.BinaryOperation:
        return holds_no_tensor(ctx, value.left, depth) and holds_no_tensor(ctx, value.right, depth)
    if type(value) is cst.UnaryOperation:
        return holds_no_tensor(ctx, value.expression, depth)
    if type(value) is cst.Subscript:  # x.size()[0], x.shape[0]
        inner = value.value
        return (type(inner) is cst.Call and type(inner.func) is cst.Attribute and inner.func.attr.value in SIZE_CALLS
                and not inner.args) or (type(inner) is cst.Attribute and inner.attr.value == "shape")
    if type(value) is cst.Call:
        return type(value.func) is cst.Name and value.func.value == "len" and ctx.qualname(value.func) in (None, "len")
    if type(value) is cst.Name:
        return all(holds_no_tensor(ctx, v, depth - 1) for v in _local_values(ctx, value.value) or [value])
    return False


def _local_values(ctx, name: str) -> list[cst.BaseExpression] | None:
    """The values every binding of the local `name` assigns (`name = v`, `name += v`) in the current function,
    or None when one binds it otherwise (a parameter, a loop, a tuple target, global or nonlocal)."""
    scope = ctx.current.scope
    bindings = scope.bindings.get(name, ())
    if scope.kind != "function" or not bindings or name in scope.globals or name in scope.nonlocals \
            or any(b.kind != "assign" for b in bindings):
        return None
    targets = {id(b.node) for b in bindings}
    values: list[cst.BaseExpression] = []
    skipped = 0
    stack: list[cst.CSTNode] = list(scope.node.body.children)
    while stack:
        node = stack.pop()
        if type(node) is cst.Assign:
            unpacked = _unpacked(node, targets)
            if unpacked is not None:  # `total, correct = 0, 0`: the element at the name's place
                values.append(unpacked)
                continue
            if any(id(t.target) in targets for t in node.targets):
                if len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:
                    return None
                if node.value is ctx.current.node:  # `accuracy = xm.mesh_reduce(..., accuracy, ...)`: the result
                    skipped += 1
                    continue
                values.append(node.value)
        elif type(node) is cst.AugAssign:
            if id(node.target) in targets:
                values.append(node.value)
        elif type(node) is cst.AnnAssign:
            if id(node.target) in targets:
                return None
        elif not isinstance(node, (cst.BaseExpression, cst.FunctionDef, cst.ClassDef)):
            stack.extend(node.children)
    return values if values and len(values) + skipped == len(bindings) else None


def _unpacked(node: cst.Assign, targets: set[int]) -> cst.BaseExpression | None:
    """The value `a, b = x, y` gives the binding among `targets` (a plain name of the tuple), or None where the
    statement binds none of them that way (one target, a tuple value as long, no star on either side)."""
    if len(node.targets) != 1 or type(node.targets[0].target) not in (cst.Tuple, cst.List) \
            or type(node.value) is not cst.Tuple:
        return None
    names, values = node.targets[0].target.elements, node.value.elements
    if len(names) != len(values) or any(type(e) is not cst.Element for e in (*names, *values)):
        return None
    return next((v.value for n, v in zip(names, values) if type(n.value) is cst.Name and id(n.value) in targets),
                None)


def cpu_copy_template(ctx, value: cst.BaseExpression) -> str:
    """The CPU copy torch_xla made of `value` before saving or gathering it, as a template of `{value}`, in public
    APIs where the value's shape is known: a number as it is, a module's `state_dict()` tensor by tensor; else
    every tensor of the structure (`torch.utils._pytree`, PyTorch's own tree walk)."""
    if holds_no_tensor(ctx, value):
        return "{value}"
    if isinstance(value, cst.Call) and not value.args and isinstance(value.func, cst.Attribute) \
            and value.func.attr.value == "state_dict":
        owner = code(value.func.value)
        last = owner.rsplit(".", 1)[-1].lower()
        names = {n for n in owner.replace(".", " ").replace("(", " ").replace(")", " ").split()}
        if not any(word in last for word in NESTED_STATE) and not names & {"k", "v"}:
            return "{{k: v.cpu() for k, v in {value}.items()}}"
    return cpu_copy(ctx, "{value}")


READ_OLD = ("read checkpoints in torch_xla's layout",
            "convert the files `xser.save` wrote before the migration with `neuron-migrate checkpoint convert OLD NEW` "
            "before `torch.load` reads them")


def xser_chosen(ctx, node: cst.Call) -> str | None:
    """Where an xser call is the format the program chooses: inside a function whose name says xser
    (`def save_partial_xser`), or in a branch an option selects (`if args.save_xser:`, `x if load_xser else y`).
    A converter between the layouts exists to write (or read) that format; `torch.save` would silently write
    another. Returns how the program chooses it, or None."""
    parents = ctx.analysis.parents
    child: cst.CSTNode = node
    parent = parents.get(node)
    while parent is not None:
        if type(parent) in (cst.If, cst.IfExp) and child is not parent.test:
            names = [n.value for n in _names(parent.test) if "xser" in n.value.lower()]
            if names:
                return f"under `if {short(parent.test)}`" if type(parent) is cst.If \
                    else f"where `{short(parent.test)}` chooses it"
        elif type(parent) is cst.FunctionDef and "xser" in parent.name.value.lower():
            return f"in `{parent.name.value}`"
        child, parent = parent, parents.get(parent)
    return None


def _names(expr: cst.BaseExpression) -> list[cst.Name]:
    """The identifiers `expr` reads: names and the attributes it takes (`args.save_xser` gives `save_xser`)."""
    found: list[cst.Name] = []
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if type(node) is cst.Name:
            found.append(node)
        elif type(node) is cst.Attribute:
            found.append(node.attr)
            stack.append(node.value)
        else:
            stack.extend(node.children)
    return found


def mark_chosen(ctx, node: cst.Call, qual: str) -> bool:
    """NM222 for an xser call that is the program's chosen format (`xser_chosen`): kept as written, marked."""
    how = xser_chosen(ctx, node)
    if how is None:
        return False
    ctx.report("NM222", node, call=short(node), **chosen_fields(qual, how))
    return True


def chosen_fields(qual: str, how: str) -> dict[str, str]:
    """NM222's message fields for an xser call the program chooses (`how`: `xser_chosen`'s words)."""
    verb = "writes" if qual.endswith(".save") else "reads"
    return {"problem": f"{verb} torch_xla's xser layout, the format this program chooses ({how}); it is kept as "
                       "written, since `torch.save` / `torch.load` would silently change the format",
            "advice": "the native backend has no xser layout: drop that option (or keep the program on torch_xla "
                      "while something needs the layout) and convert existing xser checkpoints with "
                      "`neuron-migrate checkpoint convert OLD NEW` (docs/checkpoints.md)"}


# `save_function=xm.save`: the function itself, handed to a library that calls it on every process
SAVE_HELPER = '''\
def {name}(data, path):
    """torch.save of a CPU copy on local rank 0{then}, as xm.save did."""
{body}'''


class Save(Rule):
    """`xm.save(obj, path, master_only=True, global_master=False)` and `xser.save(...)` (same arguments)."""

    codes = ("NM220", "NM221", "NM222")
    triggers = (b"torch_xla",)
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(SAVE)  # a call of a save, or `xm.save` passed on as a value

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "save":
            self._passed_on(node)

    def _passed_on(self, node: cst.Attribute) -> None:
        """`model.save_pretrained(out, save_function=xm.save)`: the function itself, passed on, becomes the file's
        own `save_on_master` (a CPU copy written on local rank 0, then every process waits)."""
        ctx = self.ctx
        parent = ctx.current.parent
        if (isinstance(parent, cst.Call) and parent.func is node) or isinstance(parent, cst.Attribute) \
                or type(ctx.current.small) in (cst.Import, cst.ImportFrom) or ctx.qualname(node) != f"{XM}.save":
            return
        name = getattr(self, "_helper_name", None) or free_name(ctx, "save_on_master")
        waits = "" if ctx.facts.single_process else " and waits for every process"
        if not ctx.report("NM220", node, call=short(node), fixed=f"{name}`, a function the fix defines that saves "
                          f"a CPU copy on local rank 0{waits}: `{name}(data, path)"):
            return
        self._helper_name = name
        save = f"{ctx.module_ref('torch')}.save({cpu_copy(ctx, 'data')}, path)"
        if ctx.facts.single_process:
            body, then = f"    {save}", ""
        else:
            body = f"    if {local_rank(ctx)} == 0:\n        {save}\n    if {several_processes(ctx)}:\n" \
                   f"        {dist(ctx)}.barrier()"
            then = ", then every process waits for it"
        ctx.replace(node, cst.Name(name))
        ctx.define(SAVE_HELPER.format(name=name, then=then, body=body))

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual not in SAVE or (qual.startswith(XSER) and mark_chosen(ctx, node, qual)):
            return
        data, path = arg(node, 0, "data"), arg(node, 1, "file_or_path") or arg(node, 1, "path")
        master_only, global_master = arg(node, 2, "master_only"), arg(node, 3, "global_master")
        flags = [code(a.value) if a else None for a in (master_only, global_master)]
        if data is None or path is None or not only_args(node, data, path, master_only, global_master) \
                or not is_statement(ctx, node) or any(f not in (None, "True", "False") for f in flags):
            return
        condition = None
        if flags[0] != "False" and not ctx.facts.single_process:  # one process is every rank 0
            condition = f"{rank(ctx) if flags[1] == 'True' else local_rank(ctx)} == 0"
        template = f"{ctx.module_ref('torch')}.save({cpu_copy_template(ctx, data.value)}, {{target}})"

        def build(call: cst.Call) -> cst.BaseExpression:
            value = code(arg(call, 0, "data").value)
            target = code((arg(call, 1, "file_or_path") or arg(call, 1, "path")).value)
            return expression(template.format(value=value, target=target))

        fixed = code(build(node)) if condition is None else f"if {condition}: {code(build(node))}"
        # xm.save ends in a rendezvous: the ranks that do not write wait until the file is written (they may read
        # it next); one barrier after a run of saves
        meet = not ctx.facts.single_process and not under_rank_zero(ctx, ctx.current.statement, local=True) \
            and not self._save_follows(ctx.current.statement)
        code_ = "NM220" if qual.startswith(XM) else "NM221"
        if ctx.report(code_, node, call=short(node), fixed=fixed + ("; then, with several processes, dist.barrier()"
                                                                    if meet else "")):
            statement = ctx.current.statement
            ctx.replace(node, build)
            if condition is not None:
                guard_statement(ctx, statement, condition, local=flags[1] != "True", join=not meet)
            if meet:
                ctx.insert_after(statement, f"if {several_processes(ctx)}:\n    {dist(ctx)}.barrier()\n")

    def _save_follows(self, statement: cst.CSTNode) -> bool:
        """After `statement` in its block, past prints and log lines, comes another torch_xla save (whose barrier
        serves both) or a rendezvous / barrier of the program's own."""
        body = list(getattr(self.ctx.current.block, "body", ()))
        index = next((i for i, s in enumerate(body) if s is statement), len(body))
        for following in body[index + 1:]:
            call = following.body[0].value if isinstance(following, cst.SimpleStatementLine) \
                and len(following.body) == 1 and isinstance(following.body[0], cst.Expr) \
                and isinstance(following.body[0].value, cst.Call) else None
            if call is None:
                return False
            qual = self.ctx.qualname(call.func) or ""
            if qual in SAVE or qual in MEETINGS:
                return True
            name = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
            if name not in REPORTING:
                return False
        return False


class Load(Rule):
    codes = ("NM221", "NM222")
    triggers = (b"serialization",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(LOAD)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual not in LOAD or mark_chosen(ctx, node, qual):
            return
        fixed = f"{ctx.module_ref('torch')}.load"
        ctx.report("NM222", node, call=short(node), problem=READ_OLD[0], advice=READ_OLD[1])
        if ctx.report("NM221", node, call=short(node), fixed=f"{fixed}(...)"):
            ctx.replace(node.func, expression(fixed))


class CpuCopy(Rule):
    """NM243: `xm._maybe_convert_to_cpu(data, convert=True)`: the CPU copy of every tensor in `data` (the one
    `xm.save` writes); `convert=False` only waited for the device, which eager execution needs not."""

    codes = ("NM243",)
    triggers = (b"_maybe_convert_to_cpu",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in TO_CPU:
            return
        data, convert = arg(node, 0, "data"), arg(node, 1, "convert")
        if data is None or not only_args(node, data, convert):
            return
        flag = code(convert.value) if convert is not None else "True"
        loose = isinstance(ctx.current.parent, LOOSE_PARENTS)
        template = cpu_copy(ctx, "{value}")

        def build(call: cst.Call) -> cst.BaseExpression:
            value = code(arg(call, 0, "data").value)
            if flag == "False":
                return expression(paren(value))
            copy = template.format(value=value)
            if flag == "True":
                return expression(copy)
            text = f"{copy} if {code(arg(call, 1, 'convert').value)} else {value}"
            return expression(text if loose else f"({text})")

        if ctx.report("NM243", node, call=short(node), fixed=code(build(node))):
            ctx.replace(node, build)


NXD_LOAD = frozenset({"neuronx_distributed.trainer.load_checkpoint",
                      "neuronx_distributed.trainer.checkpoint.load_checkpoint",
                      "neuronx_distributed.parallel_layers.load",
                      "neuronx_distributed.parallel_layers.checkpointing.load"})


class NxdLoad(Rule):
    """NM235: NxD's readers of per-rank TP/PP shards; the marker names the command that converts them."""

    codes = ("NM235",)
    triggers = (b"load",)
    context = (b"neuronx_distributed",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(NXD_LOAD)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualname(node.func) not in NXD_LOAD:
            return
        sharded, xser = arg(node, None, "sharded"), arg(node, None, "load_xser")
        if sharded is not None and code(sharded.value) == "False" and (xser is None or code(xser.value) == "False"):
            return  # `parallel_layers.load(file, sharded=False)`: one plain torch.save file, which torch.load reads
        self.ctx.report("NM235", node, call=short(node))
