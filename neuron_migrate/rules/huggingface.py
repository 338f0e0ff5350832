"""NM508 / NM509: optimum-neuron's trainer classes, mapped to transformers / trl where the arguments carry over.

optimum-neuron is still XLA-only; transformers' Trainer and trl's SFTTrainer run natively (transformers 5.4.0,
accelerate 1.13.0). The decision is per file: when no use of the classes passes a Neuron-only argument
(`tensor_parallel_size`, `zero_1`, ... in rules/huggingface.toml) or `**kwargs`, every reference becomes the
native class (NM508) and the optimum-neuron import of those names goes; otherwise each Neuron-only argument
gets a marker naming its native equivalent, or saying there is none yet (NM509), and nothing is rewritten.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.catalogue import load_data
from neuron_migrate.syntax.parse import expression
from neuron_migrate.engine.names import dotted_str
from neuron_migrate.rules.patterns import code
from neuron_migrate.rules import Rule
from neuron_migrate.rules.unsupported import reference

WHAT = {"NeuronTrainer": "trainer", "NeuronTrainingArguments": "training arguments",
        "NeuronSFTTrainer": "SFT trainer", "NeuronSFTConfig": "SFT configuration"}


@functools.lru_cache(maxsize=1)
def classes() -> dict[str, str]:
    return load_data("huggingface.toml")["classes"]


@functools.lru_cache(maxsize=1)
def neuron_only() -> dict[str, str]:
    return load_data("huggingface.toml")["neuron_only_arguments"]


def prepare() -> None:
    classes()
    neuron_only()


@dataclass
class _Use:
    node: cst.CSTNode
    qualname: str
    statement: cst.CSTNode | None
    scope: object


class OptimumNeuronTrainer(Rule):
    codes = ("NM508", "NM509")
    triggers = (b"optimum",)
    context = (b"Neuron",)

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(classes())

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.uses: list[_Use] = []
        self.blocking: list[tuple[cst.Arg, str, _Use]] = []  # (argument, its name, the call's class use)
        self.splat = False
        self.imports: list[cst.ImportFrom] = []

    def _reference(self, node: cst.CSTNode) -> None:
        qual = reference(self.ctx, node)
        if qual in classes():
            self.uses.append(_Use(node, qual, self.ctx.current.statement, self.ctx.scope))

    visit_Name = visit_Attribute = _reference

    def visit_Call(self, node: cst.Call) -> None:
        qual = self.ctx.qualname(node.func)
        if qual not in classes():
            return
        use = _Use(node.func, qual, self.ctx.current.statement, self.ctx.scope)
        for argument in node.args:
            if argument.star == "**":
                self.splat = True
            elif argument.keyword is not None and argument.keyword.value in neuron_only():
                self.blocking.append((argument, argument.keyword.value, use))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted_str(node.module) if node.module is not None and not node.relative else None
        if module in ("optimum.neuron", "optimum.neuron.trainers") and not isinstance(node.names, cst.ImportStar):
            self.imports.append(node)

    def finish(self) -> None:
        ctx = self.ctx
        if self.blocking:
            for argument, name, use in self.blocking:
                fixed = classes()[use.qualname]
                ctx.report("NM509", argument, statement=use.statement, argument=name, fixed=fixed,
                           native=neuron_only()[name], name=use.qualname.rpartition(".")[2])
            return
        if self.splat or not self.uses:
            return
        rewritten: set[str] = set()
        for use in self.uses:
            fixed = classes()[use.qualname]
            short_name = use.qualname.rpartition(".")[2]
            if ctx.report("NM508", use.node, statement=use.statement, name=code(use.node),
                          what=WHAT.get(short_name, "class"), fixed=fixed):
                module, _, attribute = fixed.rpartition(".")
                ctx.replace(use.node, expression(f"{ctx.module_ref(module, scope=use.scope)}.{attribute}"))
                rewritten.add(short_name)
        if rewritten and len(rewritten) == len({u.qualname.rpartition('.')[2] for u in self.uses}):
            self._drop_imports(rewritten)

    def _drop_imports(self, rewritten: set[str]) -> None:
        """The optimum-neuron import of names that are no longer read (only plain `from ... import Name`)."""
        for node in self.imports:
            names = list(node.names)
            keep = [a for a in names if a.asname is not None or dotted_str(a.name) not in rewritten]
            if len(keep) == len(names):
                continue
            if not keep:
                self.ctx.remove(node)
                continue
            last = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            self.ctx.replace(node, node.with_changes(names=[*keep[:-1], last]))
