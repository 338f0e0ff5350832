"""NM101 / NM102: the XLA device becomes the `neuron` device; NM248: a test of the PJRT device kind; NM239: the
hardware kind of a device."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.rules.patterns import (XM, arg, code, has_star, is_device_string, positional_count, respell_device, short,
                                     spells_device_string, string_value)
from neuron_migrate.engine.context import LEFT
from neuron_migrate.engine.paths import XLA_QUERY
from neuron_migrate.rules.device_names import (CHOICE, EXPORTED, TEST, VALUE, XLA, DeviceNames, Group, Site,
                                               bound_value)
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
class _XlaInDevicePosition:
    """`search(data)`: whether the bytes hold `torch_xla`, or an "xla" string after `(` or `=` with blanks, backslash
    continuations and comments between (`torch.device(  # note\n  "xla")`).

    In linear time. One regex with comments inside a repeated group (`(?:\\s|\\\\|#[^\\n]*)*`) backtracks
    exponentially on a line of `#` after `(`, and any regex that lets a comment run to its line's end scans that
    line again from every `(` inside the comment. So: the string on the line of its `(` / `=` is one regex that scans
    blanks only; a string that starts its line is followed up through blank and comment lines to the line that
    opens it, and those walks never overlap (each stops at the line of the string before)."""

    _TORCH_XLA = re.compile(rb"torch_xla")
    _SAME_LINE = re.compile(rb"[(=][ \t\r\f\v\\]*[rRuUfFbB]{0,2}[\"']{1,3}xla\b")
    _LINE_START = re.compile(rb"^[ \t\r\f\v\\]*[rRuUfFbB]{0,2}[\"']{1,3}xla\b", re.M)
    _SKIPPED_LINE = re.compile(rb"[ \t\r\f\v\\]*(?:#|$)")  # blank, a backslash, or a comment only
    _OPENS = re.compile(rb"[(=][ \t\r\f\v\\]*(?:#|$)")  # ends with `(` / `=`, maybe a comment after

    def search(self, data: bytes) -> bool | None:
        if self._TORCH_XLA.search(data) or self._SAME_LINE.search(data):
            return True
        for m in self._LINE_START.finditer(data):
            end = m.start() - 1  # the newline before the string's line (-1: the first line)
            while end >= 0:
                start = data.rfind(b"\n", 0, end) + 1
                line = data[start:end]
                if self._OPENS.search(line):
                    return True
                if not self._SKIPPED_LINE.match(line):
                    break
                end = start - 1
        return None


XLA_IN_DEVICE_POSITION = _XlaInDevicePosition()


class XlaDeviceCall(Rule):
    codes = ("NM101",)
    triggers = (b"xla_device", b"torch_xla")
    torch_xla_names_only = True
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(XLA_DEVICE)  # every report is on a call of it

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.compared: set[cst.Call] = set()  # calls rewritten as a device-type comparison

    def visit_Comparison(self, node: cst.Comparison) -> None:
        """`p.device != xm.xla_device()` -> `p.device.type != "neuron"`: tensors are on `neuron:N`, and an
        index-less `torch.device("neuron")` equals none of them."""
        ctx = self.ctx
        equality = device_equality(node)
        if equality is None:
            return
        other, device = equality
        if not isinstance(device, cst.Call) or ctx.qualname(device.func) not in XLA_DEVICE or device.args \
                or (isinstance(other, cst.Call) and ctx.qualname(other.func) in XLA_DEVICE):
            return
        fixed = f"{code(other)}.type {code(node.comparisons[0].operator).strip()} {compared_type(ctx)}"
        self.compared.add(device)
        if ctx.report("NM101", device, call=short(device), fixed=fixed):
            by_type(ctx, other, device)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if node in self.compared:
            return
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


def device_equality(node: cst.Comparison) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(other side, device side) of `a == b` / `a != b` whose one side is a call, the other a device expression:
    a name, an attribute (`p.device`, `self.device`), a subscript or a call result that is not itself a call of
    the same kind. None for anything else."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
        return None
    left, right = node.left, node.comparisons[0].comparator
    for other, device in ((left, right), (right, left)):
        if isinstance(device, cst.Call) and isinstance(other, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) \
                and not (isinstance(other, cst.Attribute) and other.attr.value == "type") and not other.lpar:
            return other, device
    return None


def by_type(ctx, other: cst.BaseExpression, device: cst.BaseExpression) -> None:
    """Compare the device types: `other` -> `other.type`, the device -> the target's device type."""
    ctx.replace(other, lambda old: expression("_.type").with_changes(value=old))
    ctx.replace(device, expression(compared_type(ctx)))


