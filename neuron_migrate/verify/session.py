"""One verification: decide the programs, run them, compare, and gather the report.

Runs: the reference (the original under torch_xla with --reference-python, else the migration on the plain
CPU) and the target (the migration on the device). With --reference-python the migration also runs on the
plain CPU (the three-way comparison), and with --nproc N the target runs once more as N processes.
Then the no-Neuron path (unless --skip-no-neuron): the original without torch_xla and the migration without
Neuron, both on plain CPU PyTorch in this interpreter (`paths.py`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from neuron_migrate.cli.output import plural
from neuron_migrate.verify import closure, fallbacks, paths, resume, unsharded
from neuron_migrate.verify.compare import (
    Check,
    Comparison,
    compare,
    compare_parameters,
    explain_by_cpu,
    printed_lines,
    ranks_agree,
    same_data,
)
from neuron_migrate.verify.report import EMULATED_TIMING, XLA_TIMING, Report
from neuron_migrate.verify.runs import (
    Migration,
    Program,
    RunResult,
    Staged,
    VerifyError,
    check_reference_python,
    inside,
    migrate_copy,
    native_torch_neuronx,
    project_root,
    run_program,
    target_device,
)


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
    reference_env: dict[str, str] = field(default_factory=dict)
    target_env: dict[str, str] = field(default_factory=dict)
    no_neuron: bool = True  # also run the no-Neuron path
    root: str | None = None  # the project each run copies (default: found from the script, runs.project_root)


def _programs(script: Path, options: Options, workdir: Path, root: Path) -> tuple[list[Program], Migration | None,
                                                                                    list[Program]]:
    """The runs of the Neuron path, the migration, and the two runs of the no-Neuron path."""
    needs_migration = options.migrated is None or options.reference_python is None
    migration = migrate_copy(script, workdir, root) if needs_migration else None
    if migration is not None and migration.errors:
        path, message = migration.errors[0]
        raise VerifyError(f"the migration of a copy failed: {os.path.relpath(path, migration.folder)}: {message}")
    device = target_device(options.target)
    if device == "neuron" and not native_torch_neuronx():
        raise VerifyError("--target neuron needs the native torch-neuronx (2.13 or later) in this environment; "
                          "without it, --target emulated runs on the emulated device")
    if options.migrated:
        given = Path(options.migrated).resolve()
        label, migrated, overlay = f"given migration {options.migrated}", given, None
    else:
        label, migrated, overlay = f"migrated copy of {script.name}", migration.script, migration

    def target(role: str, on: str, nproc: int, env: dict[str, str]) -> Program:
        return Program(role, label, sys.executable, migrated, on, nproc, env, overlay)

    # the no-Neuron path runs in this interpreter, one process (a data-parallel program as one torchrun worker)
    plain = [Program("plain original", f"original {script.name} without torch_xla", sys.executable,
                     script.resolve(), "plain", 1, options.target_env),
             target("plain migration", "plain", 1, options.target_env)] if options.no_neuron else []
    if options.reference_python:
        programs = [Program("reference", f"original {script.name}", options.reference_python, script.resolve(),
                            "xla", 1, options.reference_env),
                    target("cpu", "cpu", 1, options.target_env), target("target", device, 1, options.target_env)]
        if options.nproc > 1:
            programs.append(target("target", device, options.nproc, options.target_env))
        return programs, migration, plain
    if migration is None:
        raise VerifyError("nothing to compare the given migration with")
    if options.nproc > 1 and unsharded.shards([migrated, *(migration.folder / f for f in migration.changed)]):
        # a sharded program: its reference is the unsharded model in one process (unsharded.py)
        reference = Program("reference", f"migrated copy of {script.name}, unsharded", sys.executable,
                            migration.script, "cpu", 1, {**options.target_env, unsharded.ENV: "1"}, migration)
        return [reference, target("target", device, options.nproc, options.target_env)], migration, plain
    reference = Program("reference", f"migrated copy of {script.name}", sys.executable, migration.script, "cpu",
                        options.nproc, options.target_env, migration)
    return [reference, target("target", device, options.nproc, options.target_env)], migration, plain


def _show_original_paths(runs: list[RunResult], copies: list[Path], original: Path) -> None:
    """Compiled functions are named by their file: name the user's file, not the temporary copy."""
    for run in runs:
        for record in run.records:
            for compilation in record.get("compilations", []):
                for copy in copies:
                    compilation["name"] = compilation["name"].replace(str(copy), str(original))


