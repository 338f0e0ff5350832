"""NM617, NM523: the launch environment a Python file sets up for a program moving to neuron.

A migrated `train.py` runs only where TorchNeuron is installed. A SageMaker estimator that asks for a PyTorch
version of the legacy XLA Neuron containers (`framework_version="1.13.1"`, `pytorch_version=`) or names such a
container (`image_uri=".../pytorch-training-neuronx:2.1.2-neuronx-py310-..."`) starts it where there is no native
backend (NM617), reported where the project model (engine/project.py) says a program of the file's project (or one
the estimator runs) moves to neuron, or where the file moves itself. A Ray `TorchXLAConfig` (NM523) is Neuron's XLA
set-up itself (Ray's XLA backend serves Neuron cores only).
"""

from __future__ import annotations

import os

import libcst as cst

from neuron_migrate.engine.project import INSTANCE_TYPE
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.rules import Rule
from neuron_migrate.rules.patterns import arg, string_value
from neuron_migrate.rules.unsupported import may_move_to_neuron

VERSION_KEYWORDS = ("framework_version", "pytorch_version")
NEURON_INSTANCES = ("trn", "inf2")


def _moving(ctx) -> str | None:
    """The program moving to neuron whose environment this file sets up (as shown), or None."""
    project = ctx.settings.project
    if project is not None and project.launches_moving is not None:
        return f"`{project.launches_moving}`"
    return "this program" if ctx.moving_to_neuron else None


class SageMakerContainer(Rule):
    """NM617 on a SageMaker estimator or model whose container is a legacy XLA Neuron one: a PyTorch version
    outside the TorchNeuron families on a Neuron instance (or an instance the call does not spell), or an
    `image_uri` of a legacy Neuron container."""

    codes = ("NM617",)
    triggers = (b"framework_version", b"pytorch_version", b"image_uri")
    context = (b"sagemaker",)
    tree_predicate_any_selection = True

    @classmethod
    def may_match_tree(cls, scan, settings) -> bool:
        """A call of a name imported from sagemaker, in a file whose program may move to neuron (`_moving`): a
        launch file the project model found for one, or what `facts.moving_to_neuron` may take (the held entry of
        a Trn1 program that only launches its job is neither)."""
        project = settings.project
        return scan.any_qual_under(("sagemaker",)) and (
            (project is not None and project.launches_moving is not None) or may_move_to_neuron(scan, settings))

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func) or ""
        if qual.split(".")[0] != "sagemaker":
            return
        kind = arg(node, None, "instance_type")
        instance = string_value(kind.value) if kind is not None else None
        if instance is not None and not INSTANCE_TYPE.search(instance):
            return  # a GPU or CPU instance (`ml.p4d.24xlarge`): SageMaker's other containers
        found = self._image(node) or self._version(node, instance)
        program = _moving(ctx) if found is not None and not self._staying(node) else None
        if program is not None:
            where, what = found
            ctx.report("NM617", where.value, what=what, program=program, family=max(matrix().native_torch))

    def _staying(self, node: cst.Call) -> bool:
        """The call runs a program of the project that does not move (a `PyTorchModel`'s `inference.py` served on
        another instance): its container is that program's."""
        project = self.ctx.settings.project
        entry = arg(node, None, "entry_point")
        name = string_value(entry.value) if entry is not None else None
        if project is None or not project.launches_staying or name is None:
            return False
        source = arg(node, None, "source_dir")
        folder = string_value(source.value) if source is not None else None
        if source is not None and folder is None:
            return False
        return os.path.normpath(os.path.join(folder or "", name)) in project.launches_staying

    @staticmethod
    def _image(node: cst.Call):
        uri = arg(node, None, "image_uri")
        value = string_value(uri.value) if uri is not None else None
        if not value or "neuron" not in value:
            return None
        from neuron_migrate.pin.dockerfile import image_problems  # here: the Dockerfile handler's, loaded late

        problems = image_problems(value)
        return (uri, f"`image_uri` names the container `{value}`, which {' and '.join(problems)}") if problems else None

    @staticmethod
    def _version(node: cst.Call, instance: str | None):
        if instance is not None and not instance.split("ml.")[-1].startswith(NEURON_INSTANCES):
            return None
        for keyword in VERSION_KEYWORDS:
            found = arg(node, None, keyword)
            value = string_value(found.value) if found is not None else None
            if value and ".".join(value.split(".")[:2]) not in matrix().native_torch:
                return found, (f"`{keyword}=\"{value}\"` selects SageMaker's PyTorch {value} Neuron container, "
                               f"the XLA-based torch-neuronx")
        return None


class RayXLAConfig(Rule):
    """NM523 on Ray Train's `TorchXLAConfig` (ray.train.torch.xla): it sets up torch_xla's process group and
    Neuron's XLA runtime for every worker (its only accelerator is `neuron_cores`)."""

    codes = ("NM523",)
    triggers = (b"TorchXLAConfig",)

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func) or ""
        if qual.startswith("ray.") and qual.endswith(".TorchXLAConfig"):
            ctx.report("NM523", node)
