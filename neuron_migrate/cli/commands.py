"""check, rewrite, rules, explain: the commands over Python sources and the catalogue."""

from __future__ import annotations

import os
import re
import sys
import textwrap
from typing import Callable, NoReturn

import click

from neuron_migrate import catalogue, config
from neuron_migrate.cli import HELP_WIDTH
from neuron_migrate.cli import formats as reports
from neuron_migrate.cli.output import (check_summary, code_frame, color_diff, finding_line, library_line, plural,
                                       rewrite_summary, source_lines, statistics as stats_lines, statistics_json,
                                       unified_diff)
from neuron_migrate.cli.terminal import COLOR_CHOICES, PLAIN, style_for
from neuron_migrate.engine import handlers, replay
from neuron_migrate.engine.discover import kind_of
from neuron_migrate.engine.runner import run, run_bytes, write_results
from neuron_migrate.engine.sources import write_atomic

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


REPORT_FORMATS = {".md": "markdown", ".markdown": "markdown", ".json": "json"}
OUTPUT_FORMATS = ("full", "concise", "json", "sarif", "github")
STDIN = "-"


def _codes(values: tuple[str, ...]) -> frozenset[str]:
    out = set()
    for v in values:
        out.update(c.strip().upper() for c in v.split(",") if c.strip())
    return frozenset(out)


def _shard(ctx, param, value):
    if value is None:
        return None
    from neuron_migrate.engine.shards import Shard, ShardError

    try:
        return Shard.parse(value)
    except ShardError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def shard_option(f):
    return click.option("--shard", callback=_shard, default=None, metavar="K/N",
                        help="Process only shard K of N (1 <= K <= N) of the files found, for a CI matrix of N jobs: "
                        "a file's shard comes from a hash of its path in the project, so N jobs cover the tree "
                        "once; `neuron-migrate merge` joins their JSON or SARIF reports.")(f)


def common_options(f):
    f = shard_option(f)
    f = click.option("--select", multiple=True, metavar="CODES",
                     help="Only these rule codes or prefixes: `--select NM1,NM301` or `--select NM1 "
                     "--select NM301`.")(f)
    f = click.option("--ignore", multiple=True, metavar="CODES",
                     help="Skip these rule codes or prefixes (comma-separated or repeated).")(f)
    f = click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                     help="Worker processes, 1 or more (default: all cores).")(f)
    f = click.option("--exclude", multiple=True, help="Gitignore-style patterns of paths to skip.")(f)
    f = click.option("--no-cache", is_flag=True,
                     help="Process every file again instead of reusing results from .neuron_migrate_cache/.")(f)
    f = click.option("--hook", is_flag=True,
                     help="The paths are files from a pre-commit hook: none means nothing to do, missing files "
                     "are skipped, exclusions apply to them.")(f)
    f = click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                     help="Settings from this file (a pyproject.toml with [tool.neuron-migrate], or a TOML file "
                     "with the keys at its top level) instead of the pyproject.toml found from the paths.")(f)
    f = click.option("--stdin-filename", default=None, metavar="NAME",
                     help="Read the source from standard input (also `-` as the path) and treat it as the file "
                     "NAME: its kind, its settings, its name in the output.")(f)
    f = click.option("--quiet", "-q", is_flag=True, help="Print findings, diffs and errors only: no summary.")(f)
    f = click.option("--color", type=click.Choice(COLOR_CHOICES), default="auto", show_default=True,
                     help="Colour the output: auto colours a terminal (not a pipe, not with NO_COLOR set).")(f)
    f = click.argument("paths", nargs=-1, type=click.Path())(f)
    return f


