"""Hugging Face accelerate configuration files (`accelerate config` output, `--config_file` YAML).

From accelerate 1.13.0 Neuron is a distributed type of its own (`MULTI_NEURON`, process-group backend `neuron`).
Before it, Neuron jobs ran through accelerate's torch_xla path, configured as `distributed_type: XLA` (or `TPU`,
its older name). A file that says it is about Neuron (it names Neuron, Trainium or a trn instance), or that lies
in a project whose requirements install torch-neuronx (engine/project.py), and still asks for XLA gets
`MULTI_NEURON` (NM511); FSDP and DeepSpeed, which accelerate does not support on Neuron
devices, are marked for a person (NM512). The file is edited line by line: comments, order and quoting stay.
"""

from __future__ import annotations

import re

from neuron_migrate.findings import FileResult
from neuron_migrate.pin.document import TextDocument, markers_of
from neuron_migrate.settings import Settings

_TOP_KEY = re.compile(r"^(?P<key>[A-Za-z_][\w-]*)[ \t]*:[ \t]*(?P<value>[^#\r\n]*?)[ \t]*(?:#[^\r\n]*)?$", re.M)
_NEURON = re.compile(r"neuron|trainium|\btrn[123]n?\b", re.I)
_XLA_TYPES = {"XLA", "TPU"}
_UNSUPPORTED = {
    "FSDP": "FSDP is not currently supported on Neuron devices",
    "DEEPSPEED": "DeepSpeed is not supported on Neuron devices",
}
_SECTIONS = {"fsdp_config": "FSDP", "deepspeed_config": "DEEPSPEED"}
FLOOR = "accelerate>=1.13.0"
_MARKER = re.compile(r"#\s*TODO\(neuron-migrate [^\r\n]*")


def _unquote(value: str) -> tuple[str, str]:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1], value[0]
    return value, ""


def is_accelerate_config(text: str) -> bool:
    return any(m.group("key") in ("distributed_type", "compute_environment") for m in _TOP_KEY.finditer(text))


def process_accelerate_config(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    doc.own_markers = markers_of(r"NM51[12]")
    text = doc.text
    if not is_accelerate_config(text):
        return doc.result(data)
    keys = {m.group("key"): m for m in _TOP_KEY.finditer(text)}
    dtype = keys.get("distributed_type")
    value, quote = _unquote(dtype.group("value")) if dtype else ("", "")
    project = settings.project  # a file of a project that installs Neuron's packages is Neuron's too
    neuron = value.upper() == "MULTI_NEURON" or _NEURON.search(_MARKER.sub("", text)) is not None or (
        project is not None and project.neuron_project is not None)
    if not neuron:
        return doc.result(data)  # a TPU or GPU configuration: not ours
    if dtype is not None and value.upper() in _XLA_TYPES:
        start = dtype.start("value")
        if doc.report("NM511", start, end=dtype.end("value"), value=value, floor=FLOOR):
            doc.replace(start, dtype.end("value"), f"{quote}MULTI_NEURON{quote}")
    unsupported = value.upper() if value.upper() in _UNSUPPORTED else None
    if unsupported is not None:
        doc.report("NM512", dtype.start("value"), end=dtype.end("value"), what=f"distributed_type: {value}",
                   why=_UNSUPPORTED[unsupported])
    for section, kind in _SECTIONS.items():
        m = keys.get(section)
        if m is None or kind == unsupported:
            continue
        body = text[m.end():]
        nested = re.match(r"(?:\r?\n)[ \t]+\S", body) is not None
        inline = m.group("value").strip() not in ("", "{}", "null", "~")
        if nested or inline:
            doc.report("NM512", m.start("key"), what=section, why=_UNSUPPORTED[kind])
    return doc.result(data)
