"""Building blocks for rules that rewrite whole statements and ranks: a report that keeps its imports only
when the fix is made, rank expressions read from the launcher's environment, statement replacement and guards.
"""

from __future__ import annotations

import re
from typing import Callable

import libcst as cst

from neuron_migrate.engine.facts import fact
from neuron_migrate.rules.processes import env_int
from neuron_migrate.rules.patterns import has_star
from neuron_migrate.syntax.codegen import code as generated
from neuron_migrate.syntax.parse import expression

# Places where an expression needs no parentheses of its own.
LOOSE_PARENTS = (cst.Arg, cst.If, cst.While, cst.Assign, cst.AnnAssign, cst.IfExp, cst.Return, cst.BooleanOperation,
                 cst.Expr)




def rank(ctx) -> str:
    return env_int(ctx, "RANK", "0")


def local_rank(ctx) -> str:
    return env_int(ctx, "LOCAL_RANK", "0")


def world_size(ctx) -> str:
    return env_int(ctx, "WORLD_SIZE", "1")


def free_name(ctx, base: str) -> str:
    """`base`, or `base_2`, `base_3` ...: the first name bound nowhere in the file."""
    name, n = base, 1
    while ctx._name_taken(name):
        n += 1
        name = f"{base}_{n}"
    return name


def assigned_values(ctx, name: str, scope) -> list[cst.BaseExpression]:
    """The values the plain assignments (`name = <value>`) binding `name` where it resolves from `scope` give it;
    its other bindings (parameters, loops, imports) give none."""
    owner = ctx.analysis.lookup(name, scope) if scope is not None else None
    parents = ctx.analysis.parents
    values = []
    for binding in owner.bindings.get(name, []) if owner is not None else []:
        target = parents.get(binding.node) if binding.kind == "assign" else None
        assign = parents.get(target)
        if isinstance(target, cst.AssignTarget) and isinstance(assign, cst.Assign):
            values.append(assign.value)
    return values


def several_processes(ctx) -> str:
    """The test that replicas exist: torchrun started more than one process. False in a plain `python train.py`
    and in a one-process torchrun run, where torch_xla's collectives returned the local value."""
    return f"{world_size(ctx)} > 1"


def dist(ctx) -> str:
    return ctx.module_ref("torch.distributed", "dist")


def neuron_path_test(ctx, device: cst.BaseExpression, node: cst.CSTNode) -> str | None:
    """A test that keeps code inserted in common code on the neuron path, or None where none is needed.

    Where XLA is optional (a guarded import, a flag), common code may run with CUDA's or the CPU's device:
    what a rewrite inserts there for the neuron device (`model.compile(backend="neuron")`, `torch.neuron.set_device`,
    a `"neuron"` process group) fails without torch-neuronx, so it runs only under
    `torch.device(<device>).type == "neuron"` (`device` the expression the code places on: a string or a device).
    None in an XLA branch, for an XLA device written out (`"xla"`, `xm.xla_device()`), in a file where XLA is not
    optional, and in the portable device style (its spellings run on every device).
    """
    from neuron_migrate.engine.names import dotted
    from neuron_migrate.engine.paths import XLA
    from neuron_migrate.rules.patterns import code
    from neuron_migrate.rules.target import portable

    paths = ctx.facts.paths
    if portable(ctx) or not paths.xla_optional or paths.path_of(node) == XLA or not dotted(device):
        return None
    return f"{ctx.module_ref('torch')}.device({code(device)}).type == {ctx.string('neuron')}"


def only_args(call: cst.Call, *allowed: cst.Arg | None) -> bool:
    """Every argument of `call` is one of `allowed` (no star, nothing unknown)."""
    known = {id(a) for a in allowed if a is not None}
    return not has_star(call) and all(id(a) in known for a in call.args)


def is_statement(ctx, node: cst.CSTNode) -> bool:
    """The call is a whole expression statement alone on its line."""
    occ = ctx.current
    return (isinstance(occ.small, cst.Expr) and occ.small.value is node
            and isinstance(occ.statement, cst.SimpleStatementLine) and len(occ.statement.body) == 1)