def _printed(reference: RunResult, target: RunResult):
    folders = tuple(str(f.resolve()) for f in (reference.folder, target.folder) if f is not None)
    return printed_lines(reference.stdout, folders), printed_lines(target.stdout, folders)


def _compare(options: Options, programs: list[Program], runs: list[RunResult]) -> Comparison:
    by_name = {p.name: r for p, r in zip(programs, runs)}
    reference = next(r for r in runs if r.program.role == "reference")
    target = next(r for r in runs if r.program.role == "target")
    cross_backend = reference.program.device == "xla" or target.program.device == "neuron"
    if reference.program.nproc < target.program.nproc and target.records:  # the unsharded reference
        return _compare_sharded(options, reference, target, cross_backend)
    main = compare(reference.records, target.records, options.rtol, options.atol, cross_backend,
                   device=target.program.device, printed=_printed(reference, target))
    cpu = by_name.get("cpu")
    if cpu is not None:
        cpu_target = compare(cpu.records, target.records, options.rtol, options.atol, target.program.device == "neuron",
                             printed=_printed(cpu, target))
        xla_cpu = compare(reference.records, cpu.records, options.rtol, options.atol, True,
                          printed=_printed(reference, cpu))
        explain_by_cpu(main, cpu_target, xla_cpu, reference.records + cpu.records)
    parallel = by_name.get(f"target x{options.nproc}") if options.nproc > 1 and cpu is not None else None
    if parallel is not None:
        prefix = f"{options.nproc} processes"
        first = parallel.records[0]
        rank0 = compare_parameters(f"{prefix}, rank 0: final parameters", reference.records[0], first,
                                   options.rtol, options.atol, True)
        if not reference.records[0]["params"]:  # the reference kept its model on the CPU: nothing to compare
            rank0.checks = []
        elif not same_data(reference.records[0], parallel.records):
            rank0.checks = []  # the ranks' agreement below still shows one model
            main.notes.append(f"{prefix}: the ranks trained on other batches than the single process (each its "
                              "shard, as a shuffling DistributedSampler deals them): rank 0's parameters are not "
                              "compared with the reference's; the single process is")
        if cpu is not None and rank0.checks:
            explain_by_cpu(rank0, compare_parameters(rank0.checks[0].name, cpu.records[0], first, options.rtol,
                                                     options.atol, False),
                           compare_parameters(rank0.checks[0].name, reference.records[0], cpu.records[0],
                                              options.rtol, options.atol, True),
                           reference.records + cpu.records)
        main.checks.extend(rank0.checks)
        main.notes.extend(n for n in rank0.notes if n not in main.notes)
        if len(parallel.records) != options.nproc:
            main.checks.append(Check(f"{prefix}: ranks", False, detail=f"{len(parallel.records)} of "
                                                                       f"{options.nproc} ranks wrote a record"))
        else:
            main.checks.append(ranks_agree(f"{prefix}: ranks agree on the final parameters", parallel.records,
                                           options.rtol, options.atol))
    return main


def _compare_sharded(options: Options, reference: RunResult, target: RunResult, cross_backend: bool) -> Comparison:
    """N sharded processes against one unsharded one: rank 0 (its parameters gathered whole) against the
    reference, and every rank ending with the same whole parameters."""
    first = sorted(target.records, key=lambda r: r["meta"]["rank"])
    rank0, sliced = _batch_losses(first)
    main = compare(reference.records, [rank0], options.rtol, options.atol, cross_backend,
                   device=target.program.device, printed=_printed(reference, target))
    prefix = f"{options.nproc} processes"
    for check in main.checks:
        check.name = f"{prefix}, rank 0 against the unsharded reference: {check.name}"
        if sliced and check.name.endswith("loss curve"):
            check.name += " (the mean of the ranks' losses: each trains on its slice of the batch)"
    if len(first) != options.nproc:
        main.checks.append(Check(f"{prefix}: ranks", False,
                                 detail=f"{len(first)} of {options.nproc} ranks wrote a record"))
    else:
        main.checks.append(ranks_agree(f"{prefix}: ranks agree on the gathered parameters", first, options.rtol,
                                       options.atol))
    return main


def _batch_losses(records: list[dict]) -> tuple[dict, bool]:
    """Rank 0's record, its losses replaced by the mean over the ranks where the ranks' losses differ: ranks that
    each train on an equal slice of the batch record their slice's (mean-reduced) loss, and the mean of those is
    the loss of the whole batch, which the unsharded reference computes. Where every rank records the same
    losses (the same batch on each), rank 0's record stands as it is."""
    rank0 = records[0]
    curves = [r["losses"] for r in records]
    if len(records) < 2 or not curves[0] or any(len(c) != len(curves[0]) for c in curves) \
            or all(c == curves[0] for c in curves):
        return rank0, False
    return {**rank0, "losses": [sum(values) / len(values) for values in zip(*curves)]}, True


