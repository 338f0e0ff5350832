"""The target a run's advice is for: the Neuron release and the instance (`--neuron-sdk`, `--instance`).

Rules whose advice depends on the target (TorchAO / MX formats, the XLA inference path, NxD inference) ask
here; the facts are rows of rules/versions.toml.
"""

from __future__ import annotations

from neuron_migrate.pin.matrix import Release, matrix


def release(settings) -> Release:
    try:
        return matrix().release_of(matrix().select(settings.neuron_sdk, settings.torch))
    except ValueError:  # an impossible combination is reported by the configuration; advise for the release
        return matrix().release(settings.neuron_sdk)


def instance(settings) -> str:
    return settings.instance or matrix().default_instance


def torchao_supported(settings) -> bool:
    """TorchAO (MXFP8) has a supported route: TorchAO Neuron on this release and instance (Neuron 2.34, Trn3)."""
    return release(settings).torchao_supported(instance(settings))


def xla_inference_maintained(settings) -> bool:
    """The target is an instance TorchNeuron does not run on (Inf2, Trn1), where the XLA-based inference path is
    still maintained: XLA inference code stays as it is there."""
    return instance(settings) not in release(settings).instances


def xla_inference_status(settings) -> str:
    """How the target release treats XLA inference on the target instance (for NM501)."""
    r = release(settings)
    if not r.xla_inference_supported(instance(settings)):
        return f"which Neuron {r.sdk} no longer supports for inference on Trn2 and Trn3 (target: {instance(settings)})"
    ended = next((x.sdk for x in matrix().releases if x.xla_inference_ended), None)
    later = f"; Neuron {ended} ends it on Trn2 and Trn3" if ended else ""
    return f"which Neuron {r.sdk} still supports for inference{later}"


def torchao_where() -> str:
    """`trn3 with Neuron 2.34.0`: where TorchAO Neuron is supported (the newest release that has it)."""
    return matrix().torchao_where()


def torchao_status(settings) -> str:
    """The end of an NM306 / NM307 message: why it is unsupported here and where it is supported."""
    r = release(settings)
    return (f"on {instance(settings)} with Neuron {r.sdk}; TorchAO Neuron (`torchao-neuron`) supports MXFP8 on "
            f"{torchao_where()} (`--instance trn3`)")
