"""NM508 / NM509: optimum-neuron's trainer classes, mapped to transformers / trl where the arguments carry over.

optimum-neuron is still XLA-only; transformers' Trainer and trl's SFTTrainer run natively (transformers 5.4.0,
accelerate 1.13.0). The decision is per file, and the swap is made only when nothing of the program still needs
the Neuron class: no use of the classes passes a Neuron-only argument (`tensor_parallel_size`, `zero_1`, ... in
rules/huggingface.toml) or `**kwargs`, the file reads no such argument or Neuron-only attribute
(`training_args.tensor_parallel_size`, `trn_config`), uses no optimum-neuron helper that works with the class
or its Neuron-only values (`NeuronHfArgumentParser`, `lazy_load_for_parallelism`; an unrelated optimum-neuron
name, an inference model class, does not count), and no launcher of the program passes such an argument
(`--tensor_parallel_size` in a launch script, a notebook's `!torchrun` line, an estimator's `hyperparameters`: the
project model's `neuron_flags`). Then every reference becomes the native class (NM508) and the optimum-neuron
import of those names goes; otherwise each of those places gets a marker naming the native equivalent, or saying
there is none yet (NM509), and nothing is rewritten.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.catalogue import load_data
from neuron_migrate.syntax.parse import expression
from neuron_migrate.engine.names import dotted_str
from neuron_migrate.rules.patterns import code
from neuron_migrate.engine.facts import fact
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


@functools.lru_cache(maxsize=1)
def neuron_only_attributes() -> dict[str, str]:
    """What a program may read of the Neuron arguments object that transformers' class lacks: the Neuron-only
    arguments and the attributes optimum-neuron's class adds (`trn_config`, `dp_size`, ...)."""
    return {**neuron_only(), **load_data("huggingface.toml")["neuron_only_attributes"]}


@functools.lru_cache(maxsize=1)
def helpers() -> dict[str, str]:
    return load_data("huggingface.toml")["neuron_helpers"]


def prepare() -> None:
    classes()
    neuron_only_attributes()
    helpers()


_ARGUMENTS = ("TrainingArguments", "Config")  # the arguments classes' names end so (NeuronSFTConfig)


@fact
def optimum_classes_kept(ctx) -> set[int]:
    """The ids of the optimum-neuron imports of the trainer classes that stay because the program still needs them
    (NM509): NM506 counts them with the library's other imports and marks the first (rules/inference.py)."""
    return set()


@dataclass
class _Use:
    node: cst.CSTNode
    qualname: str
    statement: cst.CSTNode | None
    scope: object
    occ: object  # the occurrence it was found at (ctx.current), for a report made in `finish`


