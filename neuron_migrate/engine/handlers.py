"""Which functions process which kind of file.

A handler takes (path, data, settings, rewrite) and returns a FileResult: findings always, and `new_bytes`
when the file would change. Several handlers may serve one kind (the Python engine and the setup.py pins,
say): they run in order, each on the bytes the previous one produced, and their findings and counts add up.
Handlers never write; the runner does (atomically). Modules are imported on first use, so start-up stays fast.

Suppression comments serve every handler of a file: a comment is unused (NM901) only when no handler used it.
The Python engine reports its own unused comments (by statement; a comment the setup.py pins used is not
among them); for the other kinds they are found here, once, after every handler ran.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Callable

from neuron_migrate.findings import FileResult
from neuron_migrate.settings import Settings

Handler = Callable[[str, bytes, Settings, bool], FileResult]

HANDLERS: dict[str, list[str]] = {
    "python": ["neuron_migrate.engine.python:process_python", "neuron_migrate.engine.handlers:process_setup_py"],
    "notebook": ["neuron_migrate.files.notebook:process_notebook"],
    "requirements": ["neuron_migrate.pin.requirements:process_requirements"],
    "pyproject": ["neuron_migrate.pin.pyproject:process_pyproject"],
    "lockfile": ["neuron_migrate.pin.lockfile:process_lockfile"],
    "setup-cfg": ["neuron_migrate.pin.setup_cfg:process_setup_cfg"],
    "conda-env": ["neuron_migrate.pin.conda:process_conda_env"],
    "dockerfile": ["neuron_migrate.pin.dockerfile:process_dockerfile", "neuron_migrate.files.envfiles:process_dockerfile"],
    "shell": ["neuron_migrate.pin.shell:process_shell", "neuron_migrate.files.envfiles:process_shell",
              "neuron_migrate.files.launch:process_shell"],
    "accelerate-config": ["neuron_migrate.files.accelerate_config:process_accelerate_config"],
}


@functools.lru_cache(maxsize=None)
def handlers_for(kind: str) -> tuple[Handler, ...]:
    out = []
    for spec in HANDLERS.get(kind, ()):
        module, _, func = spec.partition(":")
        out.append(getattr(importlib.import_module(module), func))
    return tuple(out)


SPHINX_CONFIG = "conf.py"
# the names only a Sphinx configuration sets at module level (with `extensions`)
SPHINX_SETTINGS = frozenset({"html_theme", "templates_path", "source_suffix", "master_doc", "root_doc",
                             "exclude_patterns", "html_static_path", "intersphinx_mapping", "autodoc_default_options",
                             "napoleon_google_docstring", "html_theme_options"})
SPHINX_SKIPPED = ("a Sphinx documentation configuration (`extensions`, `html_theme`, ...): it builds the documentation, "
                  "where its imports name what is documented; nothing in it runs on the device, so it was left alone")


def _sphinx_configuration(data: bytes) -> bool:
    """Whether a `conf.py` is Sphinx's: it assigns `extensions` and another Sphinx setting at module level. Such a
    file runs when the documentation is built (torch_xla's own docs import torch_xla for its `__version__`)."""
    if b"extensions" not in data:
        return False
    import ast

    try:
        module = ast.parse(data)
    except (SyntaxError, ValueError):
        return False
    names = {t.id for node in module.body if isinstance(node, (ast.Assign, ast.AnnAssign))
             for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    return "extensions" in names and bool(names & SPHINX_SETTINGS)


def process_setup_py(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    """The pins of a `setup.py` (pin/setup_py.py), whose modules are imported for a file of that name only: they
    cost every other run 5 ms of start-up."""
    if os.path.basename(path) != "setup.py":
        return FileResult(path, old_bytes=data)
    from neuron_migrate.pin.setup_py import process_setup_py as process

    return process(path, data, settings, rewrite)


def prepare(kinds) -> None:
    """Import (and let load their data, through a module's own `prepare()`) the handlers of `kinds` now, before
    worker processes are forked: they inherit it all instead of each doing it again."""
    for kind in kinds:
        for handler in handlers_for(kind):
            ready = getattr(importlib.import_module(handler.__module__), "prepare", None)
            if ready is not None and ready is not prepare:  # this module's own handlers (process_setup_py) load late
                ready()


def process(path: str, data: bytes, kind: str, settings: Settings, rewrite: bool) -> FileResult | None:
    """Run every handler of `kind` in turn; None when no handler serves the kind."""
    handlers = handlers_for(kind)
    if not handlers:
        return None
    if kind == "python" and os.path.basename(path) == SPHINX_CONFIG and _sphinx_configuration(data):
        return FileResult(path, old_bytes=data, skipped=SPHINX_SKIPPED)
    project = settings.project
    if project is not None and (kind in PROGRAM_KINDS and project.conflict or project.set_aside):
        return _held(path, data, kind, settings, rewrite, project)
    combined = FileResult(path, old_bytes=data)
    current = data
    for handler in handlers:
        result = handler(path, current, settings, rewrite)
        # findings (and the suppressions they used) are placed in the file as it is: after a handler that changed
        # it (a marker inserted above a line), the next one also reads the original, so its lines do not shift and
        # the markers just written are not reported as NM900
        seen = result if current is data or result.error else handler(path, data, settings, rewrite)
        combined.findings.extend(seen.findings)
        combined.manual.extend(result.manual)
        combined.files_read.update(result.files_read)
        combined.used_suppressions |= seen.used_suppressions
        combined.warnings += [w for w in result.warnings if w not in combined.warnings]
        for code, n in result.applied.items():
            combined.applied[code] = combined.applied.get(code, 0) + n
        if result.error:
            combined.error = result.error
            combined.new_bytes = None
            return combined
        if result.changed:
            current = result.new_bytes
    if current != data:
        combined.new_bytes = current
    combined.findings = _unused_suppressions(path, data, kind, settings, combined)
    combined.findings.sort(key=lambda f: f.sort_key())
    return combined


ENGINE_REPORTS_UNUSED = frozenset({"python", "notebook"})
PROGRAM_KINDS = ENGINE_REPORTS_UNUSED
SET_ASIDE_CODE, CONFLICT_CODE = "NM521", "NM522"
# what a file set aside for another platform still reports: the maintained XLA inference path (NM510), Inf1 code
# (NM513), trn1 instance types (NM520)
SET_ASIDE_NOTES = ("NM510", "NM513", "NM520")
# what a program set aside keeps (NM521 says it before naming the way to move it)
# (Neuron 2.30 ended PyTorch/XLA training on Trainium, PyTorch 2.9 the last; XLA inference stays in maintenance on Inf2
# and Trn1 after 2.34 ended it on Trn2 / Trn3)
STAYS = {"tpu": "it stays on torch_xla for TPU", "inf1": "it stays on torch-neuron for Inf1",
         "inf2": "keep it on the XLA stack, whose inference stays in maintenance on Inf2",
         "trn1": "keep it on the XLA stack (its inference stays in maintenance on Trn1; its training ended with "
                 "Neuron 2.29 and PyTorch 2.9)"}


def _held(path: str, data: bytes, kind: str, settings: Settings, rewrite: bool, project) -> FileResult:
    """A file of a program whose target the native backend does not run on (TPU, Inf1, Inf2, Trn1: NM521, and its
    notes for that platform), or whose evidence conflicts (NM522, a marker: nothing else is decided for it). A
    Python file or notebook is decided twice, for its notes and for whether it would report more, on the same
    trees, Python's and LibCST's (`python.SHARED_TREES`)."""
    if kind not in PROGRAM_KINDS:
        return _set_aside(path, data, kind, settings, rewrite, project)
    from neuron_migrate.engine.python import SHARED_TREES, Shared

    shared = SHARED_TREES.set(Shared())
    try:
        return _set_aside(path, data, kind, settings, rewrite, project)
    finally:
        SHARED_TREES.reset(shared)


def _set_aside(path: str, data: bytes, kind: str, settings: Settings, rewrite: bool, project) -> FileResult:
    from dataclasses import replace

    from neuron_migrate.policy import Policy
    from neuron_migrate.project_facts import NAMES
    from neuron_migrate.suppress import line_suppressions

    policy = Policy(settings, path, rewrite)
    if project.conflict:
        code, fields = CONFLICT_CODE, {"evidence": "; ".join(project.conflict)}
        notes: tuple[str, ...] = ()
    else:
        code, fields = SET_ASIDE_CODE, {"target": NAMES[project.target], "evidence": "; ".join(project.evidence[:2]),
                                        "stay": STAYS[project.target]}
        notes = tuple(c for c in SET_ASIDE_NOTES if policy.enabled(c))
    combined = FileResult(path, old_bytes=data)
    if notes:
        from neuron_migrate.engine.notes import NOTES_ONLY

        quiet = replace(settings, select=frozenset(notes), ignore=frozenset(), project=None)
        asked = NOTES_ONLY.set(frozenset(notes))  # the Python engine may decide them on Python's tree
        try:
            for handler in handlers_for(kind):
                result = handler(path, data, quiet, False)
                if result.error:
                    return result
                combined.findings.extend(f for f in result.findings if f.code in notes)
        finally:
            NOTES_ONLY.reset(asked)
    text = data.decode("utf-8", "replace")
    cell = None  # a notebook's finding goes to its first Python cell, whose first line can silence it
    if kind == "notebook":
        from neuron_migrate.files.notebook import first_python_cell

        cell = first_python_cell(path, data)
    suppressions = line_suppressions(cell.text if cell is not None else text, "python") \
        if kind == "python" or cell is not None else None
    # a file without legacy code is held silently where nothing of it would change; a program's entry that would
    # otherwise be migrated for other legacy code (an optimum-neuron install, XLA variables) is told it is held
    told = project.legacy or (code == SET_ASIDE_CODE and project.entry and _would_change(path, data, kind, settings))
    decision = policy.decide(code, 1 if suppressions is not None else None, suppressions, fields) if told else None
    if decision is not None:
        line, col = cell.position(1, 1) if cell is not None else (1, 1)
        combined.findings.append(decision.finding(policy, line, col or 1, cell=cell.index if cell else None))
        if decision.mark and kind == "python" and f"TODO(neuron-migrate {code})" not in text[:4000]:
            newline = "\r\n" if "\r\n" in text[:2000] else "\n"
            at = _header_end(text)
            combined.new_bytes = (text[:at] + decision.marker + newline + text[at:]).encode("utf-8")
            combined.applied[code] = 1
    combined.findings.sort(key=lambda f: f.sort_key())
    return combined


def _would_change(path: str, data: bytes, kind: str, settings: Settings) -> bool:
    """Whether the file, were it not held, would report more than its platform's notes."""
    from dataclasses import replace

    from neuron_migrate.engine.context import PROBE, Reported

    plain = replace(settings, project=None)
    probe = PROBE.set(frozenset(SET_ASIDE_NOTES) | {"NM900"})  # the Python engine stops at its first other finding
    try:
        for handler in handlers_for(kind):
            result = handler(path, data, plain, False)
            if any(f.code not in SET_ASIDE_NOTES and f.code != "NM900" for f in result.findings):
                return True
    except Reported:
        return True
    finally:
        PROBE.reset(probe)
    return False


def _header_end(text: str) -> int:
    """Where a module-level marker goes: after the shebang and encoding lines."""
    at = 0
    for line in text.splitlines(keepends=True)[:2]:
        if line.startswith("#!") or ("coding" in line and line.lstrip().startswith("#")):
            at += len(line)
        else:
            break
    return at


def _unused_suppressions(path: str, data: bytes, kind: str, settings: Settings, combined: FileResult) -> list:
    """The findings with NM901 for every suppression comment no handler of the file used."""
    from neuron_migrate.policy import UNUSED_SUPPRESSION, Policy, unused_suppressions
    from neuron_migrate.suppress import MAY_SUPPRESS, line_suppressions

    findings = combined.findings
    if MAY_SUPPRESS.search(data) is None:
        return findings
    policy = Policy(settings, path, rewrite=False)
    used = combined.used_suppressions
    if kind in ENGINE_REPORTS_UNUSED:
        if not used:
            return findings
        taken = {(line, policy.unused_suppression(code)) for line, code in used}
        return [f for f in findings if f.code != UNUSED_SUPPRESSION or (f.line, f.message) not in taken]
    return findings + unused_suppressions(policy, line_suppressions(data.decode("utf-8-sig", "replace"), kind), used)
