"""One verification: decide the two programs, run them, compare, and gather the report."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from neuron_migrate.verify import fallbacks
from neuron_migrate.verify.compare import compare
from neuron_migrate.verify.report import EMULATED_TIMING, XLA_TIMING, Report
from neuron_migrate.verify.runs import (Migration, Program, VerifyError, check_reference_python, migrate_copy,
                                        native_torch_neuronx,
                                        run_program, target_device)


@dataclass
class Options:
    args: list[str]
    migrated: str | None = None
    reference_python: str | None = None
    target: str = "auto"
    max_steps: int | None = None
    nproc: int = 1
    seed: int = 0
    rtol: float | None = None
    atol: float | None = None
    strict: bool = False
    timeout: float | None = None


def _programs(script: Path, options: Options, workdir: Path) -> tuple[Program, Program, Migration | None]:
    needs_migration = options.migrated is None or options.reference_python is None
    migration = migrate_copy(script, workdir) if needs_migration else None
    if migration is not None and migration.errors:
        path, message = migration.errors[0]
        raise VerifyError(f"the migration of a copy failed: {path}: {message}")
    if options.reference_python:
        if options.nproc > 1:
            raise VerifyError("the torch_xla reference runs a single process; drop --nproc or --reference-python")
        check_reference_python(options.reference_python)
        reference = Program("reference", f"original {script.name}", options.reference_python, script.resolve(), "xla")
    else:
        reference = Program("reference", f"migrated copy of {script.name}", sys.executable, migration.script, "cpu")
    device = target_device(options.target)
    if device == "neuron" and not native_torch_neuronx():
        raise VerifyError("--target neuron needs the native torch-neuronx (2.13 or later) in this environment; "
                          "without it, --target emulated runs on the emulated device")
    if options.migrated:
        target = Program("target", f"given migration {options.migrated}", sys.executable,
                         Path(options.migrated).resolve(), device)
    else:
        target = Program("target", f"migrated copy of {script.name}", sys.executable, migration.script, device)
    return reference, target, migration


def _show_original_paths(runs, copy: Path, original: Path) -> None:
    """Compiled functions are named by their file: name the user's file, not the temporary copy."""
    for run in runs:
        for record in run.records:
            for compilation in record.get("compilations", []):
                compilation["name"] = compilation["name"].replace(str(copy), str(original))


def verify_script(script: Path, options: Options, workdir: Path) -> Report:
    if not script.is_file():
        raise VerifyError("no such script")
    reference, target, migration = _programs(script, options, workdir)
    runs = [run_program(p, options.args, workdir, nproc=options.nproc, max_steps=options.max_steps,
                        seed=options.seed, strict=options.strict, timeout=options.timeout)
            for p in (reference, target)]
    if migration is not None:
        _show_original_paths(runs, migration.folder, script.resolve().parent)
    report = Report(str(script), options.args, runs, migration)
    known = fallbacks.known_fallbacks()
    target_run = runs[-1]
    if target_run.records:
        if target.device == "emulated":
            ops: dict[str, int] = {}
            for record in target_run.records:
                for op, n in record.get("ops", {}).items():
                    ops[op] = ops.get(op, 0) + n
            report.fallbacks = fallbacks.predict(ops, known)
        elif target.device == "neuron":
            report.fallbacks = fallbacks.observed(target_run.records[0].get("fallback_ops", []), known)
    if not report.failed_runs:
        cross_backend = reference.device == "xla" or target.device == "neuron"
        report.comparison = compare(runs[0].records, target_run.records, options.rtol, options.atol, cross_backend)
    if reference.device == "xla":
        report.notes.append(XLA_TIMING)
    if target.device == "emulated":
        report.notes.append(EMULATED_TIMING)
    if options.max_steps is None:
        report.notes.append("runs were not limited: --max-steps N ends each run after N optimizer steps")
    return report
