"""NM101 / NM102: the XLA device becomes the `neuron` device."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.rules.patterns import (XM, arg, code, is_device_string, positional_count, respell_device, short,
                                     string_value)
from neuron_migrate.rules.target import portable, target
from neuron_migrate.rules import Rule
from neuron_migrate.syntax.parse import expression

XLA_DEVICE = frozenset({f"{XM}.xla_device", "torch_xla.device", "torch_xla.torch_xla.device"})
# Calls whose first positional argument is a device (or device type).
DEVICE_FIRST_ARG = frozenset({"torch.device", "torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"})
DEVICE_KEYWORDS = frozenset({"device", "device_type"})
DEVICE, TYPE = "device", "type"  # what a position expects: a device, or a device type string
DEVICE_NAME = re.compile(r"(^|_)device(_type)?$|^dev$", re.I)
# What a file needs before "xla" can be a device here: torch_xla (an import, `xm.xla_device()`), or the literal
# where an argument or a value starts, after `(` or `=` (`.to("xla")`, `torch.device('xla:0')`, `device="xla"`,
# `dev = f"xla:{i}"`, `x.device.type == "xla"`), with blanks, comments and line continuations between.
# `choices=("cpu", "cuda", "xla")` alone has no device position.
XLA_IN_DEVICE_POSITION = re.compile(rb"torch_xla|[(=](?:\s|\\|#[^\n]*)*[rRuUfFbB]{0,2}[\"']{1,3}xla\b")


class XlaDeviceCall(Rule):
    codes = ("NM101",)
    triggers = (b"xla_device", b"torch_xla")

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual not in XLA_DEVICE:
            return
        index = arg(node, 0, "n") or arg(node, 0, "index")
        extra = [a for a in node.args if a is not index]
        if extra or positional_count(node) > 1:
            return  # devkind= and friends: left to NM199
        new = target(ctx).device(code(index.value) if index else None)
        if ctx.report("NM101", node, call=short(node), fixed=new):
            ctx.replace(node, expression(new))


class XlaDeviceString(Rule):
    """Strong device positions are respelled everywhere; weak ones only in files of the XLA program.

    Strong: `torch.device("xla")`, `.to("xla")`, `device="xla"`, `torch.autocast("xla")`. Weak: comparisons
    with `<x>.device.type` and device-named variables or parameters. Multi-backend code (PyTorch itself,
    libraries with a CPU/GPU/XLA switch) compares device types without being an XLA program; there a
    respelled `"xla"` would send the neuron device down an XLA-only path. A file counts as part of the
    XLA program when it imports torch_xla at module level, asks for the XLA device, or uses a strong position.
    """

    codes = ("NM102",)
    triggers = (b"xla",)
    pattern = XLA_IN_DEVICE_POSITION
    is_device = staticmethod(is_device_string)  # which literals name the device this rule respells

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.weak: list[tuple[object, cst.BaseExpression]] = []
        self.xla_program = False

    def _flag(self, literal: cst.BaseExpression, kind: str) -> None:
        ctx = self.ctx
        if portable(ctx):
            new = _portable(ctx, literal, kind)
            if ctx.report("NM102", literal, text=code(literal), fixed=code(new)):
                ctx.replace(literal, new)
        elif ctx.report("NM102", literal, text=code(literal), fixed=code(respell_device(literal))):
            ctx.replace(literal, respell_device)

    def _strong(self, literal: cst.BaseExpression, kind: str = DEVICE) -> None:
        self.xla_program = True
        self._flag(literal, kind)

    def _weak(self, literal: cst.BaseExpression, kind: str = TYPE) -> None:
        self.weak.append((self.ctx.current, literal, kind))

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.ctx.qualname(node.func)
        for a in node.args:
            if a.keyword is not None and a.keyword.value in DEVICE_KEYWORDS and self.is_device(a.value):
                kind = TYPE if a.keyword.value == "device_type" else DEVICE
                # `device_type="xla"` outside autocast is mostly a tag (test decorators, skip lists): weak
                if a.keyword.value == "device" or _is_autocast(qual):
                    self._strong(a.value, kind)
                else:
                    self._weak(a.value, kind)
        if qual in XLA_DEVICE:
            self.xla_program = True
        first = arg(node, 0, None)
        if first is None or not self.is_device(first.value):
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            self._strong(first.value, DEVICE)
        elif qual in DEVICE_FIRST_ARG:
            self._strong(first.value, TYPE)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        operands = [node.left, *(t.comparator for t in node.comparisons)]
        if not any(_is_device_type_expr(o) for o in operands):
            return
        for o in operands:
            if self.is_device(o):
                self._weak(o)
            elif isinstance(o, (cst.Tuple, cst.List, cst.Set)):
                for el in o.elements:
                    if self.is_device(el.value):
                        self._weak(el.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        if self.is_device(node.value) and any(_is_device_name(t.target) for t in node.targets):
            self._weak(node.value, _kind_of_name(node.targets[0].target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None and self.is_device(node.value) and _is_device_name(node.target):
            self._weak(node.value, _kind_of_name(node.target))

    def visit_Param(self, node: cst.Param) -> None:
        if node.default is not None and self.is_device(node.default) and DEVICE_NAME.search(node.name.value):
            self._weak(node.default, _kind_of_name(node.name))

    def finish(self) -> None:
        ctx = self.ctx
        if not self.weak or not (self.xla_program or _imports_torch_xla_at_module_level(ctx)):
            return
        for occ, literal, kind in self.weak:
            ctx.current = occ
            self._flag(literal, kind)
        ctx.current = None


def _imports_torch_xla_at_module_level(ctx) -> bool:
    scope = ctx.analysis.module_scope
    return any(b.kind == "import" and b.qualname and b.qualname.split(".")[0] == "torch_xla"
               for bindings in scope.bindings.values() for b in bindings)


def _kind_of_name(target: cst.BaseExpression) -> str:
    name = target.value if isinstance(target, cst.Name) else getattr(getattr(target, "attr", None), "value", "")
    return TYPE if name.lower().endswith("type") else DEVICE


def _portable(ctx, literal: cst.BaseExpression, kind: str) -> cst.BaseExpression:
    """`"xla"` -> `DEVICE` / `DEVICE.type`; `"xla:0"` -> `f"{DEVICE.type}:0"`; `f"xla:{i}"` -> `f"{DEVICE.type}:{i}"`."""
    device_type = target(ctx).device_type()
    if string_value(literal) == "xla":
        return expression(target(ctx).module_device() if kind == DEVICE else device_type)
    if isinstance(literal, cst.SimpleString):
        rest = literal.evaluated_value[3:].replace("{", "{{").replace("}", "}}")
        return expression(f"f{literal.quote}{{{device_type}}}{rest}{literal.quote}")
    first = literal.parts[0]
    head = [cst.FormattedStringExpression(expression(device_type))]
    if first.value[3:]:
        head.append(first.with_changes(value=first.value[3:]))
    return literal.with_changes(parts=[*head, *literal.parts[1:]])


def _is_autocast(qual: str | None) -> bool:
    return qual is not None and qual.startswith("torch.") and ("autocast" in qual or qual.startswith("torch.amp."))


def _is_device_name(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Name):
        return bool(DEVICE_NAME.search(target.value))
    if isinstance(target, cst.Attribute):
        return bool(DEVICE_NAME.search(target.attr.value))
    return False


def _is_device_type_expr(expr: cst.BaseExpression) -> bool:
    """`x.device.type`, `device.type`, `str(x.device)`, `str(device)`, or a name that holds a device."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "type":
        return True
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "str" and expr.args:
        inner = expr.args[0].value
        return _is_device_name(inner) or (isinstance(inner, cst.Attribute) and inner.attr.value == "device")
    return _is_device_name(expr)
