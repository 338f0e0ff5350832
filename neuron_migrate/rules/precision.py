"""NM401 float64 on the device; NM402 XLA and CUDA autocast become `torch.autocast(device_type="neuron")`.

(torch_xla's sync-free optimizers are renamed by NM227 in misc.py.)"""

from __future__ import annotations

import libcst as cst

from neuron_migrate.engine.paths import CUDA_LEFTOVER

from neuron_migrate.rules.patterns import arg, code, has_star, short, string_value
from neuron_migrate.rules import Rule
from neuron_migrate.rules.unsupported import moving_to_neuron, reference
from neuron_migrate.syntax.parse import expression

FLOAT64 = frozenset({"torch.float64", "torch.double", "torch.complex128", "torch.cdouble", "torch.DoubleTensor",
                     "torch.cuda.DoubleTensor"})
FLOAT64_STRINGS = frozenset({"float64", "double", "f8", "<f8", "complex128"})
NUMPY_FLOAT64 = frozenset({"numpy.float64", "numpy.double", "numpy.complex128"})
# NumPy calls whose result is float64 unless a dtype says otherwise.
NUMPY_FLOAT_DEFAULT = frozenset(f"numpy.{n}" for n in (
    "zeros", "ones", "empty", "full", "eye", "identity", "linspace", "logspace", "random.rand", "random.randn",
    "random.random", "random.uniform", "random.normal", "random.standard_normal", "random.random_sample"))
NUMPY_FROM_VALUES = frozenset({"numpy.array", "numpy.asarray"})
TO_TENSOR = frozenset({"torch.from_numpy", "torch.as_tensor", "torch.tensor", "torch.asarray"})
CONVERTED_AFTER = frozenset({"float", "half", "bfloat16", "to", "type", "int", "long"})

XLA_AUTOCAST = frozenset({"torch_xla.amp.autocast", "torch_xla.amp.autocast_mode.autocast"})
CUDA_AUTOCAST = frozenset({"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"})


class Float64(Rule):
    codes = ("NM401",)
    triggers = (b"float64", b"double", b"complex128", b"DoubleTensor", b"numpy", b"f8")
    context = (b"torch",)  # float64 matters only where torch tensors are made
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A float64 dtype read, `.double()`, a float64 dtype string given as `dtype=`, or a tensor made from a NumPy
        value."""
        return scan.any_qual(FLOAT64) or "double" in scan.called \
            or ("dtype" in scan.keywords and not FLOAT64_STRINGS.isdisjoint(scan.strings)) \
            or (scan.any_qual(TO_TENSOR) and ("astype" in scan.called
                                              or scan.any_qual(NUMPY_FLOAT_DEFAULT | NUMPY_FROM_VALUES)))

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.numpy_float64: dict[tuple[int, str], cst.CSTNode] = {}  # (scope, name) -> float64 array value

    def _flag(self, node: cst.CSTNode, what: str) -> None:
        self.ctx.report("NM401", node, text=short(node), what=what)

    def _reference(self, node: cst.CSTNode) -> None:
        if reference(self.ctx, node) in FLOAT64:
            self._flag(node, "is a float64 type")

    visit_Attribute = visit_Name = _reference

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            key = (id(self.ctx.scope), node.targets[0].target.value)
            if self._numpy_float64(node.value):
                self.numpy_float64[key] = node.value
            else:
                self.numpy_float64.pop(key, None)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "double" and not node.args:
            self._flag(node, "converts to float64")
            return
        qual = ctx.qualname(func) or ""
        dtype = arg(node, None, "dtype")
        if qual.startswith("torch.") and dtype is not None and string_value(dtype.value) in FLOAT64_STRINGS:
            self._flag(dtype, "asks for float64")
        if qual in TO_TENSOR and node.args and not has_star(node) and dtype is None and not self._converted():
            source = node.args[0].value
            if self._numpy_float64(source) or self._float64_name(source):
                self._flag(node, "makes a float64 tensor from a NumPy array (NumPy's default dtype is float64)")

    def _converted(self) -> bool:
        parent = self.ctx.current.parent
        return isinstance(parent, cst.Attribute) and parent.attr.value in CONVERTED_AFTER

    def _float64_name(self, expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Name) and (id(self.ctx.scope), expr.value) in self.numpy_float64

    def _numpy_float64(self, expr: cst.BaseExpression) -> bool:
        if not isinstance(expr, cst.Call):
            return False
        ctx = self.ctx
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "astype" and expr.args:
            return self._is_float64_dtype(expr.args[0].value)
        qual = ctx.qualname(func)
        dtype = arg(expr, None, "dtype")
        if dtype is not None:
            return qual in NUMPY_FLOAT_DEFAULT | NUMPY_FROM_VALUES and self._is_float64_dtype(dtype.value)
        if qual in NUMPY_FLOAT_DEFAULT:
            return True
        return qual in NUMPY_FROM_VALUES and bool(expr.args) and _has_float_literal(expr.args[0].value)

    def _is_float64_dtype(self, expr: cst.BaseExpression) -> bool:
        if string_value(expr) in FLOAT64_STRINGS:
            return True
        if isinstance(expr, cst.Name) and expr.value == "float" and self.ctx.analysis.lookup("float", self.ctx.scope) \
                is None:
            return True
        return self.ctx.qualname(expr) in NUMPY_FLOAT64


def _has_float_literal(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Float):
        return True
    if isinstance(expr, (cst.List, cst.Tuple)):
        return any(_has_float_literal(e.value) for e in expr.elements)
    return isinstance(expr, cst.UnaryOperation) and isinstance(expr.expression, cst.Float)


class Autocast(Rule):
    """`torch_xla.amp.autocast(device, ...)` and `torch.cuda.amp.autocast(...)` -> `torch.autocast("neuron")`."""

    codes = ("NM402",)
    triggers = (b"autocast",)
    context = (b"torch",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(XLA_AUTOCAST | CUDA_AUTOCAST)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in XLA_AUTOCAST:
            self._rewrite(node, ("device", "enabled", "dtype", "cache_enabled"), "bfloat16")
        elif qual in CUDA_AUTOCAST and moving_to_neuron(ctx):
            self._rewrite(node, ("enabled", "dtype", "cache_enabled"), "float16", CUDA_LEFTOVER)

    def _rewrite(self, node: cst.Call, params: tuple[str, ...], default_dtype: str, acts_on: str | None = None) -> None:
        """Keep every argument by name, drop the device, and state the dtype the old call used by default."""
        ctx = self.ctx
        if has_star(node):
            return
        given = {p: arg(node, i, p) for i, p in enumerate(params)}
        if any(a not in given.values() for a in node.args):
            return  # an argument this rewrite does not know: leave it to a person
        torch = ctx.module_ref("torch")
        parts = [f"device_type={ctx.string('neuron')}"]
        dtype = given.get("dtype")
        parts.append(f"dtype={code(dtype.value)}" if dtype is not None else f"dtype={torch}.{default_dtype}")
        parts += [f"{p}={code(given[p].value)}" for p in ("enabled", "cache_enabled") if given.get(p) is not None]
        fixed = f"{torch}.autocast({', '.join(parts)})"
        if ctx.report("NM402", node, call=short(node), fixed=fixed, acts_on=acts_on):
            ctx.replace(node, expression(fixed))
