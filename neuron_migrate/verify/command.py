"""The `verify` command. torch is imported only once the command runs (it is an optional extra)."""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
from pathlib import Path

import click

EXIT_EQUIVALENT, EXIT_DIFFERENT, EXIT_ERROR = 0, 1, 2
INSTALL_HINT = ('neuron-migrate verify needs PyTorch: pip install "neuron-migrate[verify]" '
                '(or pip install torch==2.13.0 next to neuron-migrate)')


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(dir_okay=False), required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--migrated", type=click.Path(dir_okay=False, exists=True),
              help="The migrated script to check (default: migrate a temporary copy of the project).")
@click.option("--reference-python", metavar="PY",
              help="An interpreter with torch_xla: the reference is then the original script under torch_xla "
                   "on the CPU. Default: the migrated script on the plain CPU.")
@click.option("--target", type=click.Choice(["auto", "neuron", "emulated"]), default="auto", show_default=True,
              help="Where the migrated script runs: the real `neuron` device or the emulated one.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="End each run after N optimizer steps (N forward calls for inference).")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes per run (launched with torchrun).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed set in both runs before the script starts.")
@click.option("--rtol", type=float, default=None, help="Relative tolerance (default: by dtype, fp32 tight, bf16 loose).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance (default: by dtype).")
@click.option("--strict", is_flag=True, help="On the emulated device, mixing CPU and neuron tensors is an error.")
@click.option("--timeout", type=float, default=None, help="Seconds each run may take.")
@click.option("--reference-env", "reference_env", multiple=True, metavar="KEY=VALUE",
              help="A variable only the reference run gets (repeatable), e.g. the PYTHONPATH of torch_xla's "
                   "torchvision. Both runs share the rest of the caller's environment.")
@click.option("--target-env", "target_env", multiple=True, metavar="KEY=VALUE",
              help="A variable only the migrated runs get (repeatable).")
@click.option("--skip-no-neuron", is_flag=True,
              help="Do not run the no-Neuron path (the original without torch_xla and the migration without "
                   "Neuron, on plain CPU PyTorch).")
@click.option("--root", type=click.Path(file_okay=False, exists=True),
              help="The project each run copies (default: the nearest folder at or above the script's that holds "
                   "pyproject.toml, setup.py, setup.cfg or .git, else the script's folder).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--quickstart", is_flag=True, help="Only the quickstart device check (a matmul on neuron vs CPU).")
def verify(script, args, migrated, reference_python, target, max_steps, nproc, seed, rtol, atol, strict, timeout,
           reference_env, target_env, skip_no_neuron, root, fmt, quickstart) -> None:
    """Run the original and the migrated SCRIPT side by side and compare what they compute.

    \b
    Arguments after SCRIPT (or after --) go to the script, the same in both runs.
    Exit 0 when equivalent, 1 when not, 2 when a run failed, nothing was comparable, or the input or
    the environment was wrong.
    """
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # torch without numpy, at import
    try:
        import torch  # noqa: F401  (the optional extra)
    except ImportError:
        _error(f"error: {INSTALL_HINT}")
    if quickstart:
        from neuron_migrate.verify.quickstart import quickstart_check

        sys.exit(quickstart_check(target))
    if script is None:
        raise click.UsageError("give the SCRIPT to verify (or --quickstart)")
    from neuron_migrate.verify.session import Options, verify_script
    from neuron_migrate.verify.report import RENDERERS
    from neuron_migrate.verify.runs import VerifyError

    options = Options(args=list(args), migrated=migrated, reference_python=reference_python, target=target,
                      max_steps=max_steps, nproc=nproc, seed=seed, rtol=rtol, atol=atol, strict=strict,
                      timeout=timeout, reference_env=_variables("--reference-env", reference_env),
                      target_env=_variables("--target-env", target_env), no_neuron=not skip_no_neuron,
                      root=root)
    workdir = Path(tempfile.mkdtemp(prefix="neuron-migrate-verify-"))
    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        report = verify_script(Path(script), options, workdir)
    except VerifyError as exc:
        _error(f"{script}: error: {exc}")
    except OSError as exc:  # the environment (a folder that cannot be copied, a full disk): no verdict, exit 2
        _error(f"{script}: error: {_short(exc.strerror or exc)}")
    except Exception as exc:  # neither equivalent (0) nor different (1): an error (2), not a traceback's 1
        _error(f"{script}: error: internal error ({type(exc).__name__}: {_short(exc)}); please report it")
    finally:  # on every exit, Ctrl-C and SIGTERM included: the runs' folders go
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(workdir, ignore_errors=True)
    click.echo(RENDERERS[fmt](report), nl=False)
    sys.exit(report.exit_code)


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _short(what: object, limit: int = 300) -> str:
    text = " ".join(str(what).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def _error(message: str) -> None:
    click.echo(message, err=True)
    sys.exit(EXIT_ERROR)


def _variables(option: str, pairs: tuple[str, ...]) -> dict[str, str]:
    variables = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not key.replace("_", "a").isalnum():
            raise click.BadParameter(f"{pair!r}: give KEY=VALUE, e.g. {option} PYTHONPATH=/opt/xla/vision",
                                     param_hint=option)
        variables[key] = value
    return variables
