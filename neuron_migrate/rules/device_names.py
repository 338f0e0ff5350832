"""Device names as data: which device-name literals of a file reach the same value, so that they change together.

A device name is often data, not a device position: a default (`device: str = "xla"`, `def f(device="xla")`), a
command-line option (`add_argument("--device", choices=[...], default="xla")`), an environment value
(`os.environ.get("DEVICE", "xla")`), a configuration entry (`{"device": "xla"}`), then compared
(`if name == "xla":`, `name in ("xla", "cuda")`, `case "xla":`, `name.startswith("xla")`). Respelling one of these
literals and not the others sends the program down another branch (usually the CPU fallback) without a word.

The view joins *holders* (a variable or parameter, an attribute or dataclass field, a configuration key, an
environment variable, an option's destination) that one value flows between: assignments, calls of the file's own
functions and classes, `x or "xla"`, `x.lower()`. `str(x)` is not followed: `"xla" in str(device)` holds for a
device object as well as for its name, so those tests stay NM102's weak positions. The literals that reach a group's holders are its
*sites*: `value` sites define the value, `test` sites compare it. The device rules (NM102 for `"xla"`, NM321 for
`"cuda"`) then decide per group, never per literal (see `XlaDeviceString.finish`).

A group is *open* when its value can come from outside the file: the command line, the environment, a
configuration file the file loads, or a parameter or field of a public function or class of a library module
(anyone may call it with the old name). Holders are told apart by name only where the file cannot say more (every
`x.device` attribute is one holder): a coarser group is only ever kept whole more often.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from neuron_migrate.engine.names import Occurrence, Scope, dotted, dotted_str
from neuron_migrate.rules.patterns import INIT_PROCESS_GROUP, arg, is_device_string, string_value

XLA, CUDA, NEURON = "xla", "cuda", "neuron"  # NEURON: a name already migrated (a second run sees it)
CUDA_NAME = re.compile(r"^cuda(:\d+)?$")
NEURON_NAME = re.compile(r"^neuron(:\d+)?$")
# names of holders that hold a device name: `device`, `eval_device`, `device_type`, `device_name`, `DEVICE_KIND`, `dev`
DEVICE_NAME = re.compile(r"(^|_)device(_?(type|name|kind|str|string|spec))?$|^dev$", re.I)
VALUE, TEST, CHOICE = "value", "test", "choice"  # CHOICE: an option's `choices=` entry
ENV_READS = frozenset({"os.environ.get", "os.getenv", "os.environ.setdefault", "os.environ.pop"})
CONFIG_LOADERS = frozenset({"json.load", "json.loads", "yaml.load", "yaml.safe_load", "yaml.full_load",
                            "tomllib.load", "tomllib.loads", "toml.load", "toml.loads", "omegaconf.OmegaConf.load",
                            "omegaconf.OmegaConf.create", "configparser.ConfigParser"})
# str methods that keep a device name a device name (`args.device.lower() == "xla"`)
SAME_VALUE_METHODS = frozenset({"lower", "strip", "casefold", "rstrip", "lstrip"})
EQUALITY = (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)
EXPORTED = "exported"  # the holder of an argument passed to another module of the project
ARGV = ("argv",)  # the holder of `sys.argv[...]`: the program's positional arguments


def family(node: cst.CSTNode | None) -> str | None:
    """Which device a literal names: "xla" (`"xla"`, `"xla:0"`, `f"xla:{i}"`), "cuda" (`"cuda"`, `"cuda:1"`),
    "neuron" (`"neuron"`, `"neuron:0"`), or None."""
    if is_device_string(node):
        return XLA
    value = string_value(node)
    if value is not None and CUDA_NAME.match(value):
        return CUDA
    if value is not None and NEURON_NAME.match(value):
        return NEURON  # no rule respells it; a `"cuda"` beside it is the GPU branch of a migrated switch
    return None


def is_tensor_device_expr(expr: cst.BaseExpression) -> bool:
    """`x.device.type`, `device.type`, `str(x.device)`, `str(device)`: what a device object says of itself (a
    name held as data is compared as it is)."""
    if type(expr) is cst.Attribute and expr.attr.value == "type":
        return True
    return type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "str" \
        and len(expr.args) == 1


@dataclass(eq=False)
class Site:
    node: cst.BaseExpression
    occ: Occurrence
    holder: tuple
    role: str  # VALUE (defines the value) or TEST (compares it)
    family: str
    in_pattern: bool = False  # a `case` value: it must stay a literal or a dotted name


@dataclass(eq=False)
class Group:
    holders: list[tuple] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    device: bool = False  # a holder is named for a device, or the value reaches a device position
    # where the value enters from outside: (occurrence, what it is, its holder), in file order
    sources: list[tuple[Occurrence, str, tuple]] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return bool(self.sources)

    @property
    def tested(self) -> bool:
        return any(s.role == TEST for s in self.sites)

    @property
    def exported(self) -> bool:
        """The value is passed to another module of the project, which compares it on its own terms."""
        return any(h[0] == EXPORTED for h in self.holders)

    def families(self) -> set[str]:
        return {s.family for s in self.sites}


class DeviceNames:
    """The value flow of device names in one file, fed by a rule's visits, read once every node was visited."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._parent: dict[tuple, tuple] = {}
        self._sites: dict[cst.CSTNode, Site] = {}
        self._device_used: set[tuple] = set()
        self._sources: dict[tuple, tuple[Occurrence, str, tuple]] = {}
        self._scopes: dict[int, Scope] | None = None
        self._config_loaded = False
        self._config_reads: list[tuple[tuple, Occurrence]] = []
        project = ctx.settings.project
        # a script's device names are its own, unless another module of the project imports it (engine/project.py):
        # then its callers pass them as data too
        self.script = "__main__" in ctx.source.text and (project is None or project.imported_by is None)
        self.project_modules = project.modules if project is not None else ()

    # -- union-find over holders -------------------------------------------------------------------------
    def _find(self, key: tuple) -> tuple:
        parent = self._parent.setdefault(key, key)
        while parent != key:
            grand = self._parent[parent]
            self._parent[key] = grand
            key, parent = parent, grand
        return key

    def _union(self, a: tuple, b: tuple) -> None:
        ra, rb = self._find(a), self._find(b)
        if ra != rb:
            self._parent[rb] = ra

    def _site(self, node: cst.BaseExpression, holder: tuple, role: str, in_pattern: bool = False) -> None:
        fam = family(node)
        if fam is None or node in self._sites:
            return
        self._find(holder)
        self._sites[node] = Site(node, self.ctx.current, holder, role, fam, in_pattern)

    def order(self, site: Site) -> int:
        """The site's place in the file: sites are found in file order, but for option choices and defaults."""
        return list(self._sites).index(site.node)

    def _source(self, holder: tuple, where: str) -> None:
        self._find(holder)
        self._sources.setdefault(holder, (self.ctx.current, where, holder))

    # -- holders -------------------------------------------------------------------------------------------
    def holders(self, expr: cst.BaseExpression | None) -> list[tuple]:
        """The holders whose value `expr` reads (empty when it is not a held device name)."""
        ctx = self.ctx
        if expr is None or is_tensor_device_expr(expr):
            return []
        if type(expr) is cst.Name:
            owner = ctx.analysis.lookup(expr.value, ctx.scope)
            if owner is None or any(b.kind in ("import", "def", "class") for b in owner.bindings[expr.value]):
                return []
            return [("name", id(owner), expr.value)]
        if isinstance(expr, cst.Attribute):
            return [] if ctx.qualname(expr) is not None else [("attr", expr.attr.value)]
        if isinstance(expr, cst.Subscript):
            if ctx.qualname(expr.value) == "sys.argv":  # `sys.argv[1]`: a positional command-line argument
                self._source(ARGV, f"the command line (`{_argv_text(expr)}`)")
                return [ARGV]
            key = _subscript_key(expr)
            if key is None:
                return []
            if ctx.qualname(expr.value) == "os.environ":
                self._source(("env", key), f"the environment variable `{key}`")
                return [("env", key)]
            return [self._config_key(key)]
        if isinstance(expr, cst.Call):
            qual = ctx.qualname(expr.func)
            first = arg(expr, 0, None)
            name = string_value(first.value) if first is not None else None
            if qual in ENV_READS:
                return [("env", name)] if name is not None else []
            func = expr.func
            if isinstance(func, cst.Attribute) and qual is None:
                if func.attr.value == "get" and name is not None:
                    return [self._config_key(name)]
                if func.attr.value in SAME_VALUE_METHODS and not expr.args:
                    return self.holders(func.value)
            return []  # `str(x)` too: `"xla" in str(device)` holds for a device object as for its name
        if isinstance(expr, cst.IfExp):
            return self.holders(expr.body) + self.holders(expr.orelse)
        if isinstance(expr, cst.BooleanOperation):
            return self.holders(expr.left) + self.holders(expr.right)
        return []

    def _config_key(self, key: str) -> tuple:
        holder = ("key", key)
        self._config_reads.append((holder, self.ctx.current))
        return holder

    def target_holder(self, target: cst.BaseExpression) -> tuple | None:
        """The holder an assignment target writes (a name, an attribute, a configuration key, an environment value)."""
        ctx = self.ctx
        if isinstance(target, cst.Name):
            if ctx.scope.kind == "class":
                return ("attr", target.value)  # a class attribute or dataclass field: read as `obj.<name>`
            owner = ctx.analysis.lookup(target.value, ctx.scope)
            return ("name", id(owner), target.value) if owner is not None else None
        found = self.holders(target)
        return found[0] if len(found) == 1 else None

    # -- what the rule feeds in ------------------------------------------------------------------------------
    def flow(self, holder: tuple, value: cst.BaseExpression) -> None:
        """`holder = value`: the value's literals define the holder, the holders it reads join it."""
        for literal in _literals(value):
            self._site(literal, holder, VALUE)
        for other in self.holders(value):
            self._union(holder, other)

    def assign(self, targets: list[cst.BaseExpression], value: cst.BaseExpression | None, class_field=None) -> None:
        if value is None:
            return
        for target in targets:
            holder = self.target_holder(target)
            if holder is None:
                continue
            self.flow(holder, value)
            if class_field is not None and holder[0] == "attr" and self._public_class(class_field):
                self._source(holder, f"the field `{holder[1]}` of the public class `{class_field.name.value}`")

    def param(self, node: cst.Param) -> None:
        scope = self.ctx.scope
        holder = ("name", id(scope), node.name.value)
        if node.default is not None:
            self.flow(holder, node.default)
        function = scope.node
        if isinstance(function, cst.FunctionDef) and self._public_function(scope):
            owner = scope.parent.node.name.value + "." if scope.parent.kind == "class" else ""
            self._source(holder, f"the parameter `{node.name.value}` of the public function `{owner}{function.name.value}`")

    def call(self, node: cst.Call, qual: str | None) -> None:
        """Options, environment reads, configuration loads, calls of the file's own functions, device uses."""
        func = node.func
        if qual in CONFIG_LOADERS:
            self._config_loaded = True
        if qual in ENV_READS:
            first = arg(node, 0, "key")
            name = string_value(first.value) if first is not None else None
            if name is not None:
                holder = ("env", name)
                self._source(holder, f"the environment variable `{name}`")
                default = arg(node, 1, "default")
                if default is not None:
                    self.flow(holder, default.value)
            return
        if isinstance(func, cst.Attribute) and qual is None and func.attr.value in ("add_argument", "set_defaults"):
            self._option(node, func.attr.value)
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "get" and qual is None:
            key = arg(node, 0, None)
            name = string_value(key.value) if key is not None else None
            default = arg(node, 1, None)
            if name is not None and default is not None:
                self.flow(self._config_key(name), default.value)
            elif key is not None:
                self._lookup(func.value, key.value)  # `TABLE.get(device)`
            return
        if isinstance(func, cst.Attribute) and func.attr.value == "startswith" and node.args:
            for holder in self.holders(func.value):
                for literal in self.choices(node.args[0].value):
                    self._site(literal, holder, TEST)
            return
        if isinstance(func, cst.Name) and func.value == "dict" and qual is None:
            for a in node.args:
                if a.keyword is not None:
                    self.flow(("key", a.keyword.value), a.value)
            return
        local = self.local_callable(func)
        if local is not None:
            self._call_local(node, local)
            return
        exported = self.project_target(func, qual)
        if exported is not None:
            qual = exported
            # a function or class of another module of the project (engine/project.py) reads what it is passed
            # there, and decides there whether its comparisons change: a device name passed to it is kept as it
            # is, with the marker, in a group that is not respelled (see `Group.exported`)
            for index, a in enumerate(node.args):
                if a.star:
                    continue
                holder = (EXPORTED, qual, a.keyword.value if a.keyword is not None else str(index))
                self._source(holder, f"the call of `{qual}` (another module of the project reads it)")
                self.flow(holder, a.value)
            return
        # where the value is used as a device: it must be a device name the running torch knows
        for a in node.args:
            if a.keyword is not None and a.keyword.value in ("device", "device_type"):
                self._device_use(a.value)
        first = arg(node, 0, None)
        if first is not None and ((isinstance(func, cst.Attribute) and func.attr.value == "to")
                                  or qual in ("torch.device", "torch.autocast", "torch.amp.autocast")):
            self._device_use(first.value)
        backend = arg(node, 0, "backend") if qual in INIT_PROCESS_GROUP else None
        if backend is not None:  # `BACKEND = "xla"`: its value changes with the device's (NM201 reads it there)
            self._device_use(backend.value)

    def _device_use(self, value: cst.BaseExpression) -> None:
        for holder in self.holders(value):
            self._find(holder)
            self._device_used.add(holder)

    def _option(self, node: cst.Call, method: str) -> None:
        if method == "set_defaults":
            for a in node.args:
                if a.keyword is not None:
                    self.flow(("attr", a.keyword.value), a.value)
            return
        dest = _option_dest(node)
        if dest is None:
            return
        holder = ("attr", dest)
        flags = [string_value(a.value) for a in node.args if a.keyword is None and string_value(a.value)]
        self._source(holder, f"the command line (`{flags[0] if flags else dest}`)")
        default, choices = arg(node, None, "default"), arg(node, None, "choices")
        if default is not None:
            self.flow(holder, default.value)
        if choices is not None:
            for literal in self.choices(choices.value):
                self._site(literal, holder, CHOICE)

    def compare(self, left: cst.BaseExpression, op: cst.BaseCompOp, right: cst.BaseExpression) -> bool:
        """`holder == "xla"`, `"xla" != holder`, `holder in ("xla", "cuda")`: test sites. True when it was one."""
        if not isinstance(op, EQUALITY):
            return False
        for held, other in ((left, right), (right, left)):
            holders = self.holders(held)
            literals = self.choices(other) if isinstance(op, (cst.In, cst.NotIn)) and held is left else (
                [other] if family(other) else [])
            literals = [lit for lit in literals if family(lit)]
            if holders and literals:
                for holder in holders[1:]:
                    self._union(holders[0], holder)
                for literal in literals:
                    self._site(literal, holders[0], TEST)
                return True
        return False

    def subscript(self, node: cst.Subscript) -> None:
        """`TABLE[device]`: the keys of the table this file defines are compared with the value."""
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            self._lookup(node.value, node.slice[0].slice.value)

    def _lookup(self, table: cst.BaseExpression, key: cst.BaseExpression) -> None:
        holders = self.holders(key)
        if holders:
            value = self.bound_value(table)
            if isinstance(value, cst.Dict):
                for literal in self.choices(value):
                    self._site(literal, holders[0], TEST)

    def bound_value(self, expr: cst.BaseExpression) -> cst.BaseExpression | None:
        return bound_value(self.ctx, expr)

    def choices(self, value: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The literals of `("xla", "cuda")`, `["cpu", "xla"]`, `{"xla"}`, a dictionary's keys, one literal, or of
        the collection a name is bound to (`SUPPORTED = ("cpu", "xla")`)."""
        if isinstance(value, cst.Name):
            value = self.bound_value(value) or value
        if isinstance(value, (cst.Tuple, cst.List, cst.Set)):
            return [el.value for el in value.elements if family(el.value)]
        if isinstance(value, cst.Dict):
            return [el.key for el in value.elements if isinstance(el, cst.DictElement) and family(el.key)]
        return [value] if family(value) else []

    def match(self, node: cst.Match) -> None:
        holders = self.holders(node.subject)
        if not holders:
            return
        for holder in holders[1:]:
            self._union(holders[0], holder)
        for case in node.cases:
            for literal in _pattern_literals(case.pattern):
                self._site(literal, holders[0], TEST, in_pattern=True)

    def dict_literal(self, node: cst.Dict) -> None:
        for element in node.elements:
            if isinstance(element, cst.DictElement):
                key = string_value(element.key)
                if key is not None:
                    self.flow(("key", key), element.value)

    # -- calls of the file's own functions and classes -------------------------------------------------------
    def local_callable(self, func: cst.BaseExpression) -> cst.CSTNode | None:
        if type(func) is not cst.Name:
            return None
        ctx = self.ctx
        owner = ctx.analysis.lookup(func.value, ctx.scope)
        if owner is None:
            return None
        bindings = owner.bindings[func.value]
        if len(bindings) != 1 or bindings[0].kind not in ("def", "class"):
            return None
        return bindings[0].node

    def _call_local(self, node: cst.Call, callee: cst.CSTNode) -> None:
        if isinstance(callee, cst.ClassDef):
            for a in node.args:
                if a.keyword is not None:
                    self.flow(("attr", a.keyword.value), a.value)
            return
        scope = self._scope_of(callee)
        if scope is None:
            return
        params = [*callee.params.posonly_params, *callee.params.params]
        by_name = {p.name.value: p for p in [*params, *callee.params.kwonly_params]}
        for index, a in enumerate(node.args):
            if a.star:
                break
            param = by_name.get(a.keyword.value) if a.keyword is not None else (
                params[index] if index < len(params) else None)
            if param is not None:
                self.flow(("name", id(scope), param.name.value), a.value)

    def project_callable(self, qual: str) -> bool:
        """A function or class imported from another module of the project (its dotted name as imported)."""
        return any(qual == m or qual.startswith(m + ".") for m in self.project_modules)

    def project_target(self, func: cst.CSTNode, qual: str | None) -> str | None:
        """The dotted name of the callable of another project module that `func` names (through an import, or a
        relative import: `from .utils import get_device` -> `.utils.get_device`), or None."""
        name = qual if qual is not None else self.relative_import(func)
        return name if name is not None and self.project_callable(name) else None

    def relative_import(self, func: cst.CSTNode) -> str | None:
        """The dotted name a relative import binds a callable to, dots first, as the project model lists the
        modules (`from .utils import get_device` -> `.utils.get_device`; `from . import utils` -> `.utils`);
        None for anything else."""
        parts = dotted(func)
        if not parts or self.ctx.current is None:
            return None
        owner = self.ctx.analysis.lookup(parts[0], self.ctx.current.scope)
        bindings = owner.bindings[parts[0]] if owner is not None else []
        if len(bindings) != 1 or bindings[0].kind != "import" or bindings[0].alias is None:
            return None
        statement = bindings[0].node
        if not isinstance(statement, cst.ImportFrom) or not statement.relative:
            return None
        module = dotted_str(statement.module) if statement.module is not None else ""
        name = dotted_str(bindings[0].alias.name)
        if name is None or module is None:
            return None
        return ".".join(["." * len(statement.relative) + ".".join(filter(None, (module, name))), *parts[1:]])

    def _scope_of(self, node: cst.CSTNode) -> Scope | None:
        if self._scopes is None:
            self._scopes = {id(s.node): s for s in self.ctx.analysis.scopes}
        return self._scopes.get(id(node))

    def _public_function(self, scope: Scope) -> bool:
        """A function others may call with the old name: public, at module level or a method of a public class,
        in a module that is not a script."""
        if self.script:
            return False
        name = scope.node.name.value
        if name.startswith("_") and not name.startswith("__"):
            return False
        parent = scope.parent
        if parent is not None and parent.kind == "class":
            return self._public_class(parent.node, parent.parent)
        return parent is not None and parent.kind == "module"

    def _public_class(self, node: cst.ClassDef, parent: Scope | None = None) -> bool:
        if self.script or node.name.value.startswith("_"):
            return False
        parent = parent or self.ctx.scope.parent
        return parent is not None and parent.kind == "module"

    # -- the groups --------------------------------------------------------------------------------------
    def groups(self) -> list[Group]:
        if self._config_loaded:
            for holder, occ in self._config_reads:
                self._sources.setdefault(holder, (occ, f"a configuration file (`{holder[1]}`)", holder))
        groups: dict[tuple, Group] = {}
        for key in list(self._parent):
            group = groups.setdefault(self._find(key), Group())
            group.holders.append(key)
            if key in self._device_used or DEVICE_NAME.search(key[-1] or ""):
                group.device = True
            if key in self._sources:
                group.sources.append(self._sources[key])
        for site in self._sites.values():
            groups[self._find(site.holder)].sites.append(site)
        order = {id(source[0]): i for i, source in enumerate(self._sources.values())}
        for group in groups.values():
            group.sources.sort(key=lambda s: order[id(s[0])])
        return [g for g in groups.values() if g.sites]


def bound_value(ctx, expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The value a name is bound to, when the file binds it once, by a plain assignment."""
    if not isinstance(expr, cst.Name):
        return None
    owner = ctx.analysis.lookup(expr.value, ctx.scope)
    bindings = owner.bindings[expr.value] if owner is not None else []
    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].node is None:
        return None
    parent = ctx.analysis.parents.get(bindings[0].node)
    if isinstance(parent, cst.AssignTarget):
        assign = ctx.analysis.parents.get(parent)
        return assign.value if isinstance(assign, cst.Assign) and len(assign.targets) == 1 else None
    if isinstance(parent, cst.AnnAssign) and parent.target is bindings[0].node:
        return parent.value
    return None