def assigned_name(ctx, node: cst.CSTNode) -> str | None:
    """`x = <node>` alone on its line: the target name."""
    occ = ctx.current
    small = occ.small
    if (isinstance(small, cst.Assign) and small.value is node and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and isinstance(occ.statement, cst.SimpleStatementLine) and len(occ.statement.body) == 1):
        return small.targets[0].target.value
    return None


def replace_statement(ctx, statement: cst.SimpleStatementLine, build: Callable[[cst.Call], list[str]]) -> None:
    """Put the lines `build` writes for the (already rewritten) call of `statement` where the statement was;
    its comments stay above the first line."""
    def fn(old: cst.SimpleStatementLine) -> cst.FlattenSentinel:
        lines = build(old.body[0].value)
        new = list(cst.parse_module("\n".join(lines) + "\n").body)
        new[0] = new[0].with_changes(leading_lines=old.leading_lines)
        return cst.FlattenSentinel(new)
    ctx.replace(statement, fn)


def paren(text: str) -> str:
    try:
        expr = expression(text)
    except cst.ParserSyntaxError:
        return f"({text})"
    simple = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float, cst.SimpleString)
    return text if isinstance(expr, simple) else f"({text})"


def moved(text: str, delta: int) -> str:
    """The code of an expression that now starts `delta` columns further right (left, when negative), its
    continuation lines moved as far, so that what they aligned with inside it stays aligned; as it is where a line
    would lose code or the expression holds a string over several lines."""
    lines = text.split("\n")
    if delta == 0 or len(lines) == 1 or '"""' in text or "'''" in text or "\\\n" in text:
        return text
    if delta < 0 and any(line.strip() and len(line) - len(line.lstrip(" ")) < -delta for line in lines[1:]):
        return text
    return "\n".join([lines[0], *((" " * delta + line if delta > 0 else line[-delta:]) if line.strip() else line
                                   for line in lines[1:])])


def shift_lines(node: cst.CSTNode, delta: int, start: int, block: int) -> cst.CSTNode:
    """`node`, which started at column `start` in a block indented by `block` columns, moved `delta` columns right
    (left, when negative): each of its continuation lines (and comment lines between them) that stood at or right
    of `start` (aligned with something inside it) moves as far; a line further left (a hanging indent) stays. As it
    is where a line would lose code. Multi-line strings keep their text."""
    if delta == 0:
        return node

    class Shift(cst.CSTTransformer):
        ok = True

        def _moved(self, ws: cst.SimpleWhitespace, indented: bool) -> cst.SimpleWhitespace:
            width = len(ws.value) - len(ws.value.lstrip(" "))
            if width + (block if indented else 0) < start:
                return ws
            if delta < 0 and width < -delta:
                self.ok = False
                return ws
            return cst.SimpleWhitespace(" " * delta + ws.value if delta > 0 else ws.value[-delta:])

        def leave_ParenthesizedWhitespace(self, original, updated):
            lines = [line.with_changes(whitespace=self._moved(line.whitespace, line.indent))
                     if line.comment is not None else line for line in updated.empty_lines]
            return updated.with_changes(empty_lines=lines, last_line=self._moved(updated.last_line, updated.indent))

    shift = Shift()
    moved_node = node.visit(shift)
    return moved_node if shift.ok else node


def one_line(text: str) -> str:
    """An expression over several lines as one line, where it holds no string or comment (whose spaces count)."""
    if "\n" not in text or any(c in text for c in "#'\"\\"):
        return text
    return " ".join(text.split())


def keep_parens(old: cst.CSTNode, text: str) -> cst.BaseExpression:
    """The new expression, keeping the parentheses that surrounded the old one."""
    new = expression(text)
    if isinstance(old, cst.BaseExpression) and old.lpar:
        new = new.with_changes(lpar=old.lpar, rpar=old.rpar)
    return new


