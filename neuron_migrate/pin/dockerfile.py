"""Dockerfiles: `pip install` in `RUN` instructions (shell form), and `FROM` images the native backend cannot use."""

from __future__ import annotations

import re
from dataclasses import dataclass

from neuron_migrate.findings import FileResult
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.shell import Variable, assignment, commands, defined_once, pin_commands, pip_install
from neuron_migrate.settings import Settings

_INSTRUCTION = re.compile(r"[ \t]*([A-Za-z]+)(?=[ \t]|$)", re.M)
_FLAG = re.compile(r"[ \t]*--[a-z-]+=\S*")
_UBUNTU_CODENAMES = {"bionic": "18.04", "focal": "20.04", "jammy": "22.04", "noble": "24.04"}
_UBUNTU_TAG = re.compile(r"ubuntu-?(\d\d\.\d\d)")
_PYTHON_TAG = re.compile(r"(?:^|[-_])py(?:thon)?-?3\.?(\d{1,2})(?=$|[-_.])")
_ABOUT_NEURON = re.compile(r"neuron|xla", re.I)  # base images are judged only in Dockerfiles for Neuron
_LEADING_VERSION = re.compile(r"^(\d+\.\d+)(?:\.\d+)*")
LEGACY_IMAGE = "is a legacy XLA torch-neuronx image"


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    start: int  # offset of its first line
    args_start: int  # offset just after the keyword
    end: int  # offset past its last line


def instructions(doc: TextDocument) -> list[Instruction]:
    """Instructions with `\\` continuations joined (comment lines inside a continuation are skipped, as Docker does)."""
    text = doc.text
    out = []
    offset = 0
    while offset < len(text):
        line_end = doc.line_end(offset)
        line = text[offset:line_end]
        m = _INSTRUCTION.match(line)
        if not line.strip() or line.lstrip().startswith("#") or not m:
            offset = line_end
            continue
        end = line_end
        while text[offset:end].rstrip("\r\n").rstrip(" \t").endswith("\\") and end < len(text):
            end = doc.line_end(end)
            while end < len(text) and text[doc.line_start(end - 1):end].lstrip().startswith("#"):
                end = doc.line_end(end)
        out.append(Instruction(m.group(1).upper(), offset, offset + m.end(), end))
        offset = end
    return out


def process_dockerfile(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    found = instructions(doc)
    runs = [i for i in found if i.keyword == "RUN" and not doc.text[i.args_start:i.end].lstrip().startswith("[")]
    spans = []
    for run in runs:
        start = run.args_start
        while m := _FLAG.match(doc.text, start, run.end):  # RUN --mount=... --network=...
            start = m.end()
        spans.append((start, run.end))
    # base images are judged in Dockerfiles for Neuron, not in those that install another product (TPU, Inf1)
    about_neuron = (_ABOUT_NEURON.search(doc.text) and not planning.drives_tpu(doc.text)
                    and planning.product(_installed(doc, spans)) is None)
    args: dict[str, str] = {}
    for instruction in found:
        if instruction.keyword == "ARG" and not any(i.keyword == "FROM" for i in found[:found.index(instruction)]):
            args.update(_arg_default(doc.text[instruction.args_start:instruction.end]))
        elif instruction.keyword == "FROM" and about_neuron:
            check_image(doc, instruction, args)
    pin_commands(doc, spans, variables=_variables(doc, found))
    return doc.result(data)


def _installed(doc: TextDocument, spans: list[tuple[int, int]]) -> set[str]:
    """What the `pip install` commands of the RUN instructions install (with TPU_BUILD for a libtpu index)."""
    names: set[str] = set()
    for start, end in spans:
        for words in commands(doc.text, start, end):
            if (command := pip_install(words)) is not None:
                names |= planning.names_of(command.texts())
                if any(planning.TPU_LINKS.search(w.value) for w in command.words):
                    names.add(planning.TPU_BUILD)
    return names


def _variables(doc: TextDocument, found: list[Instruction]) -> dict[str, Variable]:
    """`ARG NAME=value` and `ENV NAME=value` definitions, for versions taken from them."""
    definitions = []
    for instruction in found:
        if instruction.keyword in ("ARG", "ENV"):
            for words in commands(doc.text, instruction.args_start, instruction.end):
                definitions += [v for w in words if (v := assignment(doc, w))]
    return defined_once(definitions)


def image_problems(image: str) -> list[str]:
    """What makes a base image unfit for TorchNeuron (empty when nothing is known to be wrong)."""
    mx = matrix()
    if "$" in image:
        return []
    name, _, tag = image.partition("@")[0].rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    repo = name.rsplit("/", 1)[-1]
    problems = []
    ubuntu = None
    if repo == "ubuntu":
        ubuntu = _UBUNTU_CODENAMES.get(tag.split("-")[0], tag.split("-")[0]) if tag else None
    elif m := _UBUNTU_TAG.search(tag):
        ubuntu = m.group(1)
    if ubuntu and re.fullmatch(r"\d\d\.\d\d", ubuntu) and ubuntu not in mx.ubuntu:
        problems.append(f"is Ubuntu {ubuntu}")
    python = None
    if repo == "python" and (m := re.match(r"(\d+\.\d+)", tag)):
        python = m.group(1)
    elif m := _PYTHON_TAG.search(tag):
        python = f"3.{m.group(1)}"
    if python and not mx.python_supported(python):
        problems.append(f"has Python {python}")
    if "neuronx" in repo and (m := _LEADING_VERSION.match(tag)) and m.group(1) not in {f.torch for f in mx.families}:
        problems.append(f"{LEGACY_IMAGE} (PyTorch {m.group(1)})")
    return problems


def _arg_default(text: str) -> dict[str, str]:
    """`ARG NAME=value` (global, before the first FROM): the default a `FROM $NAME` uses."""
    name, sep, value = text.strip().partition("=")
    return {name.strip(): value.strip().strip("'\"")} if sep and " " not in name.strip() else {}


def _substitute(image: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: args.get(m.group(1), m.group(0)), image)


def check_image(doc: TextDocument, instruction: Instruction, args: dict[str, str]) -> None:
    text = doc.text[instruction.args_start:instruction.end]
    words = [w for w in text.replace("\\\n", " ").split() if not w.startswith("--")]
    if not words:
        return
    image = _substitute(words[0], args)
    problems = image_problems(image)
    if problems:
        mx = matrix()
        offset = instruction.args_start + text.index(words[0])
        resolved = f" (`{image}`)" if image != words[0] else ""
        ubuntu = " or ".join(mx.ubuntu)
        if any(p.startswith(LEGACY_IMAGE) for p in problems):  # the container itself is the XLA stack's
            todo = "use a TorchNeuron container image"
            instead = f"build on a Neuron Deep Learning Container with TorchNeuron (torch-neuronx {max(mx.native_torch)})"
        else:
            todo = instead = f"use an Ubuntu {ubuntu} base image"
        doc.report("NM608", offset, instruction.start, end=offset + len(words[0]), image=words[0], resolved=resolved,
                   what=" and ".join(problems), ubuntu=ubuntu, supported=", ".join(mx.python), todo=todo,
                   instead=instead)
