"""The `neuron-migrate` command line.

Sub-commands that need heavy imports (verify and checkpoint need torch) live in their own modules and are loaded only
when called, so `check`, `rewrite` and `pin` start fast and never import torch.
"""

from __future__ import annotations

import importlib
import re
import signal
import sys
import threading

import click

from neuron_migrate import __version__

HELP_WIDTH = 100  # help texts and tables fit this many columns
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)\.(?=\s|$)")

# name -> "module:attribute" of a click command, imported on first use.
LAZY_COMMANDS: dict[str, str] = {
    "check": "neuron_migrate.cli.commands:check",
    "rewrite": "neuron_migrate.cli.commands:rewrite",
    "rules": "neuron_migrate.cli.commands:rules",
    "explain": "neuron_migrate.cli.commands:explain",
    "merge": "neuron_migrate.cli.merge:merge",
    "pin": "neuron_migrate.pin.command:pin",
    "doctor": "neuron_migrate.cli.doctor:doctor",
    "verify": "neuron_migrate.verify.command:verify",
    "checkpoint": "neuron_migrate.checkpoint.command:checkpoint",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            module, _, attr = LAZY_COMMANDS[cmd_name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context):
        """Ctrl-C (or SIGTERM while files are written) ends the command with one line saying what was written,
        and exit code 128 + the signal's number (130 for Ctrl-C), not click's "Aborted!" and 1 (findings)."""
        runner = sys.modules.get("neuron_migrate.engine.runner")
        if runner is not None:
            runner.files_written = 0  # a command run before in this process (tests) wrote those
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            runner = sys.modules.get("neuron_migrate.engine.runner")
            # outside the writes (the summary printing): the files this command wrote so far
            written = runner.files_written if runner is not None else 0
            signum = signal.SIGINT
            if runner is not None and isinstance(exc, runner.Interrupted):
                written, signum = exc.written, exc.signum
            if written is None:
                what = "every file is either as it was or fully written"
            else:
                what = f"{written} file{'s' if written != 1 else ''} written, the others left as they were" \
                    if written else "no file was written"
            click.echo(f"Interrupted: {what}.", err=True)
            ctx.exit(128 + signum)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with the whole first sentence of its help (wrapped), not click's cut at 45 characters or
        at the first full stop (which `e.g.` has)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.short_help or first_sentence(cmd.help or "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def first_sentence(text: str) -> str:
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    m = SENTENCE_END.search(paragraph)
    return paragraph[: m.end()] if m else paragraph


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": HELP_WIDTH})
@click.version_option(__version__, prog_name="neuron-migrate")
def main() -> None:
    """Migrate torch_xla / XLA-based torch-neuronx code to the native PyTorch `neuron` device.

    \b
    Start with:  neuron-migrate rewrite --diff src/    (review, writes nothing)
    Then:        neuron-migrate rewrite src/           (apply)
                 neuron-migrate check src/             (what is left; what the native backend lacks)
    """


def entry() -> None:
    """The `neuron-migrate` command and `python -m neuron_migrate`: the command line, then an exit Ctrl-C cannot
    spoil. Once the command has said all it has to say (or was interrupted, and said so), Python takes the process
    down, which takes tens of milliseconds after a large run: a Ctrl-C then would end it killed by the signal, with
    no word and no exit code of its own, or print an "Exception ignored ... KeyboardInterrupt" traceback. From
    there on Ctrl-C is ignored and the exit code is the command's, unless a thread other than daemons is still
    running (the exit would wait for it: Ctrl-C must still end that wait)."""
    try:
        main()
    finally:
        if threading.current_thread() is threading.main_thread() and all(
                t is threading.main_thread() or t.daemon or not t.is_alive() for t in threading.enumerate()):
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":  # pragma: no cover
    entry()
