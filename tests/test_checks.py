"""Checks without rewrites: look-alikes trigger nothing, aliases trigger, env files report by line."""

from __future__ import annotations

from collections import Counter

import pytest

from neuron_migrate.engine.python import process_python
from neuron_migrate.files.envfiles import process_dockerfile, process_shell
from neuron_migrate.rules import all_rules
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, check_codes, rewrite_bytes

MINE = ("NM3", "NM4", "NM5", "NM9")

# Which codes each fixture case triggers: `<case>.findings.txt` snapshots beside the cases (tests/test_idioms.py).
LOOKALIKES = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("NM[3-5]*/lookalikes*.py"))


def _codes(relative: str, prefixes=MINE) -> Counter:
    text = (FIXTURES / relative).read_text()
    return Counter(c for c in check_codes(text) if c.startswith(prefixes))


@pytest.mark.parametrize("relative", LOOKALIKES)
def test_lookalikes_trigger_nothing(relative):
    assert not _codes(relative, ("NM3", "NM4", "NM5", "NM9")), relative


@pytest.mark.parametrize("text, code", [
    ("import torch.sparse as ts\nts.mm(a, b)\n", "NM301"),
    ("from torch import sparse_csr_tensor as csr\ncsr(i, v)\n", "NM301"),
    ("import torch\nx = torch.zeros(3, layout=torch.sparse_csr)\n", "NM301"),
    ("from torch import func\nfunc.vmap(f)\n", "NM302"),
    ("import torch\ntorch.vmap(f)\n", "NM302"),
    ("from functorch import make_functional\nmake_functional(m)\n", "NM302"),
    ("import numpy as np\nimport torch\ntorch.from_numpy(np.zeros(3))\n", "NM401"),
    ("import numpy as np\nimport torch\ndef f():\n    a = np.linspace(0, 1, 5)\n    return torch.as_tensor(a)\n",
     "NM401"),
    ("import torch\ntorch.set_default_dtype(torch.float64)\n", "NM401"),
    ("import torchao\n", "NM307"),
    ("from torch import linalg as LA\nLA.svd(w)\n", "NM308"),
])
def test_triggers_through_aliases(text, code):
    assert code in check_codes(text)


@pytest.mark.parametrize("text", [
    "sparse = True\nprint(sparse)\n",
    "import torch\nx = torch.zeros(3, dtype=torch.float32)\n",
    "import torch\nprint('float64')\nlabel = 'torch.float64'\n",
    "import numpy as np\nimport torch\ntorch.from_numpy(np.zeros(3, dtype=np.float32))\n",
    "import numpy as np\nimport torch\ntorch.from_numpy(np.zeros(3)).float()\n",
    "import torch\ndef vmap(f):\n    return f\nvmap(torch.relu)\n",
    "from torch import nn\nnn.Embedding(3, 4, sparse=False)\n",
    "import torch\ndef f(func):\n    return func.vmap\n",
])
def test_does_not_trigger(text):
    assert not [c for c in check_codes(text) if c.startswith(("NM3", "NM4"))]


def test_triggers_never_miss_a_match():
    """A rule's pre-filter must let through every fixture file that the rule reports on."""
    for path in FIXTURES.rglob("*.py"):
        data = path.read_bytes()
        reported = {f.code for f in process_python(str(path), data, Settings(), False).findings}
        for code in reported - {"NM900"}:
            # a code two rules report (NM117: the "xla" and the "cuda" device names) needs one of them let through
            owners = [rule for rule in all_rules() if code in rule.codes]
            assert not owners or any(rule.may_match(data) for rule in owners), (code, [r.__name__ for r in owners], path)


def _env_file(name: str, rewrite: bool = False):
    path = FIXTURES / "NM4xx-environment" / name
    process = process_dockerfile if name == "Dockerfile" else process_shell
    return path, process(str(path), path.read_bytes(), Settings(), rewrite)


def test_shell_script_findings_with_lines():
    _, result = _env_file("run_training.sh")
    # line 2 is a comment, line 4 is suppressed, line 8 reads a variable, line 10 only mentions one
    assert [(f.line, f.code) for f in result.findings] == [
        (3, "NM403"), (5, "NM404"), (6, "NM404"), (7, "NM405"), (7, "NM405"), (9, "NM520")]
    assert [f.fixable for f in result.findings] == [False, True, True, False, False, False]


