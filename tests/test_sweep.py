"""No-op sweeps over real code nobody here wrote.

The Python standard library and every package installed in the test environment (torch included) hold no
torch_xla program: `rewrite --diff` with the migration rules over them must change no file (except torch's own torch_xla integration,
listed below), crash nowhere and report no error except the files below that are broken on purpose. A second sweep runs every rule on a sample of those files with the
pre-filter off, so the rules themselves meet thousands of lines of unfamiliar code. When torch_xla's own
sources are available, a copy of them is rewritten: every output must parse, a second run must be a no-op and
`check` must then report only the manual items.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sysconfig
from importlib.util import find_spec
from pathlib import Path

import pytest

from neuron_migrate import rules as rules_package
from neuron_migrate.engine.discover import discover
from neuron_migrate.engine.runner import run
from neuron_migrate.settings import Settings
from tests.helpers import SWEEP_REPORT, cli

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SITE_PACKAGES = sorted({Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])})
ROOTS = [STDLIB, *SITE_PACKAGES]

# Files in those trees that are not valid source on purpose: file name -> (why, the reason the tool gives).
GENUINE_ERRORS = {
    "bad_coding.py": ("CPython's tokenizer test: a misspelt coding cookie", "unknown encoding: uft-8"),
    "bad_coding2.py": ("CPython's tokenizer test: a BOM with a `utf8` cookie, which Python refuses",
                       "starts with a UTF-8 byte order mark"),
    "badsyntax_pep3120.py": ("CPython's tokenizer test: latin-1 bytes without a cookie",
                             "bytes are not valid utf-8"),
}
# torch's optional torch_xla integration: code paths taken only for XLA tensors or an XLA backend, which import
# torch_xla inside them. They are torch_xla code, so the rules report (NM199 markers) or rewrite them; whether a
# multi-backend library's XLA-only branch should rather be left alone is a policy question for the rules.
TORCH_XLA_INTEGRATION = {
    "torch/_tensor.py": "`__dlpack__` on an XLA tensor imports torch_xla.utils.dlpack",
    "torch/_dynamo/testing.py": "`reset_rng_state(use_xla=True)` calls xm.set_rng_state(..., xm.xla_device())",
    "torch/_dynamo/backends/torchxla.py": "the `openxla` Dynamo backend itself (torch_xla.core.dynamo_bridge)",
    "torch/_functorch/fx_minifier.py": "the HLO minifier calls torch_xla.stablehlo",
    "torch/distributed/tensor/_api.py": "DTensor on an `xla` device mesh calls torch_xla.distributed.spmd",
}
DIFF_FILE = re.compile(r"^\+\+\+ b/(.*)$", re.M)
# The migration rules: core (NM1), distributed and data (NM2), dependencies (NM6), the tool's own (NM9). The
# checks of PyTorch features the native backend lacks (NM3-NM5) report those features wherever they appear,
# torch's own sources included, so they are left out of this sweep (see the closing note of issue 8).
MIGRATION_RULES = ("NM1", "NM2", "NM6", "NM9")
ERROR_LINE = re.compile(r"^(?P<path>.+?)(?::\d+(?::\d+)?)?: error: (?P<message>.*)$")


def _errors(stderr: str) -> dict[str, str]:
    out = {}
    for line in stderr.splitlines():
        m = ERROR_LINE.match(line)
        if m:
            out[m.group("path")] = m.group("message")
    return out


def _unexpected(errors: dict[str, str]) -> dict[str, str]:
    out = {}
    for path, message in errors.items():
        if message.startswith("syntax error") and not _python_compiles(path):
            continue  # Python 2 test data (lib2to3): an error in every file, legacy idioms or not (issue 29)
        known = GENUINE_ERRORS.get(Path(path).name)
        if known is None or "test" not in Path(path).parts or known[1] not in message:
            out[path] = message
    return out


def _python_compiles(path: str) -> bool:
    try:
        compile(Path(path).read_bytes(), path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _size(roots: list[Path]) -> tuple[int, int]:
    targets, _ = discover([str(r) for r in roots], frozenset({"python"}))
    lines = 0
    for t in targets:
        with open(t.path, "rb") as fh:
            lines += sum(1 for _ in fh)
    return len(targets), lines


def _report(request, text: str) -> None:
    request.config.stash[SWEEP_REPORT].append(text)


@pytest.fixture
def cache_env(request, tmp_path_factory) -> dict[str, str]:
    """Results cached between test runs (in pytest's cache folder) where the runner keeps a cache."""
    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("neuron-migrate-sweep") if cache is not None else tmp_path_factory.mktemp("cache")
    return {"NEURON_MIGRATE_CACHE_DIR": str(folder)}


@pytest.mark.slow
def test_rewrite_over_stdlib_and_site_packages_changes_nothing(request, cache_env):
    assert (STDLIB / "os.py").is_file(), "the sweep needs the standard library"
    if not any((p / "torch" / "__init__.py").is_file() for p in SITE_PACKAGES):
        _report(request, "no-op sweep: torch is not installed here, so its sources are not part of the sweep")
    proc = cli("rewrite", "--diff", "--select", ",".join(MIGRATION_RULES), *map(str, ROOTS), env=cache_env)
    files, lines = _size(ROOTS)
    _report(request, f"no-op sweep: {files} files, {lines} lines ({', '.join(map(str, ROOTS))})")
    changed = [path for path in DIFF_FILE.findall(proc.stdout)
               if not any(path.endswith(known) for known in TORCH_XLA_INTEGRATION)]
    assert changed == [], "the rewrite changed code that holds no torch_xla program:\n" + proc.stdout[:5000]
    assert _unexpected(_errors(proc.stderr)) == {}
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr


def test_rewrite_over_a_sample_of_stdlib_and_site_packages_changes_nothing(request, cache_env):
    """The no-op sweep above on a fixed sample of its files, for the default run (the whole sweep is `slow`)."""
    paths = _sample(120, 200_000)
    proc = cli("rewrite", "--diff", "--select", ",".join(MIGRATION_RULES), *paths, env=cache_env)
    _report(request, f"no-op sweep sample: {len(paths)} files")
    assert len(paths) == 120
    assert DIFF_FILE.findall(proc.stdout) == [], "the rewrite changed code that holds no torch_xla program:\n" + \
        proc.stdout[:5000]
    assert _errors(proc.stderr) == {}
    assert proc.returncode == 0 and "Traceback" not in proc.stderr


def _relative(path: str) -> str:
    """The path below the root it was found in: the same wherever the environment lives."""
    for root in ROOTS:
        if Path(path).is_relative_to(root):
            return Path(path).relative_to(root).as_posix()
    return path


def _sample(count: int, max_bytes: int) -> list[str]:
    """A fixed sample (by the hash of the path below its root) of the swept files that hold no torch_xla program,
    small enough to run every rule on each."""
    targets, _ = discover([str(r) for r in ROOTS], frozenset({"python"}))
    ranked = sorted(targets, key=lambda t: hashlib.sha1(_relative(t.path).encode()).hexdigest())
    out = []
    for t in ranked:
        if len(out) == count:
            break
        if 2000 < os.path.getsize(t.path) <= max_bytes and Path(t.path).name not in GENUINE_ERRORS \
                and _relative(t.path) not in TORCH_XLA_INTEGRATION:
            out.append(t.path)
    return out


@pytest.mark.parametrize("count", [pytest.param(200, marks=pytest.mark.slow), 25], ids=["200 files", "25 files"])
def test_every_rule_on_a_sample_of_unrelated_code_changes_nothing(request, monkeypatch, count):
    paths = _sample(count, 30_000)
    for rule in rules_package.all_rules():
        monkeypatch.setattr(rule, "triggers", (b"",))  # b"" is in every file: the pre-filter lets all through
        monkeypatch.setattr(rule, "context", ())
        monkeypatch.setattr(rule, "pattern", None)
    result = run(paths, Settings(select=frozenset(MIGRATION_RULES)), rewrite=True, jobs=2)
    lines = sum(Path(p).read_bytes().count(b"\n") for p in paths)
    _report(request, f"every-rule sample: {len(paths)} files, {lines} lines")
    assert [r.path for r in result.changed] == []
    assert [(p, m) for p, m in result.errors if "LibCST" not in m] == []


def _torch_xla_sources() -> Path | None:
    explicit = os.environ.get("NEURON_MIGRATE_TORCH_XLA_DIR")
    if explicit:
        return Path(explicit)
    spec = find_spec("torch_xla")  # finds the package without importing it
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def test_torch_xla_own_sources_are_reported_as_an_xla_stack_library_and_not_rewritten(request, tmp_path):
    """The torch_xla package is a library of the XLA-based stack (engine/stack.py): `rewrite` leaves its sources
    alone and says so once; `check` reports no finding in it. (Each file still goes through the engine in
    test_syntax_door.py, which calls the handlers directly.)"""
    sources = _torch_xla_sources()
    if sources is None or not (sources / "__init__.py").is_file():
        pytest.skip("torch_xla is not installed here; set NEURON_MIGRATE_TORCH_XLA_DIR to its package folder "
                    "to run this sweep")
    copy = tmp_path / "torch_xla"
    shutil.copytree(sources, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    before = {p: p.read_bytes() for p in copy.rglob("*.py")}
    first = cli("rewrite", str(copy))
    assert "Traceback" not in first.stderr and "internal error" not in first.stderr, first.stderr
    changed = [p for p, data in before.items() if p.read_bytes() != data]
    lines = sum(data.count(b"\n") for data in before.values())
    _report(request, f"torch_xla sweep: {len(before)} files, {lines} lines, {len(changed)} rewritten")
    assert changed == [] and "1 XLA-stack library left alone" in first.stdout, first.stdout[-2000:]
    data = json.loads(cli("check", "--format", "json", str(copy)).stdout)
    assert data["findings"] == [] and [lib["library"] for lib in data["libraries"]] == ["torch_xla"]
