"""Per-line suppression: neither reported nor fixed; unused suppressions are reported (NM901)."""

from __future__ import annotations

import pytest

from neuron_migrate.suppress import ALL, codes_in
from tests.helpers import check_codes, rewrite_text


@pytest.mark.parametrize("comment, codes", [
    ("# neuron-migrate: ignore[NM401]", {"NM401"}),
    ("# neuron-migrate: ignore[NM401, nm301]", {"NM401", "NM301"}),
    ("# neuron-migrate: ignore", ALL),
    ("# noqa: NM401", {"NM401"}),
    ("# noqa: E501, NM401", {"NM401"}),
    ("# noqa: E501", set()),
    ("# noqa", set()),
    ("# type: ignore", set()),
])
def test_codes_in(comment, codes):
    assert codes_in(comment) == codes


def test_suppressed_finding_is_neither_reported_nor_fixed():
    text = "import torch\nmodel.to('neuron')\nx = y.cuda()  # noqa: NM320\nz = w.cuda()\n"
    assert check_codes(text).count("NM320") == 1
    assert rewrite_text(text) == "import torch\nmodel.to('neuron')\nx = y.cuda()  # noqa: NM320\nz = w.to('neuron')\n"


def test_suppression_on_a_continuation_line_and_a_compound_header():
    text = ("import torch\n"
            "x = torch.zeros(\n    3, dtype=torch.float64,  # neuron-migrate: ignore[NM401]\n)\n"
            "with torch.cuda.amp.autocast():  # neuron-migrate: ignore\n    model.to('neuron')\n")
    assert check_codes(text) == []
    assert rewrite_text(text) == text


def test_manual_marker_is_not_placed_for_a_suppressed_finding():
    text = "from torch import func\nfunc.vmap(f)  # noqa: NM302\n"
    assert rewrite_text(text) == text


def test_unused_suppression_is_reported():
    text = "import torch\nx = torch.zeros(3)  # noqa: NM401\ny = 1  # neuron-migrate: ignore\n"
    assert check_codes(text) == ["NM901", "NM901"]


def test_unused_suppression_of_a_code_not_checked_is_not_reported():
    text = "import torch\nx = torch.zeros(3)  # noqa: NM401\n"
    assert check_codes(text, ignore=frozenset({"NM401"})) == []
    assert check_codes(text, ignore=frozenset({"NM901"})) == []


# -- exact NM901 messages; never a finding and "not needed" for the same code on a line ------------------------

def _check(text: str):
    from neuron_migrate.engine.python import process_python
    from neuron_migrate.settings import Settings

    return process_python("case.py", text.encode(), Settings(), False).findings


def test_noqa_on_an_unused_legacy_import_keeps_it_and_reports_neither():
    text = ("import torch\nimport torch_xla.distributed.xla_backend  # noqa: NM190\nimport torch_xla.core.xla_model as xm"
            "\n\ndevice = xm.xla_device()\n")
    found = [(f.line, f.code) for f in _check(text)]
    assert (2, "NM190") not in found and (2, "NM901") not in found, found
    assert (3, "NM190") in found
    assert rewrite_text(text) == ("import torch\nimport torch_xla.distributed.xla_backend  # noqa: NM190\n\n"
                                  'device = torch.device("neuron")\n')


@pytest.mark.parametrize("comment, says", [
    ("# noqa: NM999", "this suppression of NM999 names an unknown code: no neuron-migrate rule is NM999"),
    ("# neuron-migrate: ignore[NM401]", "this suppression of NM401 is not needed: nothing on this line is reported "
                                        "as NM401; remove it"),
])
def test_an_unused_suppression_says_why(comment, says):
    found = [f for f in _check(f"import torch\n\nx = torch.ones(2)  {comment}\n") if f.code == "NM901"]
    assert len(found) == 1 and found[0].message.startswith(says), found
