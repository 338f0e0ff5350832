"""Minimal diffs: lines the rules do not touch come back byte-identical, whatever the file's bytes look like.

Each case builds one file from lines flagged as idiom or not, in a given encoding and newline style, rewrites
it, and checks that every other line is unchanged (newline bytes included), that the encoding and BOM stay,
that new lines use the file's newline, and that a second run changes nothing. Where LibCST does not give a
file back byte for byte, the engine must refuse to write it.
"""

from __future__ import annotations

import codecs

import pytest

from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import SourceError, decode
from tests.helpers import assert_other_lines_kept, cli, rewrite_bytes

I, O = True, False  # idiom line / ordinary line

BODY = [
    (O, "import torch"),
    (I, "import torch_xla.core.xla_model as xm"),
    (O, ""),
    (O, "GREETING = 'Grüße, 设备, naïve café'  # non-ASCII stays as it is"),
    (O, "\f"),
    (O, "def train(model, loader, optimizer):   "),
    (I, "\tdevice = xm.xla_device()"),
    (O, "\tfor step, batch in enumerate(loader):\t"),
    (O, "\t\tloss = model(batch).sum() ;  loss.backward()"),
    (I, "\t\txm.optimizer_step(optimizer)"),
    (I, "\t\txm.mark_step()"),
    (O, "\t\ttotal = (step +"),
    (O, "\t\t         1)  \\"),
    (O, "\t\t\t* 2"),
    (O, "\treturn device  # trailing comment\t "),
    (O, "\f"),
    (O, "LONG = [" + ", ".join(f"'value {i}'" for i in range(1500)) + "]"),
    (O, "x = 'xla'  # a string that is no device"),
]

LATIN1_BODY = [(O, "# -*- coding: latin-1 -*-"), *[(f, t.replace("设备, ", "")) for f, t in BODY]]


def build(lines, newline: str, encoding: str = "utf-8", bom: bool = False, final_newline: bool = True):
    text = newline.join(t for _, t in lines) + (newline if final_newline else "")
    data = text.encode(encoding)
    return (codecs.BOM_UTF8 + data if bom else data), [flag for flag, _ in lines]


def mixed(lines):
    """Every third line ends in CRLF, the others in LF."""
    parts = [t + ("\r\n" if i % 3 == 0 else "\n") for i, (_, t) in enumerate(lines)]
    return "".join(parts).encode(), [flag for flag, _ in lines]


CASES = {
    "utf-8 LF": build(BODY, "\n"),
    "utf-8 with BOM": build(BODY, "\n", bom=True),
    "latin-1 with cookie": build(LATIN1_BODY, "\n", encoding="latin-1"),
    "CRLF": build(BODY, "\r\n"),
    "CRLF with BOM, no final newline": build(BODY, "\r\n", bom=True, final_newline=False),
    "mixed newlines": mixed(BODY),
    "no final newline": build(BODY, "\n", final_newline=False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_untouched_lines_stay_byte_identical(case):
    data, flags = CASES[case]
    out = rewrite_bytes(data)
    assert out is not None
    assert_other_lines_kept(data, flags, out)
    assert out.startswith(codecs.BOM_UTF8) == data.startswith(codecs.BOM_UTF8)
    before, after = decode(data), decode(out)
    assert after.encoding == before.encoding
    assert "torch_xla" not in after.text and "torch.device(" in after.text
    assert rewrite_bytes(out) is None, "a second run changed the file again"


@pytest.mark.parametrize("case", ["CRLF", "CRLF with BOM, no final newline"])
def test_lines_a_rule_writes_use_the_file_newline(case):
    data, _ = CASES[case]
    out = rewrite_bytes(data)
    assert out.count(b"\n") == out.count(b"\r\n")


def test_a_file_without_idioms_is_never_written():
    for data, flags in CASES.values():
        plain = b"".join(line for line, flag in zip(data.splitlines(keepends=True), flags) if not flag)
        assert rewrite_bytes(plain) is None


# LibCST gives these back changed: `except X :` loses its space, and old Mac CR-only newlines become LF.
NOT_ROUND_TRIPPING = {
    "space before an except colon": b"try:\n    pass\nexcept OSError :\n    pass\n",
    "CR-only newlines": b"import os\rx = 1\r",
}
IDIOM = b"import torch_xla.core.xla_model as xm\nxm.mark_step()\n"


@pytest.mark.parametrize("name", sorted(NOT_ROUND_TRIPPING))
def test_a_file_libcst_does_not_round_trip_is_refused(name):
    data = IDIOM + NOT_ROUND_TRIPPING[name]
    with pytest.raises(SourceError, match="the parser does not give back this file byte for byte"):
        process_python("case.py", data, Settings(), True)


@pytest.mark.parametrize("name", sorted(NOT_ROUND_TRIPPING))
def test_a_file_libcst_does_not_round_trip_is_no_error_when_nothing_changes(name):
    data = b"import torch\nmodel = torch.compile(model)\n" + NOT_ROUND_TRIPPING[name]
    result = process_python("case.py", data, Settings(), True)
    assert not result.changed and result.error is None


def test_refusal_through_the_cli_leaves_the_file_and_exits_2(tmp_path):
    path = tmp_path / "train.py"
    data = IDIOM + NOT_ROUND_TRIPPING["space before an except colon"]
    path.write_bytes(data)
    proc = cli("rewrite", str(tmp_path))
    assert proc.returncode == 2
    assert f"{path}: error: the parser does not give back this file byte for byte, so it cannot be rewritten " \
           "without changing lines no rule touched; the file was left alone" in proc.stderr
    assert path.read_bytes() == data
