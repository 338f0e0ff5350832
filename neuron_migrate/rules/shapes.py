"""NM313: inputs whose shape changes from step to step in a compiled program (each new shape recompiles)."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.rules.patterns import arg, short, string_value
from neuron_migrate.rules import Rule
from neuron_migrate.rules.unsupported import imports_any, is_true

DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
COLLATOR = frozenset({"transformers.DataCollatorWithPadding", "transformers.data.DataCollatorWithPadding",
                      "transformers.data.data_collator.DataCollatorWithPadding"})
COMPILE = frozenset({"torch.compile", "torch_xla.compile", "torch_xla.torch_xla.compile"})
PAD_TO_LONGEST = "pads each batch to its own longest sequence"
PAD_FIXED = "pad to a fixed length (`padding=\"max_length\", max_length=...`) or to a few bucket lengths"
LAST_BATCH = ("yields a smaller last batch when the dataset size is not a multiple of the batch size",
              "pass `drop_last=True`, or pad the last batch to the batch size")


class VaryingShapes(Rule):
    codes = ("NM313",)
    triggers = (b"DataLoader", b"padding", b"DataCollatorWithPadding")
    context = (b"torch", b"compile")  # reported only where the program compiles
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """Reported only where the file compiles, at a DataLoader, a padding collator or a tokenizer call."""
        compiles = scan.any_qual(COMPILE) or ("compile" in scan.called and "backend" in scan.keywords) \
            or (settings.compile and scan.imports_under(("torch_xla",)))
        return compiles and (scan.any_qual(DATALOADER) or scan.any_qual(COLLATOR)
                             or {"padding", "return_tensors"} <= scan.keywords)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.compiles = False
        self.found: list[tuple[object, cst.Call, str, str]] = []

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        func = node.func
        if qual in COMPILE or (isinstance(func, cst.Attribute) and func.attr.value == "compile"
                               and arg(node, None, "backend") is not None):
            self.compiles = True
        elif qual in DATALOADER and self._partial_last_batch(node):
            self.found.append((ctx.current, node, *LAST_BATCH))
        elif qual in COLLATOR and string_value(getattr(arg(node, None, "padding"), "value", None)) != "max_length":
            self.found.append((ctx.current, node, PAD_TO_LONGEST, PAD_FIXED))
        elif qual is None and self._tokenizer_pads_to_longest(node):
            self.found.append((ctx.current, node, PAD_TO_LONGEST, PAD_FIXED))

    @staticmethod
    def _partial_last_batch(node: cst.Call) -> bool:
        batch_size = arg(node, 1, "batch_size")
        drop_last = arg(node, None, "drop_last")
        if batch_size is None or arg(node, None, "batch_sampler") is not None:
            return False  # batch_size=1 by default: every batch has the same shape
        if isinstance(batch_size.value, cst.Name) and batch_size.value.value == "None":
            return False
        return drop_last is None or not is_true(drop_last.value)

    @staticmethod
    def _tokenizer_pads_to_longest(node: cst.Call) -> bool:
        padding = arg(node, None, "padding")
        if padding is None or arg(node, None, "return_tensors") is None:
            return False
        return is_true(padding.value) or string_value(padding.value) == "longest"

    def finish(self) -> None:
        ctx = self.ctx
        compiles = self.compiles or (ctx.settings.compile and imports_any(ctx, ("torch_xla",)))
        if not compiles:
            return
        for occ, node, what, hint in self.found:
            ctx.current = occ
            ctx.report("NM313", node, call=short(node), what=what, hint=hint)
        ctx.current = None
