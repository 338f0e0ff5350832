"""Building blocks for rules that rewrite whole statements and ranks: a report that keeps its imports only
when the fix is made, rank expressions read from the launcher's environment, statement replacement and guards.
"""

from __future__ import annotations

from neuron_migrate.engine.facts import fstring_quote

from typing import Callable

import libcst as cst

from neuron_migrate.rules.patterns import has_star
from neuron_migrate.syntax.parse import expression

# Places where an expression needs no parentheses of its own.
LOOSE_PARENTS = (cst.Arg, cst.If, cst.While, cst.Assign, cst.AnnAssign, cst.IfExp, cst.Return, cst.BooleanOperation,
                 cst.Expr)


def env_int(ctx, variable: str, default: str) -> str:
    """`int(os.environ.get("RANK", 0))`: what torchrun set, or the single-process value."""
    quote = fstring_quote(ctx, ctx.current.node) or ctx.quote
    return f"int({ctx.module_ref('os')}.environ.get({quote}{variable}{quote}, {default}))"


def rank(ctx) -> str:
    return env_int(ctx, "RANK", "0")


def local_rank(ctx) -> str:
    return env_int(ctx, "LOCAL_RANK", "0")


def world_size(ctx) -> str:
    return env_int(ctx, "WORLD_SIZE", "1")


def several_processes(ctx) -> str:
    """The test that replicas exist: torchrun started more than one process. False in a plain `python train.py`
    and in a one-process torchrun run, where torch_xla's collectives returned the local value."""
    return f"{world_size(ctx)} > 1"


def dist(ctx) -> str:
    return ctx.module_ref("torch.distributed", "dist")


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


def keep_parens(old: cst.CSTNode, text: str) -> cst.BaseExpression:
    """The new expression, keeping the parentheses that surrounded the old one."""
    new = expression(text)
    if isinstance(old, cst.BaseExpression) and old.lpar:
        new = new.with_changes(lpar=old.lpar, rpar=old.rpar)
    return new


def guard_statement(ctx, statement: cst.CSTNode, condition: str, extra: list[str] = ()) -> None:
    """Run `statement` (and `extra` lines after it) only when `condition` holds: `if <condition>:` around it."""
    def fn(old: cst.CSTNode) -> cst.CSTNode:
        body = [old.with_changes(leading_lines=[]), *cst.parse_module("".join(f"{x}\n" for x in extra)).body]
        return cst.If(test=expression(condition), body=cst.IndentedBlock(body=body),
                      leading_lines=old.leading_lines)
    ctx.replace(statement, fn)


def alone_on_line(ctx, node: cst.CSTNode) -> bool:
    """`node` is the only small statement of a whole line (so the line can become a block)."""
    occ = ctx.current
    return isinstance(occ.statement, cst.SimpleStatementLine) and len(occ.statement.body) == 1 \
        and occ.small is occ.statement.body[0] and (occ.small is node or getattr(occ.small, "value", None) is node)