def _argv_text(expr: cst.Subscript) -> str:
    index = expr.slice[0].slice if len(expr.slice) == 1 else None
    value = getattr(index, "value", None)
    return f"sys.argv[{value.value}]" if isinstance(value, cst.Integer) else "sys.argv"


def _subscript_key(expr: cst.Subscript) -> str | None:
    if len(expr.slice) != 1 or not isinstance(expr.slice[0].slice, cst.Index):
        return None
    return string_value(expr.slice[0].slice.value)


def _literals(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The device-name literals a value expression may evaluate to: itself, or a branch of `a if c else b` / `a or b`."""
    if family(value):
        return [value]
    if isinstance(value, cst.IfExp):
        return _literals(value.body) + _literals(value.orelse)
    if isinstance(value, cst.BooleanOperation):
        return _literals(value.left) + _literals(value.right)
    return []


def _pattern_literals(pattern) -> list[cst.BaseExpression]:
    if isinstance(pattern, cst.MatchValue):
        return [pattern.value] if family(pattern.value) else []
    if isinstance(pattern, cst.MatchOr):
        return [lit for el in pattern.patterns for lit in _pattern_literals(el.pattern)]
    if isinstance(pattern, cst.MatchAs) and pattern.pattern is not None:
        return _pattern_literals(pattern.pattern)
    return []


def _option_dest(node: cst.Call) -> str | None:
    dest = arg(node, None, "dest")
    if dest is not None:
        return string_value(dest.value)
    flags = [string_value(a.value) for a in node.args if a.keyword is None]
    flags = [f for f in flags if f]
    if not flags:
        return None
    long = next((f for f in flags if f.startswith("--")), None)
    name = long or flags[0]
    return name.lstrip("-").replace("-", "_") or None