def guard_statement(ctx, statement: cst.CSTNode, condition: str, extra: list[str] = (), local: bool = False,
                    rank_zero: bool = True, join: bool = True) -> None:
    """Run `statement` (and `extra` lines after it) only on rank 0 (`local`: on each node's local rank 0), where
    `condition` says so: `if <condition>:` around it. Inside an existing rank-0 check no guard is added (unless
    `rank_zero` is False: `condition` tests something else, such as several processes); guards made for statements
    next to each other in one block become one `if`; a statement alone under an `if` gets `and <condition>` in its
    test instead (unless `join` is False: the caller puts more after the statement, which every rank runs)."""
    if rank_zero and under_rank_zero(ctx, statement, local):
        if extra:
            ctx.insert_after(statement, "".join(f"{x}\n" for x in extra))
        return
    sole = None if extra or not join else _sole_statement_of(ctx, statement)
    if sole is not None:  # `if flag: print(...)` -> `if flag and RANK == 0:`, not an `if` in an `if` (ruff's SIM102)
        ctx.replace(sole, lambda new: new.with_changes(test=expression(f"{loose(new.test)} and {condition}")))
        return
    def fn(old: cst.CSTNode) -> cst.CSTNode:
        body = [old.with_changes(leading_lines=[]), *cst.parse_module("".join(f"{x}\n" for x in extra)).body]
        return cst.If(test=expression(condition), body=cst.IndentedBlock(body=body), leading_lines=old.leading_lines)
    replace_with_guard(ctx, statement, fn)


def _sole_statement_of(ctx, statement: cst.CSTNode) -> cst.If | None:
    """The `if` (without `elif` / `else`) whose body is `statement` alone, with no comment above it; else None. Not
    `if __name__ == "__main__":`, which stays the script's entry as written."""
    block = ctx.analysis.parents.get(statement)
    parent = ctx.analysis.parents.get(block) if isinstance(block, cst.IndentedBlock) else None
    if not isinstance(parent, cst.If) or parent.body is not block or parent.orelse is not None \
            or len(block.body) != 1 or any(line.comment is not None for line in statement.leading_lines) \
            or "__name__" in generated(parent.test):
        return None
    return parent


def replace_with_guard(ctx, statement: cst.CSTNode, build: Callable[[cst.CSTNode], cst.If]) -> None:
    """Replace `statement` by the `if` that `build` makes of it; such guards made side by side in one block with
    the same test become one `if`."""
    made = ctx.facts.rank_guards

    def fn(old: cst.CSTNode) -> cst.CSTNode:
        guard = build(old)
        made.add(id(guard))
        return guard
    ctx.replace(statement, fn)
    block = ctx.current.block if ctx.current is not None and ctx.current.statement is statement else None
    if block is not None and id(block) not in made.blocks:
        made.blocks.add(id(block))
        ctx.replace(block, lambda new: _merge_guards(new, made))


