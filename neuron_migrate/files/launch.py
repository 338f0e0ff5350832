"""Launch scripts (`*.sh`): a program that started its workers with `xmp.spawn` is started by torchrun.

`python train.py ...` becomes `torchrun --nproc_per_node=N train.py ...` (NM240) when train.py, found beside
the script or under the working folder, calls `xmp.spawn`. N is the spawn's `nprocs`; without one (every
device) the `NEURON_RT_NUM_CORES` the script sets, else `neuron`, which makes torchrun start one process per
neuron device. A count the program computes is not guessed: the line is marked (NM241). The result depends on
the program too, so the files looked at are listed in the result (`files_read`) for the cache.

An `optimum-cli export neuron ...` line exports a model for the XLA-based inference path: it gets NM524's marker
with the native route of the exported task (NM510, a note, on an Inf2 / Trn1 target).
"""

from __future__ import annotations

import os
import re
from contextvars import ContextVar
from dataclasses import dataclass

import libcst as cst

from neuron_migrate.engine.cache import digest
from neuron_migrate.engine.edits import MARKER_PREFIX
from neuron_migrate.engine.python import marker_findings
from neuron_migrate.findings import FileResult
from neuron_migrate.engine.names import Analysis
from neuron_migrate.pin.plan import drives_tpu
from neuron_migrate.policy import Policy, marked_above
from neuron_migrate.rules import distributed
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError, decode, read_bytes
from neuron_migrate.suppress import LineSuppressions, line_suppressions

# `python train.py`, `python3 -u train.py`, `${PYTHON} train.py`, after a line start, `;`, `&&`, `|` or env vars.
LAUNCH = re.compile(
    r"(?P<head>^[ \t\f]*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*|[;&|(]\s*|\bexec\s+)"
    r"(?P<python>(?:[^\s;&|()]*/)?python(?:3(?:\.\d+)?)?|\$\{?PYTHON\}?)(?P<flags>(?:\s+-u)*)\s+"
    r"(?P<script>[^\s;&|]+\.py)\b"
)
NUM_CORES = re.compile(r"\bNEURON_RT_NUM_CORES=[\"']?(\d+)")
EXPORT_COMMAND = ("optimum-cli", "export", "neuron")  # an ahead-of-time export for the XLA-based stack (NM524)


# the programs a notebook's `%%writefile` cells write (absolute path -> text), for its launch lines: the notebook
# writes them before it runs them, whatever the disk holds now
WRITTEN: ContextVar[dict[str, str]] = ContextVar("neuron_migrate_written_programs", default={})

# the markers the other handlers of shell scripts report (environment settings, pip installs): not NM900 twice
OTHER_HANDLERS_CODES = ("NM4", "NM5", "NM6")
ALL_DEVICES = "neuron"  # torchrun's --nproc_per_node=<PrivateUse1 name>: one process per visible device


@dataclass(frozen=True)
class Spawned:
    nprocs: str | None  # a literal count, ALL_DEVICES (spawn's default), or None: computed by the program


def spawned(program: str) -> Spawned | None:
    """Whether the Python program calls `xmp.spawn` or `torch_xla.launch` (resolved through its imports), and with how many processes."""
    if "spawn" not in program and "launch" not in program:
        return None
    try:
        module = cst.parse_module(program)
    except cst.ParserSyntaxError:
        return None
    analysis = Analysis(module, wanted=(cst.Call,))
    for occ in analysis.occurrences:
        qual = analysis.qualname(occ.node.func, occ.scope)
        if qual in distributed.SPAWN or qual in distributed.LAUNCH:
            found = distributed.spawn_call(qual, occ.node)
            count = found[3] if found is not None else None
            return Spawned(ALL_DEVICES if count == distributed.ALL_DEVICES else count)
    return None


def _program(script_path: str, name: str, files_read: dict[str, str | None]) -> str | None:
    """The text of the program a launch line names, beside the script or under the working folder; every file
    looked at goes into `files_read` (digest of its bytes, None when absent)."""
    written = WRITTEN.get()
    for folder in (os.path.dirname(script_path), "."):
        candidate = os.path.normpath(os.path.join(folder, name))
        if os.path.abspath(candidate) in written:
            return written[os.path.abspath(candidate)]
        if os.path.isfile(candidate):
            try:
                data = read_bytes(candidate)
            except SourceError:
                files_read[os.path.abspath(candidate)] = None
                return None
            files_read[os.path.abspath(candidate)] = digest(data)
            try:
                return decode(data).text
            except SourceError:
                return None
        files_read[os.path.abspath(candidate)] = None
    return None


