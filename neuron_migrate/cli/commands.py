"""check, rewrite, rules, explain: the commands over Python sources and the catalogue."""

from __future__ import annotations

import re
import sys

import click

from neuron_migrate import catalogue, config
from neuron_migrate.cli import formats as reports
from neuron_migrate.cli.output import (check_summary, finding_line, json_report, library_line, rewrite_summary,
                                       unified_diff)
from neuron_migrate.engine.runner import run, write_results

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _codes(values: tuple[str, ...]) -> frozenset[str]:
    out = set()
    for v in values:
        out.update(c.strip().upper() for c in v.split(",") if c.strip())
    return frozenset(out)


def common_options(f):
    f = click.option("--select", multiple=True, help="Only these rule codes or prefixes (NM1, NM105).")(f)
    f = click.option("--ignore", multiple=True, help="Skip these rule codes or prefixes.")(f)
    f = click.option("--jobs", "-j", type=int, default=None, help="Worker processes (default: all cores).")(f)
    f = click.option("--exclude", multiple=True, help="Gitignore-style patterns of paths to skip.")(f)
    f = click.option("--no-cache", is_flag=True,
                     help="Process every file again instead of reusing results from .neuron_migrate_cache/.")(f)
    f = click.option("--hook", is_flag=True,
                     help="The paths are files from a pre-commit hook: none means nothing to do, missing files "
                     "are skipped, exclusions apply to them.")(f)
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


def _paths(paths: tuple[str, ...], hook: bool, exclude: tuple[str, ...]) -> tuple[str, ...]:
    if hook:
        from neuron_migrate.cli.hook import hook_paths

        return hook_paths(paths, exclude)
    return paths or (".",)


def _settings(paths, select, ignore, exclude, **flags) -> config.Resolved:
    """Settings from `[tool.neuron-migrate]`, overridden by the flags that were given."""
    try:
        return config.resolve(paths, select=config.codes(_codes(select), "--select") if select else None,
                              ignore=config.codes(_codes(ignore), "--ignore") if ignore else None,
                              exclude=tuple(exclude) or None, **flags)
    except config.ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)


ERROR_LINE = re.compile(r"^line (\d+(?::\d+)?): ")


def _report_errors(errors: list[tuple[str, str]]) -> None:
    for path, message in errors:
        m = ERROR_LINE.match(message)
        where = f"{path}:{m.group(1)}" if m else path
        click.echo(f"{where}: error: {message[m.end():] if m else message}", err=True)


@click.command()
@common_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "sarif", "github"]), default="text",
              show_default=True, help="sarif: SARIF 2.1.0 for code scanning; github: workflow annotations.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings (report-only runs).")