def compared_type(ctx) -> str:
    """The device type a comparison tests for: the target's (`"neuron"`, `DEVICE.type` in the portable style). Where
    XLA is optional the test tells the neuron branch from CUDA's and the CPU's, and `DEVICE.type` would be `"cuda"`
    or `"cpu"` on those machines and send them down the neuron branch: there it is `"neuron"` in either style."""
    if portable(ctx) and ctx.facts.paths.xla_optional:
        return ctx.string("neuron")
    return target(ctx).device_type()


def _in_test(ctx, literal: cst.BaseExpression) -> bool:
    """`literal` is compared (`x.type == "xla"`, `in ("xla", "cuda")`, `.startswith("xla")`), not given."""
    parents = ctx.analysis.parents
    node = parents.get(literal)
    for _ in range(4):
        if isinstance(node, (cst.Comparison, cst.ComparisonTarget)):
            return True
        if isinstance(node, cst.Call):
            return isinstance(node.func, cst.Attribute) and node.func.attr.value in ("startswith", "endswith")
        if not isinstance(node, (cst.Element, cst.Tuple, cst.List, cst.Set, cst.Arg)):
            return False
        node = parents.get(node)
    return False


class XlaDeviceString(Rule):
    """NM102: `"xla"` as a device. Device positions are respelled literal by literal; device names held as data
    are respelled group by group (`device_names.py`), or kept whole with one NM117 marker.

    Strong positions (`torch.device("xla")`, `.to("xla")`, `device="xla"` given to torch or a library,
    `torch.autocast("xla")`) are respelled everywhere. Weak ones (comparisons with a tensor's device type,
    `device_type="xla"` tags) and device names held as data only in files of the XLA program: multi-backend code
    (PyTorch itself, libraries with a CPU/GPU/XLA switch) compares device types without being an XLA program; there
    a respelled `"xla"` would send the neuron device down an XLA-only path. A file counts as part of the XLA
    program when it imports torch_xla at module level, asks for the XLA device, or uses a strong position.

    A group of device names (see `DeviceNames`) is respelled whole: every default, option choice, environment
    default, configuration value, comparison and `case` that reaches the same value, or none of them. A group whose
    value comes from outside the file (the command line, the environment, a configuration file, a public
    function's parameter) and is compared is kept as it is, with one NM117 marker where the value is defined: the
    users' `--device xla`, `DEVICE=xla` and callers must keep selecting the branch they selected, and that branch
    (`xm.xla_device()`) is itself migrated to the `neuron` device, so the old name now selects Neuron. Respelling
    the comparisons instead would silently send those users down the fallback branch (the CPU, usually).
    """

    codes = ("NM102", "NM117")
    triggers = (b"xla",)
    pattern = XLA_IN_DEVICE_POSITION
    is_device = staticmethod(is_device_string)  # which literals name the device this rule respells
    rule_code = "NM102"
    family = XLA
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """Every report rests on an XLA device literal: one in a device position, or a site of a group of device
        names whose family is XLA (the group's NM117 is reported only where the file holds such a site)."""
        return spells_device_string(scan.strings)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.weak: list[tuple[object, cst.BaseExpression, str]] = []
        self.xla_program = False
        self.names = DeviceNames(ctx)
        self.compared: set[cst.CSTNode] = set()  # literals rewritten as a device-type comparison

    # -- how this rule respells one literal ------------------------------------------------------------------
    def _new(self, literal: cst.BaseExpression, kind: str, test: bool | None = None) -> cst.BaseExpression:
        ctx = self.ctx
        if not portable(ctx):
            return respell_device(literal)
        if (_in_test(ctx, literal) if test is None else test) and ctx.facts.paths.xla_optional:
            return respell_device(literal)  # see compared_type: a test tells the neuron branch from the others
        return _portable(ctx, literal, kind)

    def _allowed(self) -> bool:
        """Whether weak positions and held device names may be respelled in this file."""
        return self.xla_program or _imports_torch_xla_at_module_level(self.ctx)

    def _flag(self, literal: cst.BaseExpression, kind: str, autocast: cst.Call | None = None) -> None:
        ctx = self.ctx
        new = self._new(literal, kind)
        dtype = self._autocast_dtype(autocast) if autocast is not None else None
        fixed = code(new) + (f" with `{dtype}` (XLA autocast's default)" if dtype else "")
        if ctx.report(self.rule_code, literal, text=code(literal), fixed=fixed):
            ctx.replace(literal, new)
            if dtype:
                ctx.replace(autocast, lambda call, dtype=dtype: _with_dtype(call, dtype))

    def _autocast_dtype(self, call: cst.Call) -> str | None:
        """`torch.autocast("xla")` ran in bfloat16 (XLA's autocast default); the native default follows CUDA's
        (float16): the dtype the original ran with is written out, where the call does not name one."""
        if has_star(call) or arg(call, 1, "dtype") is not None or self.rule_code != "NM102":
            return None
        return f"dtype={self.ctx.module_ref('torch')}.bfloat16"

    def _strong(self, literal: cst.BaseExpression, kind: str = DEVICE, autocast: cst.Call | None = None) -> None:
        self.xla_program = True
        if literal not in self.compared:
            self._flag(literal, kind, autocast)

    def _weak(self, literal: cst.BaseExpression, kind: str = TYPE) -> None:
        self.weak.append((self.ctx.current, literal, kind))

    # -- visits -----------------------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        self.names.call(node, qual)
        func = node.func
        # `Config(device="xla")`: a value the file holds, or one it passes to another module of the project
        local = self.names.local_callable(func) is not None or self.names.project_target(func, qual) is not None
        for a in node.args:
            if a.keyword is not None and a.keyword.value in DEVICE_KEYWORDS and self.is_device(a.value) and not local:
                kind = TYPE if a.keyword.value == "device_type" else DEVICE
                # `device_type="xla"` outside autocast is mostly a tag (test decorators, skip lists): weak
                if a.keyword.value == "device" or _is_autocast(qual):
                    self._strong(a.value, kind, node if a.keyword.value == "device_type" and _is_autocast(qual)
                                 else None)
                else:
                    self._weak(a.value, kind)
        if qual in XLA_DEVICE:
            self.xla_program = True
        first = arg(node, 0, None)
        if first is None or not self.is_device(first.value):
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            self._strong(first.value, DEVICE)
        elif qual in DEVICE_FIRST_ARG:
            self._strong(first.value, TYPE, node if _is_autocast(qual) else None)
        elif isinstance(func, cst.Attribute) and func.attr.value == "startswith" and _is_device_type_expr(func.value) \
                and not self.names.holders(func.value):
            self._weak(first.value)  # `str(x.device).startswith("xla")` (a held name's test is a group's)

    def visit_Comparison(self, node: cst.Comparison) -> None:
        if self._device_equality(node):
            return
        operands = [node.left, *(t.comparator for t in node.comparisons)]
        taken = set()
        for i, t in enumerate(node.comparisons):
            if self.names.compare(operands[i], t.operator, operands[i + 1]):
                taken.update((operands[i], operands[i + 1]))
        if not any(_is_device_type_expr(o) for o in operands if o not in taken):
            return
        for o in operands:
            if o in taken:
                continue
            if self.is_device(o):
                self._weak(o)
            elif isinstance(o, (cst.Tuple, cst.List, cst.Set)):
                for el in o.elements:
                    if self.is_device(el.value):
                        self._weak(el.value)

    def _device_equality(self, node: cst.Comparison) -> bool:
        """`t.device == torch.device("xla")` -> `t.device.type == "neuron"` (an index-less device equals no
        tensor's device, which has an index)."""
        ctx = self.ctx
        equality = device_equality(node)
        if equality is None:
            return False
        other, device = equality
        first = arg(device, 0, "type")
        if ctx.qualname(device.func) != "torch.device" or len(device.args) != 1 or first is None \
                or not self.is_device(first.value) or ":" in (string_value(first.value) or ":"):
            return False
        self.xla_program = True
        self.compared.add(first.value)
        fixed = f"{code(other)}.type {code(node.comparisons[0].operator).strip()} {compared_type(ctx)}"
        if ctx.report(self.rule_code, first.value, text=code(device), fixed=fixed):
            by_type(ctx, other, device)
        return True

    def visit_Assign(self, node: cst.Assign) -> None:
        self.names.assign([t.target for t in node.targets], node.value, self._class())

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.names.assign([node.target], node.value, self._class())

    def visit_Param(self, node: cst.Param) -> None:
        self.names.param(node)

    def visit_Match(self, node: cst.Match) -> None:
        self.names.match(node)

    def visit_Dict(self, node: cst.Dict) -> None:
        self.names.dict_literal(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self.names.subscript(node)

    def _class(self) -> cst.ClassDef | None:
        scope = self.ctx.scope
        return scope.node if scope.kind == "class" else None

    # -- decisions that need the whole file -------------------------------------------------------------------
    def finish(self) -> None:
        ctx = self.ctx
        allowed = self._allowed()
        if allowed:
            for occ, literal, kind in self.weak:
                ctx.current = occ
                self._flag(literal, kind)
        for group in self.names.groups():
            mine = [s for s in group.sites if s.family == self.family]
            if mine and group.device and allowed and self._owns(group):
                self._decide(group, mine)
        ctx.current = None

    def _owns(self, group: Group) -> bool:
        return True  # every group with an `"xla"` site; NM321 leaves those to this rule

    def _decide(self, group: Group, mine: list[Site]) -> None:
        ctx = self.ctx
        if group.open and (group.tested or group.exported):
            self._keep(group, mine)
            return
        strings = group.tested or any(s.role == CHOICE for s in group.sites)
        planned = []
        for site in mine:
            kind = TYPE if strings or site.role != VALUE else _kind_of_holder(site.holder)
            new = self._new(site.node, kind, site.role == TEST)
            if site.in_pattern and not isinstance(new, (cst.SimpleString, cst.Attribute)):
                self._keep(group, mine, PATTERN)  # a `case` value must stay a literal or a dotted name
                return
            planned.append((site, new))
        fixed = []
        for site, new in planned:
            ctx.current = site.occ
            if ctx.report(self.rule_code, site.node, statement=_statement_of(ctx, site.node), text=code(site.node),
                          fixed=code(new)):
                fixed.append((ctx.decisions[-1], site, new))
        if len(fixed) == len(planned):
            for _, site, new in fixed:
                ctx.replace(site.node, new)
        else:  # one site may not change (suppressed, disabled, another path): none of them does
            for decision, _, _ in fixed:
                decision.status, decision.fixable = LEFT, False

    def _keep(self, group: Group, mine: list[Site], why: str | None = None) -> None:
        """One NM117 marker where the group's value is defined: where it enters from outside, else its first site."""
        ctx = self.ctx
        if group.sources:
            occ, source, _ = min(group.sources, key=lambda source: _nearest(source, mine))
            why = why or f"comes from {source}"
            node = occ.node
        else:
            first = min(mine, key=lambda s: (s.role != VALUE, self._order(s)))
            occ, node = first.occ, first.node
        ctx.current = occ
        tests = sorted({_where(s.occ) for s in group.sites if s.role == TEST})
        if group.exported:
            tests += sorted({f"`{h[1]}`" for h in group.holders if h[0] == EXPORTED})
        ctx.report("NM117", node, text=code(mine[0].node), why=why, where=", ".join(tests))

    def _order(self, site: Site) -> int:
        return self.names.order(site)


def _imports_torch_xla_at_module_level(ctx) -> bool:
    scope = ctx.analysis.module_scope
    return any(b.kind == "import" and b.qualname and b.qualname.split(".")[0] == "torch_xla"
               for bindings in scope.bindings.values() for b in bindings)


def _kind_of_name(target: cst.BaseExpression) -> str:
    name = target.value if isinstance(target, cst.Name) else getattr(getattr(target, "attr", None), "value", "")
    return TYPE if name.lower().endswith("type") else DEVICE


PATTERN = "is matched by a `case` pattern, which cannot spell the device type of --device-style accelerator with an index"


def _kind_of_holder(holder: tuple) -> str:
    """A name or attribute holds what its name says (a device, or a device type); an environment value or a
    configuration entry is text."""
    if holder[0] in ("env", "key"):
        return TYPE
    return TYPE if str(holder[-1]).lower().endswith("type") else DEVICE


def _nearest(source: tuple, mine: list[Site]) -> tuple[bool, bool]:
    """Sources first whose holder this rule's literal defines (`device="xla"`), then those in a function that
    compares the value; else file order (`min` keeps the first of equals)."""
    occ, _, holder = source
    defined = any(s.holder == holder and s.role == VALUE for s in mine)
    compared_here = any(s.role == TEST and s.occ.scope is occ.scope for s in mine)
    return not defined, not compared_here


def _where(occ) -> str:
    """Where a comparison sits, for a message: `get_device()`, `Trainer.setup()` or `module level`."""
    names = []
    scope = occ.scope
    while scope is not None and scope.kind != "module":
        name = getattr(scope.node, "name", None)
        names.append(name.value if isinstance(name, cst.Name) else "<lambda>")
        scope = scope.parent
    return ".".join(reversed(names)) + "()" if names else "module level"


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


def _with_dtype(call: cst.Call, dtype: str) -> cst.Call:
    """The call with `dtype=...` added after its last argument, laid out like the arguments before it."""
    args = list(call.args)
    last = args[-1].comma
    if isinstance(last, cst.Comma):  # one argument a line: the new one on its own line, the same layout
        # copies: a node the tree holds twice would be mistaken for one place by the engine's maps
        separator = args[-2].comma.deep_clone() if len(args) > 1 \
            else cst.Comma(whitespace_after=call.whitespace_before_args.deep_clone())
    else:
        separator, last = cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")), cst.MaybeSentinel.DEFAULT
    args[-1] = args[-1].with_changes(comma=separator)
    keyword, value = dtype.split("=", 1)
    args.append(cst.Arg(keyword=cst.Name(keyword), value=expression(value), comma=last,
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace(""))))
    return call.with_changes(args=args)


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