def target_options(f):
    """--torch / --neuron-sdk / --instance: the row of the release matrix and the instance the advice is for."""
    from neuron_migrate.pin.matrix import matrix

    mx = matrix()
    f = click.option("--instance", type=click.Choice(mx.instances), default=None,
                     help=f"Target instance (default {mx.default_instance}); findings about TorchAO and the XLA "
                     "inference path depend on it.")(f)
    f = click.option("--neuron-sdk", "neuron_sdk", type=click.Choice(mx.sdk_names), default=None,
                     help=f"Target Neuron release (default: the newest, {mx.newest.sdk}).")(f)
    f = click.option("--torch", "torch", type=click.Choice(mx.torch_versions), default=None,
                     help=f"PyTorch version of the torch-neuronx family (default {mx.default}).")(f)
    return f


def unsafe_fixes_option(f):
    """--unsafe-fixes / --no-unsafe-fixes (ruff's options): whether the fixes the catalogue marks unsafe are made
    (and `check` counts them fixable); unset: `unsafe-fixes` in [tool.neuron-migrate], false by default."""
    return click.option("--unsafe-fixes/--no-unsafe-fixes", "unsafe_fixes", default=None,
                        help="Also make the fixes marked unsafe (they change behaviour in ways to review: "
                        "`neuron-migrate rules` lists them); --no-unsafe-fixes overrides `unsafe-fixes = true` in "
                        "[tool.neuron-migrate]. Default: safe fixes only.")(f)


def _paths(paths: tuple[str, ...], hook: bool, exclude: tuple[str, ...]) -> tuple[str, ...]:
    if hook:
        from neuron_migrate.cli.hook import hook_paths

        return hook_paths(paths, exclude)
    return paths or (".",)


def _settings(paths, select, ignore, exclude, **flags) -> config.Resolved:
    """Settings from `[tool.neuron-migrate]` (or the `--config` file), overridden by the flags that were given."""
    try:
        resolved = config.resolve(paths, select=config.codes(_codes(select), "--select") if select else None,
                                  ignore=config.codes(_codes(ignore), "--ignore") if ignore else None,
                                  exclude=tuple(exclude) or None, **flags)
    except config.ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    for warning in resolved.warnings:
        click.echo(f"warning: {warning}", err=True)
    return resolved


def _usage(message: str) -> NoReturn:
    raise click.UsageError(message)


def _stdin_mode(paths: tuple[str, ...], stdin_filename: str | None, hook: bool) -> bool:
    """Whether the source comes from standard input; refuses `-` mixed with paths or with --hook."""
    wants = STDIN in paths or (stdin_filename is not None and not paths)
    if not wants:
        if stdin_filename is not None:
            _usage("--stdin-filename names the source read from standard input; give `-` (or no path) instead "
                   f"of {' '.join(paths)}")
        return False
    if paths not in ((), (STDIN,)):
        _usage("`-` (standard input) cannot be combined with other paths; give one or the other")
    if hook:
        _usage("--hook takes the file names pre-commit passes, not standard input")
    return True


def _refuse_shard_of_stdin(shard, from_stdin: bool) -> None:
    if shard is not None and from_stdin:
        _usage("--shard splits the files found under the paths; standard input is one source, give paths instead")


def _refuse_codes_as_paths(paths: tuple[str, ...]) -> None:
    """`--select NM1 NM2` makes NM2 a path: say so instead of "no such file"."""
    for p in paths:
        if p != STDIN and config.CODE_OR_PREFIX.match(p.upper()) and not os.path.lexists(p):
            _usage(f"{p!r} is not a file or folder but looks like a rule code; to give several codes write "
                   f"`--select NM1,{p.upper()}` or repeat the option: `--select NM1 --select {p.upper()}`")


def _read_stdin(stdin_filename: str | None) -> tuple[str, bytes, str]:
    """(the name shown, the bytes, the kind) of the source on standard input; Python when the name says nothing."""
    name = stdin_filename or STDIN
    data = sys.stdin.buffer.read()
    kind = (kind_of(name) if stdin_filename else None) or "python"
    if kind not in handlers.HANDLERS:
        kind = "python"
    return name, data, kind


ERROR_LINE = re.compile(r"^line (\d+(?::\d+)?): ")