class RankGuards(set):
    """The ids of the `if` guards made in one file (`blocks`: those whose block merges them)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: set[int] = set()


@fact
def rank_guards(ctx) -> RankGuards:
    """The guards guard_statement made in this file, so that guards side by side become one."""
    return RankGuards()


def _merge_guards(block, made: RankGuards):
    """Consecutive guards made here, with the same condition, become one `if` (comments between them go inside)."""
    body: list = []
    merged = False
    for stmt in block.body:
        prev = body[-1] if body else None
        if (prev is not None and id(prev) in made and id(stmt) in made
                and generated(prev.test) == generated(stmt.test)):
            inner = list(stmt.body.body)
            inner[0] = inner[0].with_changes(leading_lines=[*stmt.leading_lines, *inner[0].leading_lines])
            joined = prev.with_changes(body=prev.body.with_changes(body=[*prev.body.body, *inner]))
            made.add(id(joined))
            body[-1] = joined
            merged = True
        else:
            body.append(stmt)
    return block.with_changes(body=body) if merged else block


RANK_ZERO_NAMES = frozenset({"is_master_ordinal", "is_main_process", "is_master", "is_rank_zero", "is_global_zero",
                             "is_world_process_zero", "is_master_rank", "is_rank_0", "is_main_rank"})
LOCAL_RANK_ZERO_NAMES = frozenset({"is_local_main_process", "is_local_process_zero", "is_local_master"})
RANKISH = re.compile(r"rank|ordinal|process_index", re.I)
LOCAL = re.compile(r"local", re.I)


def under_rank_zero(ctx, statement: cst.CSTNode, local: bool = False) -> bool:
    """`statement` runs only on rank 0 already: it is in the body of an `if` whose test checks for rank 0 (a
    local rank-0 check is enough where `local`), in the same function."""
    parents = ctx.analysis.parents
    node = statement
    while node is not None:
        parent = parents.get(node)
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(parent, cst.If) and parent.body is node:
            found = rank_zero_test(parent.test)
            if found == "global" or (found == "local" and local):
                return True
        node = parent
    return False


def rank_zero_test(test: cst.BaseExpression) -> str | None:
    """"global" for a test that holds on rank 0 only (`rank == 0`, `dist.get_rank() == 0`,
    `xm.is_master_ordinal()`, `accelerator.is_main_process`, ...), "local" for one of each node's local rank 0."""
    if isinstance(test, cst.BooleanOperation):
        if isinstance(test.operator, cst.And):
            found = {rank_zero_test(test.left), rank_zero_test(test.right)}
            return "global" if "global" in found else "local" if "local" in found else None
        return None
    if isinstance(test, cst.Call):
        test = test.func
    if isinstance(test, (cst.Name, cst.Attribute)):
        name = test.value if isinstance(test, cst.Name) else test.attr.value
        return "global" if name in RANK_ZERO_NAMES else "local" if name in LOCAL_RANK_ZERO_NAMES else None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        left, right = test.left, target.comparator
        if isinstance(target.operator, cst.Equal):
            other = right if _is_zero(left) else left if _is_zero(right) else None
        elif isinstance(target.operator, cst.In) and isinstance(right, (cst.Tuple, cst.List)) \
                and any(_is_zero(e.value) for e in right.elements):
            other = left
        else:
            other = None
        text = generated(other) if other is not None else ""
        if text and RANKISH.search(text):
            return "local" if LOCAL.search(text) else "global"
    return None


def _is_zero(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Integer) and node.value == "0"


def sole_body_if(ctx, node: cst.CSTNode) -> cst.If | None:
    """The `if` without an `else` whose whole body is `node`'s statement (`if c: f()`, or `f()` alone in its
    block), so that a condition added to its test runs the statement under both; None elsewhere."""
    occ = ctx.current
    small = occ.small
    if small is None or not (small is node or getattr(small, "value", None) is node):
        return None
    branch, body = occ.statement, None
    if type(branch) is cst.If and type(branch.body) is cst.SimpleStatementSuite:
        body = branch.body.body  # the one-line form
    elif type(branch) is cst.SimpleStatementLine and type(occ.block) is cst.IndentedBlock \
            and len(occ.block.body) == 1:
        body, branch = branch.body, ctx.analysis.parents.get(occ.block)
    if type(branch) is not cst.If or branch.orelse is not None or body is None or len(body) != 1:
        return None
    return branch


def one_line_body(ctx, node: cst.CSTNode) -> cst.SimpleStatementSuite | None:
    """The one-line body (`else: f()`, `for x in y: f()`) whose only statement is `node`'s, or None."""
    small = ctx.current.small
    if small is None or not (small is node or getattr(small, "value", None) is node):
        return None
    suite = ctx.analysis.parents.get(small)
    return suite if type(suite) is cst.SimpleStatementSuite and len(suite.body) == 1 else None


def loose(test: cst.BaseExpression) -> str:
    """`test` as the left operand of `and`: in parentheses where it binds more loosely (`a or b`, `x if c else y`)."""
    text = generated(test)
    weaker = (type(test) is cst.BooleanOperation and type(test.operator) is cst.Or) \
        or type(test) in (cst.IfExp, cst.Lambda, cst.NamedExpr)
    return f"({text})" if weaker and not test.lpar else text


def alone_on_line(ctx, node: cst.CSTNode) -> bool:
    """`node` is the only small statement of a whole line (so the line can become a block)."""
    occ = ctx.current
    return isinstance(occ.statement, cst.SimpleStatementLine) and len(occ.statement.body) == 1 \
        and occ.small is occ.statement.body[0] and (occ.small is node or getattr(occ.small, "value", None) is node)