def process_shell(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    result = FileResult(path, old_bytes=data)
    if b"python" not in data.lower() and b"optimum-cli" not in data and MARKER_PREFIX.encode() not in data:
        return result
    source = decode(data)
    text = source.text
    cores = NUM_CORES.search(text)
    lines = text.splitlines(keepends=True)
    policy = Policy(settings, path, rewrite)
    suppressions = line_suppressions(text, "shell")
    out = []
    tpu = drives_tpu(text)  # a TPU launch script (`PJRT_DEVICE=TPU`) keeps its launcher
    for number, line in enumerate(lines, start=1):
        out.append(line if tpu else
                   _launch_line(policy, suppressions, number, lines, cores.group(1) if cores else None, result))
    new_text = "".join(out)
    result.findings += marker_findings(text, path, settings, OTHER_HANDLERS_CODES)
    if rewrite and new_text != text:
        result.new_bytes = source.encode(new_text)
        result.manual = marker_findings(new_text, path, settings, OTHER_HANDLERS_CODES)
    if suppressions is not None:
        result.used_suppressions = suppressions.used
    result.findings.sort(key=lambda f: f.sort_key())
    return result


def _launch_line(policy: Policy, suppressions: LineSuppressions | None, number: int, lines: list[str],
                 cores: str | None, result: FileResult) -> str:
    line = lines[number - 1]
    if line.lstrip().startswith("#"):
        return line
    continued = number > 1 and lines[number - 2].rstrip("\r\n").endswith("\\")  # inside a command: no marker here
    export = _export_command(lines, number) if "optimum-cli" in line and not continued else None
    if export is not None:
        return _optimum_export(policy, suppressions, number, lines, export, result)
    match = LAUNCH.search(line)
    if match is None:
        return line
    program = _program(policy.path, match.group("script"), result.files_read)
    found = spawned(program) if program is not None else None
    if found is None:
        return line
    nprocs = cores if found.nprocs == ALL_DEVICES and cores else found.nprocs
    text = match.group(0)[len(match.group("head")):].strip()
    if nprocs is None:
        return _mark(policy, suppressions, number, lines, match, text, result)
    fixed = f"torchrun --nproc_per_node={nprocs} {match.group('script')}"
    decision = policy.decide("NM240", number, suppressions, {"text": text, "fixed": fixed},
                             marked=lambda: marked_above(lines[:number - 1], "NM240"))
    if decision is None:
        return line
    result.findings.append(decision.finding(policy, number, match.start("python") + 1, end_line=number,
                                            end_col=match.end("script") + 1))
    if not decision.fix:
        return line
    result.applied["NM240"] = result.applied.get("NM240", 0) + 1
    return line[:match.start("python")] + fixed + line[match.end("script"):]


def _mark(policy: Policy, suppressions: LineSuppressions | None, number: int, lines: list[str], match: re.Match,
          text: str, result: FileResult) -> str:
    line = lines[number - 1]
    decision = policy.decide("NM241", number, suppressions, {"text": text},
                             marked=lambda: marked_above(lines[:number - 1], "NM241"))
    if decision is None:
        return line
    result.findings.append(decision.finding(policy, number, match.start("python") + 1, end_line=number,
                                            end_col=match.end("script") + 1))
    if not decision.mark:
        return line
    indent = line[: len(line) - len(line.lstrip())]
    newline = "\r\n" if line.endswith("\r\n") else "\n"
    return f"{indent}{decision.marker}{newline}{line}"


def _export_command(lines: list[str], number: int) -> tuple[int, int, str | None] | None:
    """Where an `optimum-cli export neuron` command starts on line `number` (its words, read with the shell
    lexer, continuation lines included): the span of those three words and its `--task`; None for any other
    command (`optimum-cli export onnx`, `echo optimum-cli export neuron`)."""
    from neuron_migrate.pin.shell import commands, skip_prefixes

    text = lines[number - 1]
    for following in lines[number:]:  # the command's continuation lines
        if not text.rstrip("\r\n").endswith("\\"):
            break
        text += following
    end = len(lines[number - 1])
    for words in commands(text):
        values = [w.value for w in words]
        i = skip_prefixes(values)
        if words[0].start >= end or tuple(os.path.basename(v) for v in values[i:i + 3]) != EXPORT_COMMAND:
            continue
        task = next((v.partition("=")[2] or (values[k + 1] if k + 1 < len(values) else None)
                     for k, v in enumerate(values) if v == "--task" or v.startswith("--task=")), None)
        return words[i].start, words[i + 2].end, task
    return None


def _optimum_export(policy: Policy, suppressions: LineSuppressions | None, number: int, lines: list[str],
                    export: tuple[int, int, str | None], result: FileResult) -> str:
    """NM524 on an `optimum-cli export neuron` command, with the route of the task it exports (its `--task`);
    NM510 where the target keeps the XLA inference path."""
    from neuron_migrate.rules import inference, release

    line = lines[number - 1]
    start, end, task = export
    command = " ".join(EXPORT_COMMAND)
    if release.xla_inference_maintained(policy.settings):
        code, fields = "NM510", {"call": command, "what": "exports a model for the XLA-based stack with optimum-neuron",
                                 **inference.maintained_fields(policy.settings)}
    else:
        route, mark = inference.optimum_route(inference.export_task_class(task) if task else None)
        code, fields = "NM524", {"subject": f"`{command}` exports and compiles", "route": route, "mark": mark,
                                 **inference.maintained_fields(policy.settings)}
    decision = policy.decide(code, number, suppressions, fields, marked=lambda: marked_above(lines[:number - 1], code))
    if decision is None:
        return line
    result.findings.append(decision.finding(policy, number, start + 1, end_line=number, end_col=end + 1))
    if not decision.mark:
        return line
    indent = line[: len(line) - len(line.lstrip())]
    newline = "\r\n" if line.endswith("\r\n") else "\n"
    return f"{indent}{decision.marker}{newline}{line}"