def _report_errors(errors: list[tuple[str, str]], warnings: list[tuple[str, str]] = (),
                   log: list[str] | None = None) -> None:
    """On standard error (and in `log`, when given)."""
    lines = []
    for path, message in errors:
        m = ERROR_LINE.match(message)
        where = f"{path}:{m.group(1)}" if m else path
        lines.append(f"{where}: error: {message[m.end():] if m else message}")
    lines += [f"{path}: warning: {message}" for path, message in warnings]
    for line in lines:
        click.echo(line, err=True)
        if log is not None:
            log.append(line + "\n")


class Output:
    """Where the findings, the diff or a machine format go: stdout, or the --output-file (never coloured)."""

    def __init__(self, output_file: str | None, color: str, log: list[str] | None = None) -> None:
        self.output_file = output_file
        self.chunks: list[str] = []
        self.style = PLAIN if output_file else style_for(color, sys.stdout)
        self.log = log  # what went to stdout, also kept here (engine/replay.py)

    def echo(self, text: str = "", nl: bool = True) -> None:
        if self.output_file is None:
            click.echo(text, nl=nl, color=self.style.color or None)
            if self.log is not None:
                self.log.append(text + ("\n" if nl else ""))
        else:
            self.chunks.append(text + ("\n" if nl else ""))

    def close(self) -> None:
        if self.output_file is None:
            return
        try:
            write_atomic(self.output_file, "".join(self.chunks).encode("utf-8"))
        except OSError as exc:
            click.echo(f"error: --output-file {self.output_file}: {exc.strerror or exc}", err=True)
            sys.exit(EXIT_ERROR)


@click.command()
@common_options
@click.option("--output-format", "--format", "fmt", type=click.Choice([*OUTPUT_FORMATS, "text"]), default="full",
              show_default=True,
              help="full: each finding with a code frame; concise: one line each; json (with severity, link and "
              "fix); sarif: SARIF 2.1.0 for code scanning; github: workflow annotations.")
