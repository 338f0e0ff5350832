"""NM105: `xm.optimizer_step(opt)` becomes `opt.step()` (its gradient averaging: NM106 in gradients.py)."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.rules.patterns import XM, arg, code, has_star, short
from neuron_migrate.rules import Rule
from neuron_migrate.syntax.parse import expression

OPTIMIZER_STEP = frozenset({f"{XM}.optimizer_step"})


def step_arguments(node: cst.Call) -> tuple[cst.Arg, cst.Arg | None] | None:
    """(optimizer, optimizer_args) of an `xm.optimizer_step(...)` call NM105 can rewrite: no star, no argument
    it does not know; None otherwise (the call stays, and so does the averaging it does)."""
    if has_star(node):
        return None
    opt = arg(node, 0, "optimizer")
    args = arg(node, 1, "optimizer_args")
    known = {id(a) for a in (opt, args, arg(node, 2, "groups"), arg(node, 3, "pin_layout"), arg(node, 4, "barrier"))
             if a is not None}
    if opt is None or any(id(a) not in known for a in node.args):
        return None
    return opt, args


class OptimizerStep(Rule):
    codes = ("NM105",)
    triggers = (b"optimizer_step",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(OPTIMIZER_STEP)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        found = step_arguments(node) if ctx.qualname(node.func) in OPTIMIZER_STEP else None
        if found is None:
            return
        opt, args = found
        if args is not None and not isinstance(args.value, cst.Dict):
            step_args = f"**{code(args.value)}"
        elif args is not None:
            parts = []
            for el in args.value.elements:
                key = el.key if isinstance(el, cst.DictElement) else None
                name = key.evaluated_value if isinstance(key, cst.SimpleString) else None
                if not isinstance(name, str) or not name.isidentifier():
                    step_args = f"**{code(args.value)}"
                    break
                parts.append(f"{name}={code(el.value)}")
            else:
                step_args = ", ".join(parts)
        else:
            step_args = ""
        target = code(opt.value)
        if not isinstance(opt.value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
            target = f"({target})"
        fixed = f"{target}.step({step_args})"
        if ctx.report("NM105", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))