def _statement_of(ctx, node: cst.CSTNode) -> cst.CSTNode | None:
    """The statement that holds `node` (a literal of a group may sit far from the use being visited)."""
    parents = ctx.analysis.parents
    while node is not None and not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        node = parents.get(node)
    return node


XLA_DEVICE_TYPE = frozenset({"torch_xla.runtime.device_type", "torch_xla._internal.pjrt.device_type"})
# The PJRT device kinds `xr.device_type()` answers with, and the native device type each is on.
NATIVE_TYPES = {"NEURON": "neuron", "CPU": "cpu", "CUDA": "cuda", "GPU": "cuda"}


class XlaDeviceType(Rule):
    """NM248: `xr.device_type() == "NEURON"` asks which PJRT device the program runs on; after the move it runs on
    the native device, so the call becomes that device's type and the name its native spelling."""

    codes = ("NM248",)
    triggers = (b"device_type",)
    torch_xla_names_only = True  # `XLA_DEVICE_TYPE`

    def visit_Comparison(self, node: cst.Comparison) -> None:
        ctx = self.ctx
        if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
            return
        left, right = node.left, node.comparisons[0].comparator
        call, name = (left, right) if isinstance(left, cst.Call) else (right, left)
        if not (isinstance(call, cst.Call) and not call.args and ctx.qualname(call.func) in XLA_DEVICE_TYPE):
            return
        value = string_value(name)
        if value not in NATIVE_TYPES:
            return  # TPU, or a name computed at run time: NM199
        native = ctx.string(NATIVE_TYPES[value])
        operator = "==" if isinstance(node.comparisons[0].operator, cst.Equal) else "!="
        if portable(ctx):
            fixed = f"<device>.type {operator} {native}"
        else:  # a constant: the edits keep the arm it picks (edits.collapse_dead_arms)
            fixed = str((NATIVE_TYPES[value] == "neuron") == (operator == "=="))
        if ctx.report("NM248", call, call=short(node), fixed=fixed):
            ctx.replace(call, expression(target(ctx).device_type()))
            ctx.replace(name, expression(native))