class OptimumNeuronTrainer(Rule):
    codes = ("NM508", "NM509")
    triggers = (b"optimum",)
    context = (b"Neuron",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        return scan.any_qual(classes())

    @classmethod
    def words(cls) -> tuple[str, ...]:
        """The Neuron-only attributes: a function or class that reads one keeps the class, one that declares one (a
        script's own dataclass field, `self.dp_size = ...`) lets the file read its own."""
        return tuple(neuron_only_attributes())

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.uses: list[_Use] = []
        self.blocking: list[tuple[cst.Arg, str, _Use]] = []  # (argument, its name, the call's class use)
        self.splat = False
        self.imports: list[cst.ImportFrom] = []
        # what else keeps the Neuron class: reads of its Neuron-only attributes, other optimum-neuron names used
        self.reads: list[tuple[cst.CSTNode, str, object]] = []  # (node, attribute, occurrence)
        self.helpers: list[tuple[cst.CSTNode, str, object]] = []  # (node, qualified name, occurrence)
        self.own: set[str] = set()  # attribute names the file defines itself (its dataclass fields, `self.x = `)

    def _reference(self, node: cst.CSTNode) -> None:
        qual = reference(self.ctx, node)
        if qual in classes():
            self.uses.append(_Use(node, qual, self.ctx.current.statement, self.ctx.scope, self.ctx.current))
        elif qual in helpers():
            self.helpers.append((node, qual, self.ctx.current))

    visit_Name = _reference

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._reference(node)
        if node.attr.value in neuron_only_attributes():
            parent = self.ctx.current.parent
            if type(parent) is cst.AssignTarget and isinstance(node.value, cst.Name) and node.value.value == "self":
                self.own.add(node.attr.value)  # `self.tensor_parallel_size = tp`: the file's own object
            else:
                self.reads.append((node, node.attr.value, self.ctx.current))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        """The fields a class of the file declares (`tensor_parallel_size: int = 8` in a script's own dataclass)."""
        for statement in node.body.body:
            for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                    self.own.add(small.target.value)
                elif isinstance(small, cst.Assign):
                    self.own.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value in ("getattr", "hasattr") and len(node.args) >= 2 \
                and isinstance(node.args[1].value, cst.SimpleString) and self.ctx.qualname(node.func) is None:
            name = node.args[1].value.evaluated_value
            if name in neuron_only_attributes():  # `getattr(training_args, "tensor_parallel_size", 1)`
                self.reads.append((node, name, self.ctx.current))
        qual = self.ctx.qualname(node.func)
        if qual not in classes():
            return
        use = _Use(node.func, qual, self.ctx.current.statement, self.ctx.scope, self.ctx.current)
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
        if not self.uses:
            return
        if self._held():
            ctx.current = None
            ctx.facts.optimum_classes_kept.update(id(node) for node in self.imports)
            return
        if self.splat:
            return
        rewritten: set[str] = set()
        for use in self.uses:
            ctx.current = use.occ
            fixed = classes()[use.qualname]
            short_name = use.qualname.rpartition(".")[2]
            if ctx.report("NM508", use.node, statement=use.statement, name=code(use.node),
                          what=WHAT.get(short_name, "class"), fixed=fixed):
                module, _, attribute = fixed.rpartition(".")
                ctx.replace(use.node, expression(f"{ctx.module_ref(module, scope=use.scope)}.{attribute}"))
                rewritten.add(short_name)
        if rewritten and len(rewritten) == len({u.qualname.rpartition('.')[2] for u in self.uses}):
            self._drop_imports(rewritten)

    def _held(self) -> bool:
        """Whether the program still needs the Neuron class; each reason gets an NM509 finding (a marker)."""
        ctx = self.ctx
        for argument, name, use in self.blocking:
            fixed = classes()[use.qualname]
            ctx.current = use.occ
            ctx.report("NM509", argument, statement=use.statement, argument=name, fixed=fixed,
                       native=neuron_only()[name], name=use.qualname.rpartition(".")[2],
                       subject=f"`{name}` is an optimum-neuron argument that `{fixed}` does not have")
        # the class whose arguments these are: the arguments class where the file uses one, else the first class
        use = next((u for u in self.uses if u.qualname.endswith(_ARGUMENTS)), self.uses[0])
        fixed, short = classes()[use.qualname], use.qualname.rpartition(".")[2]
        reads = [(n, a, o) for n, a, o in self.reads if a not in self.own]
        for node, attribute, occ in reads:
            ctx.current = occ
            ctx.report("NM509", node, argument=attribute, fixed=fixed, name=short,
                       native=neuron_only_attributes()[attribute],
                       subject=f"`{code(node)}` reads `{attribute}`, which optimum-neuron's `{short}` has and "
                               f"`{fixed}` does not")
        for node, qual, occ in self.helpers:
            ctx.current = occ
            helper = qual.rpartition(".")[2]
            ctx.report("NM509", node, argument=helper, fixed=fixed, name=short,
                       native=helpers()[qual],
                       subject=f"`{code(node)}` (`{qual}`) stays on optimum-neuron, with `{short}`")
        project = ctx.settings.project
        flags = project.neuron_flags if project is not None else ()
        for item in flags:
            flag, _, launcher = item.partition(":")
            ctx.current = use.occ
            ctx.report("NM509", use.node, statement=use.statement, argument=flag, fixed=fixed, name=short,
                       native=neuron_only()[flag],
                       subject=f"`{launcher}` passes this program `--{flag}`, an optimum-neuron argument that "
                               f"`{fixed}` does not have")
        return bool(self.blocking or reads or self.helpers or flags)

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