def test_shell_script_rewrite_drops_ignored_settings_and_marks_bf16():
    path, result = _env_file("run_training.sh", rewrite=True)
    expected = path.with_name("run_training.expected.sh").read_bytes()
    assert result.new_bytes == expected and result.applied == {"NM404": 2}
    assert [(m.line, m.code) for m in result.manual] == [(3, "NM900")]  # the NM403 marker above line 4
    again = process_shell(str(path), expected, Settings(), True)
    assert again.new_bytes is None
    checked = process_shell(str(path), expected, Settings(), False)
    assert [f.code for f in checked.findings if f.line <= 4] == ["NM900"]


def test_shell_script_rewrite_takes_the_comment_that_only_described_a_removed_setting():
    """A comment right above a removed export goes with it when nothing it could still describe follows (a blank
    line, the next commented setting); a header over a block that keeps a line, and the file's opening comments,
    stay; a block removed whole leaves one blank line. The look-alike sets only native variables: never written."""
    path, result = _env_file("pretrain_node.sh", rewrite=True)
    expected = path.with_name("pretrain_node.expected.sh").read_bytes()
    assert result.new_bytes == expected and result.applied == {"NM404": 5}
    assert b"# Hold at most four" not in expected and b"# Collect the compiler" not in expected
    assert b"# Runtime and compiler settings\n" in expected and b"# Usage: pretrain_node.sh" in expected
    assert process_shell(str(path), expected, Settings(), True).new_bytes is None
    lookalike = path.with_name("pretrain_node_lookalike.sh")
    assert process_shell(str(lookalike), lookalike.read_bytes(), Settings(), True).new_bytes is None


def test_dockerfile_findings_with_lines():
    _, result = _env_file("Dockerfile")
    assert [(f.line, f.code) for f in result.findings] == [
        (3, "NM405"), (3, "NM403"), (4, "NM404"), (6, "NM405"), (7, "NM405")]
    _, rewritten = _env_file("Dockerfile", rewrite=True)
    assert b"ENV PJRT_DEVICE" not in rewritten.new_bytes and b"RUN export XLA_IR_DEBUG" in rewritten.new_bytes


def test_env_files_respect_ignore():
    path = FIXTURES / "NM4xx-environment" / "Dockerfile"
    assert process_dockerfile(str(path), path.read_bytes(), Settings(ignore=frozenset({"NM4"})), True).findings == []


@pytest.mark.parametrize("text, moving", [
    ("import torch\nx = y.cuda()\nz = y.to('neuron')\n", True),
    ("import torch\nx = y.cuda()\nz = torch.zeros(3, device='neuron:0')\n", True),
    ("import torch\nimport torch_xla\nx = y.cuda()\n", True),
    ("import torch\nx = y.cuda()\n", False),
    ("import torch\nx = y.cuda()\ncells = {'neuron': 3, 'type': 'neuron'}\n", False),
])
def test_cuda_leftovers_only_in_files_moving_to_neuron(text, moving):
    assert ("NM320" in check_codes(text)) is moving


def test_no_marker_inside_a_continued_command():
    data = b"python -m pip install x && \\\n    export XLA_USE_BF16=1 && python train.py\n"
    result = process_shell("run.sh", data, Settings(), True)
    assert [f.code for f in result.findings] == ["NM403"] and result.new_bytes is None


def test_neuron_parallel_compile_is_reported_where_it_runs_not_where_it_is_mentioned():
    script = (
        "#!/bin/bash\n"
        "# pre-compile with neuron_parallel_compile first\n"  # a comment
        "if [ \"$1\" == compile ]; then\n"
        "    MAYBE_COMPILE=\"neuron_parallel_compile\"\n"  # 4: kept to run as `$MAYBE_COMPILE torchrun ...`
        "fi\n"
        "echo \"skipping neuron_parallel_compile\"\n"  # a message
        "$MAYBE_COMPILE torchrun --nproc_per_node=32 train.py\n"
        "neuron_parallel_compile torchrun --nproc_per_node=32 train.py --steps 10\n"  # 8
        "XLA_IR_DEBUG=0 /opt/aws/bin/neuron_parallel_compile python train.py\n"  # 9, beside a variable
        "true && ./neuron_parallel_compile_helper.sh\n"  # another program
        "cd /tmp; neuron_parallel_compile python train.py\n"  # 11
    )
    found = process_shell("run.sh", script.encode(), Settings(), False).findings
    runs = [(f.line, f.col) for f in found if f.message.startswith("`neuron_parallel_compile`")]
    assert runs == [(4, 20), (8, 1), (9, 16), (11, 10)]
    assert "there is no documented equivalent" in found[0].message
    rewritten = process_shell("run.sh", script.encode(), Settings(), True)
    assert rewritten.new_bytes in (None, script.encode())  # reported for a person, never edited
    docker = process_dockerfile("Dockerfile", b"FROM ubuntu:24.04\nRUN neuron_parallel_compile python t.py\n",
                                Settings(), False)
    assert [(f.line, f.col, f.code) for f in docker.findings] == [(2, 5, "NM405")]
    tpu = b"export PJRT_DEVICE=TPU\nneuron_parallel_compile python train.py\n"  # another product's script
    assert process_shell("run.sh", tpu, Settings(), False).findings == []