@click.option("--statistics", is_flag=True, help="Print how many findings each rule code has, not the findings.")
@click.option("--output-file", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the findings (in the chosen format) to this file instead of standard output.")
@click.option("--add-noqa", is_flag=True,
              help="Add a `# noqa: NMxxx` comment for every current finding (adopting the checks on a big "
              "repository: new code only is held to them), then report what is left.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings (report-only runs).")
@click.option("--show-project", is_flag=True,
              help="Print the programs found (entry points), the files each reaches and each one's target with the "
              "evidence it was read from, then the findings: why a file was or was not migrated.")
@click.option("--fix", "fix", is_flag=True, hidden=True)  # ruff's habit: say where fixes are made
@unsafe_fixes_option
@target_options
def check(paths, select, ignore, jobs, exclude, no_cache, hook, config_file, stdin_filename, quiet, color, shard,
          fmt, statistics, output_file, add_noqa, exit_zero, show_project, fix, unsafe_fixes, torch, neuron_sdk,
          instance) -> None:
    """Report legacy idioms and what the native backend does not support; write nothing.

    Exit 0 when clean, 1 when there are findings (0 with --exit-zero), 2 when a file could not be processed.
    The sources of an XLA-stack library (torch_xla, neuronx-distributed, optimum-neuron, ...) are left alone with
    one note per library; notes do not change the exit code. `[*]` marks the findings `neuron-migrate rewrite` fixes,
    `[~]` those whose fix is unsafe and made only with `rewrite --unsafe-fixes`.
    """
    if fix:
        _usage("check only reports; `neuron-migrate rewrite PATHS` makes the fixes (`rewrite --diff PATHS` shows "
               "them first)")
    fmt = "full" if fmt == "text" else fmt
    from_stdin = _stdin_mode(paths, stdin_filename, hook)
    _refuse_codes_as_paths(paths)
    if statistics and fmt in ("sarif", "github"):
        _usage(f"--statistics prints counts, which --output-format {fmt} cannot carry; use full, concise or json")
    if add_noqa and from_stdin:
        _usage("--add-noqa edits files; it cannot edit standard input")
    _refuse_shard_of_stdin(shard, from_stdin)
    # A run the next one may replay (engine/replay.py): what it prints stands for what it looked at
    logs = ([], []) if replay.ARGV is not None and not (no_cache or from_stdin or add_noqa or show_project
                                                        or output_file) else None
    if logs is not None:
        replay.start(replay.ARGV)
        click.get_current_context().call_on_close(replay.stop)  # however the command ends
    where = (stdin_filename or ".",) if from_stdin else (paths or (".",))
    resolved = _settings(where, select, ignore, exclude, torch=torch, neuron_sdk=neuron_sdk, instance=instance,
                         unsafe_fixes=unsafe_fixes, config_file=config_file)
    if resolved.warnings:
        replay.spoil()  # told on standard error before the findings: a replay would drop them
    # One pass gives the findings and, where JSON and SARIF carry them, the fixed files (the findings are the same).
    rewrite = fmt in ("sarif", "json") and not statistics
    known: dict[str, bytes] = {}
    if from_stdin:
        name, data, kind = _read_stdin(stdin_filename)
        known[name] = data
        result = run_bytes(name, data, kind, resolved.settings, rewrite)
    else:
        paths = _paths(paths, hook, resolved.exclude)
        # a fix in a JSON or SARIF report is applied alone: it keeps its own copy of a helper (engine/shared.py)
        result = run(paths, resolved.settings, rewrite=rewrite, jobs=jobs, exclude=resolved.exclude,
                     use_cache=not no_cache, shard=shard, model=show_project, shared_helpers=not rewrite)
    findings = sorted(result.findings, key=lambda f: f.sort_key())
    errors, warnings = result.errors, result.warnings
    libraries = getattr(result, "libraries", ())
    if show_project and result.project is not None:
        click.echo(result.project.report() or "No programs found.", err=fmt not in ("full", "concise"))
        click.echo(err=fmt not in ("full", "concise"))
    if add_noqa:
        def again() -> list:
            return run(paths, resolved.settings, rewrite=False, jobs=jobs, exclude=resolved.exclude, use_cache=False,
                       shard=shard).findings

        _add_noqa(findings, errors, warnings, quiet, again)
    known.update((r.path, r.old_bytes) for r in result.results if r.old_bytes is not None)
    sources = reports.Sources(known)
    out = Output(output_file, color, logs[0] if logs is not None else None)
    style = out.style
    if statistics:
        if fmt == "json":
            out.echo(statistics_json(findings))
        else:
            for line in stats_lines(findings, style):
                out.echo(line)
    elif fmt == "json":
        out.echo(reports.json_report(findings, errors, {r.path: r for r in result.changed}, sources, warnings,
                                     libraries, shard=shard))
    elif fmt == "sarif":
        out.echo(reports.sarif_report(findings, errors, {r.path: r for r in result.changed}, sources, libraries,
                                      shard=shard))
    elif fmt == "github":
        out.echo(reports.github_annotations(findings, errors, sources, libraries))
    else:
        lines: dict[tuple[str, int | None], list[str] | None] = {}  # the source lines of each file (or cell)
        for f in findings:  # one write a finding, its frame and the blank line after it
            block = [finding_line(f, style)]
            if fmt == "full":
                if (f.path, f.cell) not in lines:
                    lines[f.path, f.cell] = source_lines(sources.data(f.path), f.cell)
                block += code_frame(f, lines[f.path, f.cell], style)
                block.append("")
            out.echo("\n".join(block))
    for library in libraries if fmt in ("full", "concise") and not statistics else ():
        out.echo(library_line(library))
    text = fmt in ("full", "concise")
    summary = check_summary(findings, len(result.results), len(errors), libraries, resolved.settings.unsafe_fixes)
    if text and not quiet:  # after the findings, where ruff prints `Found N errors.` (the --output-file too)
        out.echo(summary)
    out.close()
    if text or statistics:
        _report_errors(errors, warnings, logs[1] if logs is not None else None)
        if statistics and fmt == "json" and not quiet:
            click.echo(summary, err=True)
            if logs is not None:
                logs[1].append(summary + "\n")
    code = EXIT_ERROR if errors else EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN
    if logs is not None:
        replay.noted(path for r in result.results for path in (r.path, *r.files_read))
        replay.finish("".join(logs[0]), "".join(logs[1]), code)
    sys.exit(code)


NOQA_ROUNDS = 5  # silencing one finding can bring out another (NM209 for a silenced NM106) or end one (NM190)


def _add_noqa(findings, errors, warnings, quiet: bool, again) -> NoReturn:
    """Add the comments, then check again until the result holds: the findings that silencing others brought
    out get theirs too, and a code added for a finding that no longer comes (NM190 of an import that stays used
    once the fixes are silenced) is taken off again. So `check` exits 0 after it, and a second run adds
    nothing."""
    from neuron_migrate.cli.noqa import UNUSED_CODE, add_noqa, remove_noqa
    from neuron_migrate.engine.sources import SourceError, read_bytes

    def read(path: str) -> bytes | None:
        try:
            return read_bytes(path)
        except SourceError:
            return None

    mine: set[tuple[str, int, str]] = set()
    files: set[str] = set()
    for _ in range(NOQA_ROUNDS):
        added = add_noqa(findings, read, kind_of)
        mine |= added.codes
        files.update(added.files)
        stale = [(f.path, f.line, code) for f in findings if f.code == UNUSED_CODE
                 and (code := _suppressed_code(f)) is not None and (f.path, f.line, code) in mine]
        removed = remove_noqa(stale, read)
        mine -= set(stale)
        if not added.comments and not removed:
            break
        findings = again()
    left = added.left
    _report_errors(errors, warnings)
    for f, why in left:
        click.echo(f"{finding_line(f)}  (no comment added: {why})", err=True)
    if not quiet:
        click.echo(f"Added {plural(len(mine), 'noqa code')} in {plural(len({p for p, _, _ in mine}), 'file')}; "
                   f"{plural(len(left), 'finding')} left as they were.")
    sys.exit(EXIT_ERROR if errors else EXIT_FINDINGS if left else EXIT_CLEAN)


def _suppressed_code(finding) -> str | None:
    """The code an NM901 finding says a suppression names to no purpose."""
    found = re.search(r"\bNM\d{3}\b", finding.message)
    return found.group(0) if found else None


def _report_format(report_path: str | None, report_format: str | None) -> str | None:
    if report_path is None:
        if report_format is not None:
            _usage("--report-format needs --report FILE")
        return None
    if report_format is not None:
        return report_format
    suffix = os.path.splitext(report_path)[1].lower()
    if suffix not in REPORT_FORMATS:
        _usage(f"--report {report_path}: the format is not known from the name; name the file .md or .json, "
               "or give --report-format markdown|json")
    return REPORT_FORMATS[suffix]


@click.command()
@common_options
@click.option("--diff", "--dry-run", "dry_run", is_flag=True,
              help="Print a unified diff and write nothing (exit 1 when something would change).")
@click.option("--no-compile", is_flag=True, help="Do not insert model.compile(backend=\"neuron\") after placement.")
@unsafe_fixes_option
@click.option("--safe-only", is_flag=True, hidden=True)  # deprecated: safe fixes only is the default now
@click.option("--device-style", type=click.Choice(["neuron", "accelerator"]), default=None,
              help="neuron (default): write the `neuron` device; accelerator: code that runs on Trainium, GPU and "
              "CPU alike.")
@click.option("--output-dir", type=click.Path(file_okay=False),
              help="Write a migrated copy of the tree to this folder and leave the source alone.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the migration report to FILE.md (a pull-request description) or FILE.json.")
@click.option("--report-format", type=click.Choice(["markdown", "json"]), default=None,
              help="The --report format when the file name does not end in .md or .json.")
@click.option("--exit-zero", is_flag=True,
              help="Exit 0 even when items are left for a person (markers, held-back unsafe fixes, notes).")
@click.option("--exit-non-zero-on-fix", is_flag=True,
              help="Exit 1 when files were rewritten too, even with nothing left (ruff's option, for CI).")
@target_options
def rewrite(paths, select, ignore, jobs, exclude, no_cache, hook, config_file, stdin_filename, quiet, color, shard,
            dry_run, no_compile, unsafe_fixes, safe_only, device_style, output_dir, report_path, report_format,
            exit_zero, exit_non_zero_on_fix, torch, neuron_sdk, instance) -> None:
    """Migrate files in place (or show the diff with --diff, or write a copy with --output-dir).

    With `-` (or --stdin-filename) the source is read from standard input and the migrated source is printed
    (the diff with --diff).

    Exit 0 when nothing is left for a person, 1 when something is (a marker, an unsafe fix held back, a note
    `check` reports: as ruff's `--fix` exits 1 while findings remain; 0 with --exit-zero), 2 when a file could
    not be processed. With --diff: 1 when something would change.
    """
    from neuron_migrate.engine import outdir
    from neuron_migrate.cli import report

    from_stdin = _stdin_mode(paths, stdin_filename, hook)
    _refuse_codes_as_paths(paths)
    if dry_run and output_dir:
        _usage("--diff writes nothing, so --output-dir would be ignored; give one or the other")
    if from_stdin and output_dir:
        _usage("--output-dir copies a tree of files; standard input has none (the migrated source is printed)")
    _refuse_shard_of_stdin(shard, from_stdin)
    if shard is not None and output_dir:
        _usage("--output-dir writes a copy of the whole tree, which one shard does not migrate; give --output-dir "
               "without --shard, or rewrite each shard in place")
    if safe_only and unsafe_fixes:
        _usage("--safe-only (the default now, kept for old scripts) and --unsafe-fixes contradict each other; "
               "give --unsafe-fixes alone")
    fmt = _report_format(report_path, report_format)
    where = (stdin_filename or ".",) if from_stdin else (paths or (".",))
    resolved = _settings(where, select, ignore, exclude, compile=False if no_compile else None,
                         unsafe_fixes=False if safe_only else unsafe_fixes, device_style=device_style, torch=torch,
                         neuron_sdk=neuron_sdk,
                         instance=instance, config_file=config_file)
    style = style_for(color, sys.stdout)
    if from_stdin:
        name, data, kind = _read_stdin(stdin_filename)
        result = run_bytes(name, data, kind, resolved.settings, rewrite=True)
        if dry_run:
            show_or_write(result, True, style=style, quiet=quiet)
        else:
            changed = result.changed
            sys.stdout.buffer.write(changed[0].new_bytes if changed else data)
            sys.stdout.flush()
            _report_errors(result.errors)
            if not quiet:
                for line in rewrite_summary(result.results, True):
                    click.echo(line, err=True)
        if report_path:
            report.write(report_path, report.build(result, "standard input"), fmt)
        exit_after_rewrite(result, dry_run, exit_zero, exit_non_zero_on_fix)
    paths = _paths(paths, hook, resolved.exclude)
    tree = None
    if output_dir:
        try:
            tree = outdir.plan(paths, output_dir)
        except outdir.OutputDirError as exc:
            click.echo(f"error: --output-dir: {exc}", err=True)
            sys.exit(EXIT_ERROR)
    result = run(paths, resolved.settings, rewrite=True, jobs=jobs, exclude=resolved.exclude, use_cache=not no_cache,
                 shard=shard)

    def recheck() -> int:
        """The unsafe fixes a check of the files as this run left them holds back: a safe fix can replace the
        idiom an unsafe fix is found by (NM107's compile finds the model by its placement on the XLA device)."""
        again = run(paths, resolved.settings, rewrite=False, jobs=jobs, exclude=resolved.exclude,
                    use_cache=not no_cache, shard=shard, progress=False, earlier=result)
        return sum(1 for f in again.findings if f.held_back)

    show_or_write(result, dry_run, write=(lambda r: outdir.write_tree(tree, r)) if tree is not None else write_results,
                  style=style, quiet=quiet, recheck=recheck if tree is None else None,
                  where=(lambda path: str(tree.destination(path))) if tree is not None else None)
    if report_path:
        mode = "dry run" if dry_run else f"copy in {output_dir}" if tree is not None else "in place"
        report.write(report_path, report.build(result, mode), fmt)
    exit_after_rewrite(result, dry_run, exit_zero, exit_non_zero_on_fix)


def show_or_write(result, dry_run: bool, write=write_results, style=PLAIN, quiet: bool = False,
                  command: str = "rewrite", recheck: Callable[[], int] | None = None,
                  where: Callable[[str], str] | None = None) -> None:
    """The diff (dry run) or the writes, then the errors and the summary (shared by rewrite and pin). `recheck`:
    after files were written while unsafe fixes were held back, how many a later --unsafe-fixes run still finds
    (the summary says so when it is fewer)."""
    if dry_run:
        for r in result.changed:
            click.echo(color_diff(unified_diff(r), style), nl=False, color=style.color or None)
    else:
        try:
            write(result)
        except KeyboardInterrupt as exc:
            from neuron_migrate.engine.runner import Interrupted

            raise exc if isinstance(exc, Interrupted) else Interrupted(None) from None
    _report_errors(result.errors, getattr(result, "warnings", ()))
    if quiet:
        return
    later = None
    if recheck is not None and not dry_run and result.changed and any(f.held_back for f in result.findings):
        later = recheck()
    for line in rewrite_summary(result.results, dry_run, getattr(result, "libraries", ()), command, later, where):
        click.echo(line, err=dry_run)


def exit_after_rewrite(result, dry_run: bool, exit_zero: bool = True, on_fix: bool = False) -> NoReturn:
    """2 on an error; with --diff, 1 when something would change; else 1 when items are left for a person (the
    summary's, as ruff's `--fix` exits 1 while findings remain) unless `exit_zero`, or when `on_fix` and files
    changed."""
    if result.errors:
        sys.exit(EXIT_ERROR)
    if dry_run:
        sys.exit(EXIT_FINDINGS if result.changed else EXIT_CLEAN)
    from neuron_migrate.cli.report import left_for_a_person

    left = left_for_a_person(result.results)
    remaining = bool(left.markers or left.other) and not exit_zero
    sys.exit(EXIT_FINDINGS if remaining or (on_fix and result.changed) else EXIT_CLEAN)


@click.command(name="rules")
@click.option("--markdown", is_flag=True, help="Print the rules reference (docs/rules.md).")
def rules(markdown: bool) -> None:
    """List every rule."""
    if markdown:
        click.echo(catalogue.rules_markdown(), nl=False)
        return
    infos = list(catalogue.catalogue().values())
    name_width = max(len(i.name) for i in infos)
    fix_width = max(len(i.fix.value) for i in infos)
    indent = " " * (len(infos[0].code) + 2 + name_width + 2 + fix_width + 2)
    for info in infos:
        head = f"{info.code}  {info.name:<{name_width}}  {info.fix.value:<{fix_width}}  "
        summary = " ".join(info.summary.split())
        lines = textwrap.wrap(summary, width=max(30, HELP_WIDTH - len(indent)), break_on_hyphens=False) or [""]
        click.echo(head + lines[0])
        for line in lines[1:]:
            click.echo(indent + line)


@click.command()
@click.argument("code")
def explain(code: str) -> None:
    """Print the documentation of one rule, such as NM103."""
    info = catalogue.catalogue().get(code.upper())
    if info is None:
        raise click.BadParameter(f"no rule {code}; `neuron-migrate rules` lists them", param_hint="CODE")
    click.echo(catalogue.explain(info))
