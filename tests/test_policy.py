"""One report policy for every file kind: the same suppression comments, --unsafe-fixes, markers and NM901 everywhere.

The generic tests take every catalogue example, in its own file kind and carried over to the other kinds its
rule applies to (a Python example into a notebook cell; a requirements example into a shell `pip install`,
a Dockerfile `RUN`, a notebook `!pip install`, pyproject.toml, setup.py, setup.cfg and environment.yml;
environment variables into shell scripts and Dockerfiles), append a suppression to each line that triggers
the rule, and expect the rule silenced there, with no NM901 for the comment.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from neuron_migrate import catalogue
from neuron_migrate.engine.discover import kind_of
from neuron_migrate.engine.handlers import process
from neuron_migrate.findings import FixSafety
from neuron_migrate.settings import Settings
from tests.helpers import cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NOT_PER_LINE = {"NM900", "NM901"}  # docs/checks.md: these are silenced with `ignore`, not per line
FORMS = ("# neuron-migrate: ignore[{code}]", "# noqa: {code}", "# neuron-migrate: ignore")
CONTINUED = {"shell", "dockerfile", "requirements"}  # a `\` at the end of a line continues it
PIN_KINDS = ("shell", "dockerfile", "notebook", "pyproject", "setup.py", "setup-cfg", "conda-env")
INDEX_KINDS = ("shell", "dockerfile", "notebook", "pyproject", "conda-env")  # formats that can name an index
PIN_APPLIES = {"NM601": PIN_KINDS, "NM602": PIN_KINDS, "NM603": PIN_KINDS, "NM604": INDEX_KINDS, "NM605": ()}  # others: their own kind only


# -- the examples, in every file kind they apply to ---------------------------------------------------------

def notebook(source: str, name: str = "train.ipynb") -> tuple[str, str]:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    nb = {"cells": [cell], "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    return name, json.dumps(nb, indent=1) + "\n"


def _requirements(text: str) -> tuple[list[str], list[str]]:
    """(options, requirements) of a requirements example (hash continuations dropped)."""
    options, requirements = [], []
    for line in text.splitlines():
        line = line.strip().removesuffix("\\").strip()
        if not line or line.startswith("--hash"):
            continue
        (options if line.startswith("-") else requirements).append(line)
    return options, requirements


def pin_variant(kind: str, options: list[str], requirements: list[str]) -> tuple[str, str]:
    url = next((o.split()[-1] for o in options if "index-url" in o), None)
    words = options + requirements
    if kind == "shell":
        return "install.sh", "pip install " + " \\\n    ".join(words) + "\n"
    if kind == "dockerfile":
        return "Dockerfile", "FROM python:3.12\nRUN pip install " + " \\\n    ".join(words) + "\n"
    if kind == "notebook":
        return notebook("!pip install " + " ".join(words) + "\n")
    if kind == "pyproject":
        items = "".join(f'    "{r}",\n' for r in requirements)
        index = f'\n[[tool.uv.index]]\nname = "neuron"\nurl = "{url}"\n' if url else ""
        return "pyproject.toml", f'[project]\nname = "trainer"\ndependencies = [\n{items}]\n\n[tool.uv]\n{index}'
    if kind == "setup.py":
        items = "".join(f'        "{r}",\n' for r in requirements)
        return "setup.py", f'from setuptools import setup\n\nsetup(\n    name="trainer",\n    install_requires=[\n{items}    ],\n)\n'
    if kind == "setup-cfg":
        items = "".join(f"    {r}\n" for r in requirements)
        return "setup.cfg", f"[metadata]\nname = trainer\n\n[options]\ninstall_requires =\n{items}"
    if kind == "conda-env":
        items = "".join(f"      - {w}\n" for w in words)
        return "environment.yml", f"name: trainer\ndependencies:\n  - python=3.12\n  - pip\n  - pip:\n{items}"
    raise AssertionError(kind)


def _env_settings(info) -> list[tuple[str, str]]:
    """(name, value) of the variables an environment example sets."""
    found = re.findall(r"""os\.environ(?:\[["'](\w+)["']\]\s*=\s*|\.setdefault\(["'](\w+)["'],\s*)["']([^"']*)["']""",
                       info.before)
    found = [(a or b, v) for a, b, v in found]
    return found + re.findall(r'^export (\w+)=("[^"]*"|\S*)', info.before, re.M)


def variants(info) -> list[tuple[str, str, str]]:
    """(kind, path, text) of the rule's example in each file kind it applies to."""
    own_kind = kind_of(info.example_file)
    out = [(own_kind, info.example_file, info.before)]
    if own_kind == "python":
        out.append(("notebook", *notebook(info.before)))
    if info.example_file == "requirements.txt":
        options, requirements = _requirements(info.before)
        out += [("notebook" if k == "notebook" else kind_of(p), p, t)
                for k in PIN_APPLIES.get(info.code, ()) for p, t in [pin_variant(k, options, requirements)]]
    if own_kind == "dockerfile" and info.before.lstrip().startswith("RUN "):
        out.append(("shell", "install.sh", info.before.lstrip().removeprefix("RUN ")))
    if info.code == "NM607":
        spec = tomllib.loads(info.before)["project"]["requires-python"]
        # (not setup.cfg: setuptools reads a comment after `python_requires =` as part of the value)
        out.append(("python", "setup.py", f'from setuptools import setup\n\nsetup(python_requires="{spec}", '
                                          'install_requires=["torch"])\n'))
    if info.code in ("NM403", "NM404", "NM405"):
        settings = [(n, v) for n, v in _env_settings(info) if _env_code(n, v) in (info.code, None)]
        assert any(_env_code(n, v) for n, v in settings), f"{info.code}: no variable in its example"
        out.append(("shell", "run.sh", "".join(f"export {n}={v}\n" for n, v in settings)))
        out.append(("dockerfile", "Dockerfile", "FROM python:3.12\n" + "".join(f"ENV {n}={v}\n" for n, v in settings)))
    if info.code == "NM520":
        instance = re.search(r"(ml\.)?trn1n?\.\w+", info.before).group(0)
        out.append(("shell", "launch.sh", f"aws ec2 run-instances --instance-type {instance} --count 1\n"))
        out.append(("dockerfile", "Dockerfile", f"FROM python:3.12\nENV INSTANCE_TYPE={instance}\n"))
    return [v for v in out if v[2].strip()]


def _env_code(name: str, value: str) -> str | None:
    """The code a variable setting gets; None for a look-alike (a variable the native backend reads)."""
    from neuron_migrate.rules.environment import code_for, env_table

    return code_for(name, value.strip("\"'"), True) if name in env_table() else None


# -- running and editing the variants -----------------------------------------------------------------------

def run(kind: str, path: str, text: str, rewrite: bool = False, **settings):
    result = process(path, text.encode(), kind, Settings(**settings), rewrite)
    assert result is not None and result.error is None, (path, result and result.error)
    return result


def places(result, code: str) -> list[tuple[int | None, int]]:
    return sorted({(f.cell, f.line) for f in result.findings if f.code == code}, key=lambda p: (p[0] or 0, p[1]))


def suppressed(kind: str, text: str, lines: list[tuple[int | None, int]], comment: str) -> str:
    """`text` with `comment` at the end of each given line (of a continued line: its last line)."""
    if kind == "notebook":
        nb = json.loads(text)
        for cell, line in lines:
            source = nb["cells"][cell - 1]["source"]
            source[line - 1] = source[line - 1].rstrip("\n") + "  " + comment + "\n"
        return json.dumps(nb, indent=1) + "\n"
    out = text.splitlines()
    for _, line in lines:
        index = line - 1
        while kind in CONTINUED and out[index].rstrip().endswith("\\") and index + 1 < len(out):
            index += 1
        if comment not in out[index]:
            out[index] += "  " + comment
    return "\n".join(out) + "\n"


CASES = [(info, kind, path, text) for info in catalogue.catalogue().values() if info.code not in NOT_PER_LINE
         for kind, path, text in variants(info)]
IDS = [f"{info.code}-{kind}-{os.path.basename(path)}" for info, kind, path, _ in CASES]


@pytest.mark.parametrize("info, kind, path, text", CASES, ids=IDS)
def test_every_example_in_every_kind_triggers_its_rule(info, kind, path, text):
    assert places(run(kind, path, text, **info.example_settings), info.code), f"{info.code} not reported in its {kind} example:\n{text}"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("info, kind, path, text", CASES, ids=IDS)
def test_a_suppression_on_the_triggering_line_silences_the_rule(info, kind, path, text, form):
    lines = places(run(kind, path, text, **info.example_settings), info.code)
    quiet = suppressed(kind, text, lines, form.format(code=info.code))
    codes = [f.code for f in run(kind, path, quiet, **info.example_settings).findings]
    assert info.code not in codes, quiet
    assert "NM901" not in codes, quiet  # the comment was used
    fixed = run(kind, path, quiet, **info.example_settings, rewrite=True)
    assert info.code not in fixed.applied
    assert f"TODO(neuron-migrate {info.code})" not in (fixed.new_bytes or b"").decode()


@pytest.mark.parametrize("info, kind, path, text", [c for c in CASES if c[0].fix is not FixSafety.MANUAL],
                         ids=[i for c, i in zip(CASES, IDS) if c[0].fix is not FixSafety.MANUAL])
def test_unsafe_fixes_are_opt_in_in_every_kind(info, kind, path, text):
    """Safe fixes by default, the unsafe ones with `unsafe_fixes` (--unsafe-fixes); a held-back fix says so."""
    for unsafe_fixes in (True, False):
        applies = info.fix is FixSafety.SAFE or unsafe_fixes
        found = [f for f in run(kind, path, text, **info.example_settings, unsafe_fixes=unsafe_fixes).findings
                 if f.code == info.code]
        assert {f.fixable for f in found} == {applies}, (unsafe_fixes, text)
        assert {f.held_back for f in found} == {None if applies else True}, (unsafe_fixes, text)
        result = run(kind, path, text, **info.example_settings, rewrite=True, unsafe_fixes=unsafe_fixes)
        assert (info.code in result.applied) == applies, (unsafe_fixes, result.applied)
    if info.fix is FixSafety.UNSAFE:
        result = run(kind, path, text, **info.example_settings, rewrite=True, ignore=frozenset(
            {c for c in catalogue.catalogue() if c != info.code}))
        assert result.new_bytes is None  # nothing else to do: the unsafe fix alone is left out by default


# -- the shell-script defects, with look-alikes ---------------------------------------------------------------

SPAWNED = """\
import torch_xla.distributed.xla_multiprocessing as xmp


def _mp_fn(index):
    pass


if __name__ == "__main__":
    xmp.spawn(_mp_fn, args=(), nprocs={nprocs})
"""


def shell(tmp_path, script: str, rewrite: bool = False, **settings):
    path = tmp_path / "run.sh"
    path.write_text(script)
    settings.setdefault("unsafe_fixes", True)  # NM240 and NM601 are unsafe fixes
    result = process(str(path), script.encode(), "shell", Settings(**settings), rewrite)
    assert result.error is None, result.error
    return result


def test_launch_line_suppressed_in_a_shell_script_stays_and_its_neighbour_is_rewritten(tmp_path):
    (tmp_path / "train.py").write_text(SPAWNED.format(nprocs=8))
    script = ("python train.py --epochs 1  # neuron-migrate: ignore[NM240]\n"
              "python train.py --epochs 2\n"
              "python train.py --epochs 3  # noqa: NM241\n")
    check = shell(tmp_path, script)
    assert [(f.code, f.line) for f in check.findings] == [("NM240", 2), ("NM240", 3), ("NM901", 3)]
    out = shell(tmp_path, script, rewrite=True).new_bytes.decode().splitlines()
    assert out[0] == "python train.py --epochs 1  # neuron-migrate: ignore[NM240]"  # byte for byte
    assert out[1] == "torchrun --nproc_per_node=8 train.py --epochs 2"


def test_pin_codes_suppressed_in_a_shell_script(tmp_path):
    script = ("pip install torch-xla==2.9.0 \\\n"
              "    torch-neuronx==2.14.3.0.* --extra-index-url https://pip.repos.neuron.amazonaws.com"
              "  # neuron-migrate: ignore[NM601]\n"
              "pip install torch-xla==2.9.0 numpy\n")
    check = shell(tmp_path, script)
    assert [f.line for f in check.findings if f.code == "NM601"] == [3]
    assert "NM901" not in [f.code for f in check.findings]
    out = shell(tmp_path, script, rewrite=True).new_bytes.decode().splitlines()
    assert out[0] == script.splitlines()[0]  # the suppressed command keeps torch-xla, byte for byte
    assert out[2] == "pip install numpy"


def test_one_unused_suppression_is_one_nm901_whatever_the_number_of_handlers(tmp_path):
    script = ("export NEURON_CC_FLAGS=-O1  # noqa: NM405\n"  # used by the environment checks
              "echo hi  # noqa: NM601\n"  # nothing to silence: reported once, not by each of the three handlers
              "echo '# noqa: NM240'\n"  # a string, not a comment
              "export FOO=1  # neuron-migrate: ignore\n")
    found = [(f.code, f.line, f.col) for f in shell(tmp_path, script).findings]
    assert found == [("NM901", 2, 10), ("NM901", 4, 15)]
    assert shell(tmp_path, script, ignore=frozenset({"NM601"})).findings[0].line == 4  # a code not checked


def test_a_used_suppression_in_setup_py_is_not_reported_by_the_python_engine():
    text = ('from setuptools import setup\n\nsetup(\n    install_requires=[\n'
            '        "torch-xla==2.9.0",  # noqa: NM601\n        "numpy",  # noqa: NM401\n    ],\n)\n')
    found = [(f.code, f.line) for f in run("python", "setup.py", text).findings]
    assert ("NM601", 5) not in found and ("NM901", 5) not in found
    assert ("NM901", 6) in found  # nothing there is NM401


def test_requirements_line_continuation_and_a_lookalike_comment():
    text = ("--extra-index-url https://pip.repos.neuron.amazonaws.com\n"
            "torch-xla==2.9.0 \\\n    --hash=sha256:00  # noqa: NM605\n"
            "libneuronxla==2.2.0 # see https://example.com/#noqa: NM601\n")
    codes = [(f.code, f.line) for f in run("requirements", "requirements.txt", text).findings]
    assert ("NM605", 2) not in codes
    assert ("NM605", 4) in codes  # `#noqa` inside a URL fragment is no comment of ours


# -- the cache sees the files a handler read ------------------------------------------------------------------

def test_cached_launch_finding_follows_the_program_it_reads(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (project / "run.sh").write_text("python train.py\n")
    (project / "train.py").write_text(SPAWNED.format(nprocs=4))
    env = {"NEURON_MIGRATE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(os.getcwd())}

    def nm240() -> int:
        out = cli("check", "--format", "json", "run.sh", cwd=project, env=env)
        assert out.returncode in (0, 1), out.stderr
        return sum(1 for f in json.loads(out.stdout)["findings"] if f["code"] == "NM240")

    assert nm240() == 1
    assert nm240() == 1 and list((tmp_path / "cache").glob("*-*.json"))  # served from the cache
    (project / "train.py").write_text("import torch\n\nprint(torch.__version__)\n")  # no spawn any more
    assert nm240() == 0
    (project / "train.py").unlink()
    assert nm240() == 0
    (project / "train.py").write_text(SPAWNED.format(nprocs=2))  # a program that was missing appears
    assert nm240() == 1


def test_cached_requirements_follow_the_files_they_include(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "requirements.txt").write_text("-r base.txt\ntorch-neuronx==2.14.3.0.*\n")
    (tmp_path / "base.txt").write_text("--extra-index-url https://pip.repos.neuron.amazonaws.com\n")
    env = {"NEURON_MIGRATE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(os.getcwd())}

    def codes() -> list[str]:
        out = cli("check", "--format", "json", "requirements.txt", cwd=tmp_path, env=env)
        return sorted(f["code"] for f in json.loads(out.stdout)["findings"])

    first = codes()
    assert "NM604" not in first and codes() == first
    (tmp_path / "base.txt").write_text("numpy\n")  # the index is gone
    assert "NM604" in codes()