# NM520: a program that asks for a trn1 instance is a finding, on the line of the text; a mention is not.
_LAUNCH = '''\
"""Launch the job (it used to run on a trn1.32xlarge)."""
import sagemaker

PRICES = {"trn1.2xlarge": 1.34}
ESTIMATOR = sagemaker.estimator.Estimator(image_uri="x", instance_type="ml.trn1.32xlarge")
NOTE = "trn1.2xlarge is retired"
SCRIPT = """
set -e
aws ec2 run-instances \\\\
  --instance-type trn1.2xlarge --count 1
"""
'''


def _nm520(path: str, text: str) -> list[tuple[int, int, int, int]]:
    result = process_python(path, text.encode(), Settings(), False)
    return [(f.line, f.col, f.end_line, f.end_col) for f in result.findings if f.code == "NM520"]


def test_trn1_instance_requests_are_found_on_the_line_of_the_text():
    # the estimator's value; in the shell script, the line with the flag (not the string's first line, 7);
    # not the docstring, the price table's key or the sentence
    assert _nm520("launch.py", _LAUNCH) == [(5, 72, 5, 90), (10, 19, 10, 31)]


@pytest.mark.parametrize("path", ["tests/launch.py", "test_launch.py", "src/launch_test.py", "conftest.py"])
def test_trn1_instance_types_in_tests_are_data(path):
    assert _nm520(path, _LAUNCH) == []


@pytest.mark.parametrize("text, codes", [
    # reads: a finding without a marker (the advice belongs where the variable is set)
    ("import os\nbf16 = os.environ.get('XLA_USE_BF16') == '1'\n", ["NM405"]),
    ("from os import environ as env\nup = env.get('XLA_DOWNCAST_BF16', '0') == '1'\n", ["NM405"]),
    ("import os\nif os.getenv('XLA_DOWNCAST_BF16'):\n    dtype = 'bf16'\n", ["NM405"]),
    ("import os\ndef dtype():\n    if 'XLA_USE_BF16' in os.environ:\n        return 'bf16'\n", ["NM405"]),
    ("import os\nflag = int(os.environ['XLA_USE_BF16'])\n", ["NM405"]),
    # the file sets it: one NM403 at the setting, its reads are silent
    ("import os\nos.environ['XLA_USE_BF16'] = '1'\nif os.environ.get('XLA_USE_BF16'):\n    print('bf16')\n", ["NM403"]),
    # settings stay NM403: an environment handed to a child, a deletion, a launch line kept in a string
    ("import subprocess\nsubprocess.run(['python', 't.py'], env={'XLA_USE_BF16': '1'})\n", ["NM403"]),
    ("import os\ndel os.environ['XLA_DOWNCAST_BF16']\n", ["NM403"]),
    ("cmd = 'XLA_USE_BF16=1 torchrun train.py'\n", ["NM403"]),
    # look-alikes: another mapping's get, another variable
    ("config = {}\nbf16 = config.get('XLA_USE_BF16')\n", ["NM403"]),
    ("import os\nflag = os.environ.get('MY_XLA_USE_BF16_NOTE')\n", []),
])
def test_bf16_switch_reads_are_findings_without_markers(text, codes):
    assert [c for c in check_codes(text) if c.startswith("NM4")] == codes
    out = rewrite_bytes(text.encode())
    assert (out is not None and b"TODO(neuron-migrate NM403)" in out) is ("NM403" in codes)
    if "NM403" not in codes:
        assert out is None  # a file whose only finding is a read is never written