XLA_DEVICE_HW = frozenset({f"{XM}.xla_device_hw"})


class XlaDeviceHardware(Rule):
    """NM239: `xm.xla_device_hw(device)` answers with the hardware kind of an XLA device ("NEURON", "TPU", "CPU",
    "CUDA"); after the move the device is a native one, whose type, upper-cased, is that kind."""

    codes = ("NM239",)
    triggers = (b"xla_device_hw",)
    torch_xla_names_only = True  # `XLA_DEVICE_HW`
    acts_on = XLA_QUERY  # `if xm.xla_device_hw(device) == "TPU":` runs on every path: the test is rewritten too

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        if ctx.qualname(node.func) not in XLA_DEVICE_HW or has_star(node) or len(node.args) != 1:
            return
        device = node.args[0]
        if device.keyword is not None and device.keyword.value != "device":
            return
        # a name bound once to the XLA device holds a torch.device after the move: its type is read directly
        bound = bound_value(ctx, device.value)
        native = isinstance(bound, cst.Call) and ctx.qualname(bound.func) in XLA_DEVICE
        fixed = f"{code(device.value)}.type.upper()" if native else \
            f"{ctx.module_ref('torch')}.device({code(device.value)}).type.upper()"
        if ctx.report("NM239", node, call=short(node), fixed=fixed):
            ctx.replace(node, expression(fixed))
