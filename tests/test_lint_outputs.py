"""The migrated fixtures pass the linters projects run: ruff with its default rule set (pyflakes and the
pycodestyle errors), import sorting and invalid-envvar-default report nothing on a fixture's output that they
did not report on the fixture's input.

The rewrite must not leave unused or misplaced imports, non-string environment defaults or anything else a
linter would hold against the migration. The bundled examples go through the real command line
(`rewrite --output-dir`) and are held to the same.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, ROOT, cli

# ruff's default rule set (pycodestyle's errors E4, E7, E9 and pyflakes F), named so that a newer ruff with wider
# defaults does not change the test; plus import sorting (I001: new imports go where isort puts them) and
# invalid-envvar-default (PLW1508: `os.environ.get("RANK", 0)`).
RULES = ("--select", "E4,E7,E9,F,I001,PLW1508")


def _ruff() -> list[str]:
    try:
        import ruff  # noqa: F401
    except ImportError:
        found = shutil.which("ruff")
        if found is None:
            pytest.skip("ruff is not installed: pip install -e '.[test]'")
        return [found]
    return [sys.executable, "-m", "ruff"]


def _pairs() -> list[tuple[Path, Path]]:
    out = []
    for expected in sorted(FIXTURES.rglob("*.expected.py")):
        stem = expected.name[: -len(".expected.py")]
        if stem.endswith(".accelerator"):
            stem = stem[: -len(".accelerator")]
        source = expected.with_name(stem + ".py")
        if source.exists():
            out.append((source, expected))
    return out


def _diagnostics(files: list[Path]) -> dict[str, Counter]:
    proc = subprocess.run([*_ruff(), "check", "--isolated", "--no-cache", "--exit-zero", "--output-format", "json",
                           *RULES, *map(str, files)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Counter] = {str(f): Counter() for f in files}
    for item in json.loads(proc.stdout):
        # by code and message (which names the import, the variable): an input's unused `torch` does not hide
        # an unused `torch_neuronx` in the output
        out[str(Path(item["filename"]))][(item["code"] or "syntax-error", item["message"])] += 1
    return out


@pytest.fixture(scope="module")
def found() -> dict[str, Counter]:
    return _diagnostics(sorted({p for pair in _pairs() for p in pair}))


def _cases():
    for source, expected in _pairs():
        name = expected.relative_to(FIXTURES).as_posix()
        yield pytest.param(source, expected, id=name)


def test_the_fixtures_have_outputs():
    assert len(_pairs()) > 100


@pytest.mark.parametrize("source, expected", list(_cases()))
def test_ruff_finds_nothing_new_in_the_migrated_fixture(found, source, expected):
    added = found[str(expected)] - found[str(source)]
    assert not added, f"ruff reports on the rewrite what it did not on the input: {dict(added)}"


# What the command line leaves that a linter holds against it, with the reason; strict: fails once fixed.
KNOWN_EXAMPLES: dict[str, str] = {}  # example -> why ruff finds something new there (none today)


@pytest.fixture(scope="module")
def migrated_examples(tmp_path_factory) -> tuple[Path, dict[str, Counter]]:
    out = tmp_path_factory.mktemp("examples") / "migrated"
    proc = cli("rewrite", "--no-cache", "--unsafe-fixes", "--output-dir", str(out), str(ROOT / "examples"))
    assert proc.returncode == 1 and "error:" not in proc.stderr, proc.stderr  # 1: items left for a person
    sources = sorted((ROOT / "examples").rglob("*.py"))
    return out, _diagnostics([*sources, *(out / p.relative_to(ROOT / "examples") for p in sources)])


def _example_cases():
    for source in sorted((ROOT / "examples").rglob("*.py")):
        name = source.relative_to(ROOT / "examples").as_posix()
        marks = [pytest.mark.xfail(reason=KNOWN_EXAMPLES[name], strict=True)] if name in KNOWN_EXAMPLES else []
        yield pytest.param(name, id=name, marks=marks)


@pytest.mark.parametrize("name", list(_example_cases()))
def test_ruff_finds_nothing_new_in_the_examples_the_cli_migrated(migrated_examples, name):
    """The bundled examples, migrated by `neuron-migrate rewrite --output-dir` (the real entry point)."""
    out, found = migrated_examples
    added = found[str(out / name)] - found[str(ROOT / "examples" / name)]
    assert not added, f"ruff reports on the migrated {name} what it did not on the original: {dict(added)}"


# Imports a fix adds inside a function whose module imports torch only there (a lazy-import module): each lands
# in isort's block for it (standard library, then third party), the blocks set off by one blank line, none inside
# a block; the function's own lines keep their place.
_FUNCTION_IMPORTS = {
    "only_third_party": """\
def init(cfg):
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401

    dist.init_process_group(backend="xla")
""",
    "stdlib_then_third_party": """\
def init(cfg):
    import logging

    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401

    logging.info("start")
    dist.init_process_group(backend="xla")
""",
    "stdlib_after_the_new_ones": """\
def init(cfg):
    import time

    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401

    start = time.time()
    dist.init_process_group(backend="xla")
    return start
""",
    "stdlib_only": """\
def seed(value):
    import random

    random.seed(value)
    try:
        import torch_xla.core.xla_model as xm
    except ImportError:
        return
    xm.set_rng_state(seed=value)
""",
}


@pytest.mark.parametrize("name", sorted(_FUNCTION_IMPORTS))
def test_imports_added_in_a_function_are_in_isorts_blocks(tmp_path, name):
    from tests.helpers import rewrite_bytes

    source = _FUNCTION_IMPORTS[name]
    out = rewrite_bytes(source.encode())
    assert out is not None, "the case has a fix"
    text = out.decode()
    assert rewrite_bytes(out) is None, "a second run changes nothing"
    body = text.split("\n")
    imports = [line for line in body if line.startswith("    import ")]
    assert imports, text
    assert not any(line != line.rstrip() for line in body), f"no trailing blanks:\n{text}"
    path = tmp_path / "case.py"
    path.write_text(text)
    assert _diagnostics([path])[str(path)] == Counter(), f"ruff on\n{text}"
