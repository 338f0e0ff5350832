"""The commands docs/workflow.md shows (a CI matrix among them) parse with the command line as it is."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from neuron_migrate.cli import main
from neuron_migrate.cli.formats import sarif_category
from neuron_migrate.engine.shards import Shard
from tests.helpers import ROOT

DOC = (ROOT / "docs" / "workflow.md").read_text()
BLOCKS = re.findall(r"(?ms)^```(?:bash|yaml|sh)\n(.*?)^```", DOC)
MATRIX = re.compile(r"\$\{\{\s*matrix\.shard\s*\}\}")
SHARD = "3"  # the value the matrix gives one job


def _commands() -> list[str]:
    out = []
    for block in BLOCKS:
        for line in block.splitlines():
            m = re.match(r"^\s*(?:-\s+)?(?:run:\s+)?(neuron-migrate\s.*)$", line)
            if m:
                out.append(MATRIX.sub(SHARD, m.group(1)))
    # and the commands written inline in the text (`neuron-migrate rewrite --diff --shard 2/4 .`)
    out += re.findall(r"`(neuron-migrate [a-z]+ [^`]+)`", DOC)
    return out


COMMANDS = _commands()


def test_the_doc_shows_the_sharded_commands():
    used = " ".join(COMMANDS)
    for piece in ("check --shard", "merge", "--format sarif", "--format json", "rewrite --diff --shard",
                  "pin --diff --shard"):
        assert piece in used, piece


@pytest.mark.parametrize("line", COMMANDS)
def test_a_command_of_the_doc_parses(line):
    args = shlex.split(line)
    assert args[0] == "neuron-migrate"
    with click.Context(main) as ctx:
        command = main.get_command(ctx, args[1])
        assert command is not None, f"no command {args[1]!r}: {line}"
        # parsing runs every option's type and callback (--shard K/N is checked there); nothing is run
        sub = command.make_context(args[1], args[2:], parent=ctx)
        if "--shard" in args:
            assert sub.params["shard"].count == 4


def test_the_upload_category_is_the_one_a_shard_writes():
    categories = [MATRIX.sub(SHARD, c) for c in re.findall(r"(?m)^\s*category:\s*(.+?)\s*$", DOC)]
    assert f"{sarif_category(Shard(int(SHARD), 4)).rstrip('/')}" in categories