def _migrated_closure(script: Path, options: Options, migration: Migration | None, root: Path,
                      cwd: Path) -> closure.Closure:
    """The migrated program's own files and what torch_xla they still use; stops (exit 2) when the program
    cannot start without torch_xla and this interpreter has none: every run of it would stop at that import."""
    if options.migrated:
        given = Path(options.migrated).resolve()
        found = closure.closure(given, project_root(given), cwd)
    else:
        assert migration is not None
        where = inside(cwd, root)
        found = closure.closure(migration.script, migration.folder,
                                None if where is None else migration.folder / where)
    blocking = found.blocking()
    if blocking and migration is not None and migration.set_aside and not options.migrated:
        said = migration.set_aside[0]
        message = said.message.replace(f"{migration.folder}{os.sep}", "")  # the copy's paths, as the project's
        raise VerifyError(f"the program was not migrated: {os.path.relpath(said.path, migration.folder)}:"
                          f"{said.line}: {message}; then verify again")
    if blocking:
        what = "the given migration" if options.migrated else "the migration"
        lines = "\n".join(f"  {use}" for use in blocking)
        raise VerifyError(f"{what} cannot start without torch_xla, which this interpreter does not have: "
                          f"{plural(len(blocking), 'import')} of the XLA-based stack run when it starts:\n{lines}\n"
                          "replace them (the TODO(neuron-migrate) marker beside each says how), then verify again")
    return found


def verify_script(script: Path, options: Options, workdir: Path, cwd: Path | None = None) -> Report:
    if not script.is_file():
        raise VerifyError("no such script")
    cwd = cwd or Path.cwd()
    root = project_root(script, Path(options.root) if options.root else None)
    programs, migration, plain = _programs(script, options, workdir, root)
    program_files = _migrated_closure(script, options, migration, root, cwd)  # before anything starts
    if options.reference_python:
        check_reference_python(options.reference_python, options.reference_env)
    # legacy checkpoints the program starts on: the original runs read them as they are, the migrated runs get
    # what the migrated code reads
    checkpoints = resume.find(options.args, cwd, root)
    resume.convert(checkpoints, workdir)
    top = resume.project_top(cwd.resolve(), root)

    def prepare(program: Program, staged: Staged) -> list[str]:
        if program.original:
            return options.args
        return resume.place(checkpoints, program.name, staged.folder, top, workdir, options.args)

    runs, plain_runs = [], []
    for program in programs + plain:
        (plain_runs if any(program is p for p in plain) else runs).append(
            run_program(program, options.args, workdir, cwd, max_steps=options.max_steps, seed=options.seed,
                        strict=options.strict, timeout=options.timeout, root=root, prepare=prepare))
    if migration is not None:
        copies = [migration.folder] + [r.root for r in runs if r.root is not None]
        _show_original_paths(runs, copies, root)
    report = Report(str(script), options.args, runs, migration, closure=program_files, checkpoints=checkpoints)
    if plain_runs:
        report.no_neuron = paths.compare_no_neuron(*plain_runs, options.rtol, options.atol)
        report.notes.extend(report.no_neuron.notes)
    target_run = next(r for r in runs if r.program.role == "target")
    known = fallbacks.known_fallbacks()
    if target_run.records:
        if target_run.program.device == "emulated":
            ops: dict[str, int] = {}
            for record in target_run.records:
                for op, n in record.get("ops", {}).items():
                    ops[op] = ops.get(op, 0) + n
            report.fallbacks = fallbacks.predict(ops, known)
        elif target_run.program.device == "neuron":
            report.fallbacks = fallbacks.observed(target_run.records[0].get("fallback_ops", []), known)
    if not report.failed_runs:
        report.comparison = _compare(options, programs, runs)
        report.notes.extend(report.comparison.notes)
    if programs[0].device == "xla":
        report.notes.append(XLA_TIMING)
    if target_run.program.device == "emulated":
        report.notes.append(EMULATED_TIMING)
        failed_builds = {r.get("emulator_build_error") for r in target_run.records} - {None}
        if failed_builds:
            report.notes.append(f"the Python emulated device ran: the C++ one (real storage) could not be built "
                                f"({min(failed_builds).splitlines()[0][:160]})")
    if options.max_steps is None:
        report.notes.append("runs were not limited: --max-steps N ends each run after N optimizer steps")
    return report