@target_options
def check(paths, select, ignore, jobs, exclude, no_cache, hook, fmt, exit_zero, torch, neuron_sdk, instance) -> None:
    """Report legacy idioms and what the native backend does not support; write nothing.

    Exit 0 when clean, 1 when there are findings (0 with --exit-zero), 2 when a file could not be processed.
    The sources of an XLA-stack library (torch_xla, neuronx-distributed, optimum-neuron, ...) are left alone with
    one note per library; notes do not change the exit code.
    """
    resolved = _settings(paths or (".",), select, ignore, exclude, torch=torch, neuron_sdk=neuron_sdk,
                         instance=instance)
    paths = _paths(paths, hook, resolved.exclude)
    # One pass gives the findings and, where SARIF carries them, the fixed files (the findings are the same).
    result = run(paths, resolved.settings, rewrite=fmt == "sarif", jobs=jobs, exclude=resolved.exclude,
                 use_cache=not no_cache)
    findings = sorted(result.findings, key=lambda f: f.sort_key())
    errors = result.errors
    libraries = result.libraries
    if fmt == "json":
        click.echo(json_report(findings, errors, libraries))
    elif fmt == "sarif":
        click.echo(reports.sarif_report(findings, errors, {r.path: r for r in result.changed}, libraries))
    elif fmt == "github":
        click.echo(reports.github_annotations(findings, errors, libraries))
    else:
        for f in findings:
            click.echo(finding_line(f))
        for library in libraries:
            click.echo(library_line(library))
        _report_errors(errors)
        click.echo(check_summary(findings, len(result.results), len(errors), libraries),
                   err=bool(findings or errors))
    sys.exit(EXIT_ERROR if errors else EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


@click.command()
@common_options
@click.option("--diff", "--dry-run", "dry_run", is_flag=True,
              help="Print a unified diff and write nothing (exit 1 when something would change).")
@click.option("--no-compile", is_flag=True, help="Do not insert model.compile(backend=\"neuron\") after placement.")
@click.option("--safe-only", is_flag=True, help="Apply only fixes marked safe.")
@click.option("--device-style", type=click.Choice(["neuron", "accelerator"]), default=None,
              help="neuron (default): write the `neuron` device; accelerator: code that runs on Trainium, GPU and "
              "CPU alike.")
@click.option("--output-dir", type=click.Path(file_okay=False),
              help="Write a migrated copy of the tree to this folder and leave the source alone.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the migration report to FILE.md (a pull-request description) or FILE.json.")
@target_options
def rewrite(paths, select, ignore, jobs, exclude, no_cache, hook, dry_run, no_compile, safe_only, device_style,
            output_dir, report_path, torch, neuron_sdk, instance) -> None:
    """Migrate files in place (or show the diff with --diff, or write a copy with --output-dir)."""
    from neuron_migrate.engine import outdir
    from neuron_migrate.cli import report

    resolved = _settings(paths or (".",), select, ignore, exclude, compile=False if no_compile else None,
                         safe_only=safe_only, device_style=device_style, torch=torch, neuron_sdk=neuron_sdk,
                         instance=instance)
    paths = _paths(paths, hook, resolved.exclude)
    tree = None
    if output_dir and not dry_run:
        try:
            tree = outdir.plan(paths, output_dir)
        except outdir.OutputDirError as exc:
            click.echo(f"error: --output-dir: {exc}", err=True)
            sys.exit(EXIT_ERROR)
    result = run(paths, resolved.settings, rewrite=True, jobs=jobs, exclude=resolved.exclude, use_cache=not no_cache)
    show_or_write(result, dry_run, write=(lambda r: outdir.write_tree(tree, r)) if tree is not None else write_results)
    if report_path:
        mode = "dry run" if dry_run else f"copy in {output_dir}" if tree is not None else "in place"
        report.write(report_path, report.build(result, mode))
    exit_after_rewrite(result, dry_run)


def show_or_write(result, dry_run: bool, write=write_results) -> None:
    """The diff (dry run) or the writes, then the errors and the summary (shared by rewrite and pin)."""
    if dry_run:
        for r in result.changed:
            click.echo(unified_diff(r), nl=False)
    else:
        try:
            write(result)
        except KeyboardInterrupt as exc:
            from neuron_migrate.engine.runner import Interrupted

            raise exc if isinstance(exc, Interrupted) else Interrupted(None) from None
    _report_errors(result.errors)
    for line in rewrite_summary(result.results, dry_run, result.libraries):
        click.echo(line, err=dry_run)


def exit_after_rewrite(result, dry_run: bool) -> None:
    if result.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if dry_run and result.changed else EXIT_CLEAN)


@click.command(name="rules")
@click.option("--markdown", is_flag=True, help="Print the rules reference (docs/rules.md).")
def rules(markdown: bool) -> None:
    """List every rule."""
    if markdown:
        click.echo(catalogue.rules_markdown(), nl=False)
        return
    for info in catalogue.catalogue().values():
        click.echo(f"{info.code}  {info.name:<32} {info.fix.value:<7} {info.summary.strip()}")


@click.command()
@click.argument("code")
def explain(code: str) -> None:
    """Print the documentation of one rule (e.g. NM103)."""
    info = catalogue.catalogue().get(code.upper())
    if info is None:
        raise click.BadParameter(f"no rule {code}; `neuron-migrate rules` lists them", param_hint="CODE")
    click.echo(catalogue.explain(info))
