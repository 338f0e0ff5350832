"""Other stacks than the XLA-based Neuron one are left as written: the XLA-stack libraries themselves (their sources
and pins, one note per library), TPU installs and environments, Inferentia 1 code and installs (NM513).

Cases are project trees: fixtures/stack/<case>/ (XLA-stack libraries next to code that uses them) and
fixtures/products/<case>/ (TPU, Inferentia 1). `rewrite` (every rule) gives the files in the case's `expected/`
folder (a Python file as `<name>.expected.py`, as elsewhere in fixtures/); every other file stays byte-identical;
a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.engine.stack import Finder, set_aside
from neuron_migrate.engine.discover import Target
from neuron_migrate.files.launch import process_shell as launch_shell
from neuron_migrate.pin.command import PIN_CODES
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, cli, deadline

CASES = sorted(p for family in ("stack", "products") for p in (FIXTURES / family).iterdir() if p.is_dir())

# case -> the XLA-stack libraries its run leaves alone: (name, folder relative to the case, files)
LIBRARIES = {
    "torch_xla_wheel": [("torch_xla", "torch_xla", 9)],
    "optimum_neuron_project": [("optimum-neuron", ".", 9)],
    "vendored": [("neuronx-distributed", "third_party/neuronx_distributed", 3),
                 ("optimum-neuron", "third_party/optimum/neuron", 2),
                 ("transformers-neuronx", "third_party/transformers_neuronx", 2)],
    "nxdt_setup_py": [("neuronx-distributed-training", ".", 7)],
    "nemo_fork": [("the Neuron fork of NeMo, Megatron and apex (neuronx-nemo-megatron)", "neuronx-nemo-megatron", 10)],
    "multibackend_vendored": [("accelerate", "third_party/accelerate", 3), ("Lightning", "third_party/lightning", 4),
                              ("transformers", "third_party/transformers", 2)],
    "lookalike_project": [],
    "sphinx_docs": [],  # the Sphinx conf.py that imports torch_xla is left alone, the trainer's conf.py is not
    "tpu_project": [],
    "inf1_project": [],
}


def inputs(case):
    return sorted(p for p in case.rglob("*") if p.is_file() and "expected" not in p.relative_to(case).parts)


def copy_case(case, tmp_path):
    work = tmp_path / case.name
    shutil.copytree(case, work, ignore=shutil.ignore_patterns("expected"))
    return work


def test_every_case_is_listed():
    assert sorted(c.name for c in CASES) == sorted(LIBRARIES)


UPDATE = os.environ.get("NEURON_MIGRATE_UPDATE_SNAPSHOTS") == "1"  # rewrite the expected files that exist


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rewrite_gives_expected_files_and_reports_each_library_once(case, tmp_path):
    work = copy_case(case, tmp_path)
    first = run([str(work)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert not first.errors
    write_results(first)
    for source in inputs(case):
        relative = source.relative_to(case)
        expected = case / "expected" / relative
        if relative.suffix == ".py":
            expected = expected.with_name(relative.stem + ".expected.py")
        if UPDATE and expected.exists():
            expected.write_bytes((work / relative).read_bytes())
        want = expected.read_bytes() if expected.exists() else source.read_bytes()
        assert (work / relative).read_bytes().decode() == want.decode(), f"{case.name}/{relative}"
    libraries = [(lib.name, os.path.relpath(os.path.abspath(lib.root), work), lib.files) for lib in first.libraries]
    assert libraries == LIBRARIES[case.name]
    library_files = {str(work / root) for _, root, _ in LIBRARIES[case.name]}
    assert not [r.path for r in first.results if any(r.path.startswith(f + os.sep) for f in library_files)]
    second = run([str(work)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert [r.path for r in second.changed] == []


@pytest.mark.parametrize("case", [c for c in CASES if LIBRARIES[c.name]], ids=lambda c: c.name)
def test_pin_leaves_the_pins_of_a_library_alone(case, tmp_path):
    work = copy_case(case, tmp_path)
    result = run([str(work)], Settings(select=PIN_CODES), rewrite=True, jobs=1)
    library_files = [str(work / root) for _, root, _ in LIBRARIES[case.name]]
    assert not [r.path for r in result.changed if any(r.path.startswith(f + os.sep) for f in library_files)]


def test_check_reports_nothing_in_a_library_and_one_note_per_library(tmp_path):
    work = copy_case(FIXTURES / "stack" / "vendored", tmp_path)
    result = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    assert {os.path.relpath(f.path, work) for f in result.findings} == {os.path.join("scripts", "train_tp.py")}
    assert [lib.files for lib in result.libraries] == [3, 2, 2]
    assert all("left alone" in lib.message and "XLA-based stack" in lib.message for lib in result.libraries)


def test_outputs_carry_the_notes_and_keep_the_exit_code(tmp_path):
    work = copy_case(FIXTURES / "stack" / "torch_xla_wheel", tmp_path)
    (work / "train.py").unlink()
    text = cli("check", "--no-cache", ".", cwd=work)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("torch_xla: note: torch_xla is part of the XLA-based stack (package `torch_xla`)")
    assert "1 XLA-stack library left alone (9 files)" in text.stdout
    data = json.loads(cli("check", "--no-cache", "--format", "json", ".", cwd=work).stdout)
    assert data["findings"] == [] and [(x["path"], x["library"], x["files"]) for x in data["libraries"]] == [
        ("torch_xla", "torch_xla", 9)]
    sarif = json.loads(cli("check", "--no-cache", "--format", "sarif", ".", cwd=work).stdout)
    notes = sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert sarif["runs"][0]["results"] == [] and [n["level"] for n in notes] == ["note"]
    github = cli("check", "--no-cache", "--format", "github", ".", cwd=work).stdout
    assert github.startswith("::notice file=torch_xla,title=neuron-migrate::torch_xla is part of the XLA-based")
    rewritten = cli("rewrite", "--no-cache", "--diff", "--report", str(tmp_path / "report.md"), ".", cwd=work)
    assert rewritten.returncode == 0 and rewritten.stdout == ""
    assert "1 XLA-stack library left alone (9 files):" in rewritten.stderr
    report = (tmp_path / "report.md").read_text()
    assert "### Libraries left alone" in report and "- `torch_xla`: torch_xla is part of" in report


def test_a_file_named_on_the_command_line_inside_a_library_is_left_alone_too(tmp_path):
    work = copy_case(FIXTURES / "stack" / "torch_xla_wheel", tmp_path)
    result = run([str(work / "torch_xla" / "core" / "xla_model.py")], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert result.results == [] and [(lib.name, lib.files) for lib in result.libraries] == [("torch_xla", 1)]


def _targets(root, *paths):
    return [Target(str(root / p), "python") for p in paths]


def _write(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.mark.parametrize("files, library", [
    ({"setup.py": 'from setuptools import setup\nsetup(name="transformers-neuronx", version="0.13")\n'},
     "transformers-neuronx"),
    ({"setup.py": 'import setuptools\nNAME = "neuronx_distributed"\nsetuptools.setup(name=NAME)\n'},
     "neuronx-distributed"),
    ({"setup.py": 'import os\nfrom setuptools import setup\n'
                  'setup(name=os.environ.get("TORCH_XLA_PACKAGE_NAME", "torch_xla"))\n'}, "torch_xla"),
    ({"setup.cfg": "[metadata]\nname = libneuronxla\n"}, "libneuronxla"),
    ({"pyproject.toml": '[tool.poetry]\nname = "Optimum_Neuron"\n'}, "optimum-neuron"),
    # multi-backend libraries: their XLA branches serve TPU users too
    ({"pyproject.toml": '[project]\nname = "accelerate"\n'}, "accelerate"),
    ({"setup.py": 'from setuptools import setup\nsetup(name="pytorch_lightning")\n'}, "Lightning"),
    ({"pyproject.toml": '[project]\nname = "accelerate-examples"\n'}, None),
    # a pyproject.toml that only configures tools declares no project: the setup.py above it does
    ({"setup.py": 'from setuptools import setup\nsetup(name="neuronx-distributed-inference")\n',
      "examples/pyproject.toml": "[tool.ruff]\nline-length = 120\n"}, "neuronx-distributed-inference"),
    # look-alikes: a name that mentions XLA, a nested project of its own, a repository root above the project file
    ({"pyproject.toml": '[project]\nname = "my-xla-tools"\n'}, None),
    ({"pyproject.toml": '[project]\nname = "torch-xla-examples"\n'}, None),
    ({"setup.py": 'from setuptools import setup\nsetup(name="neuronx-distributed")\n',
      "examples/setup.py": 'from setuptools import setup\nsetup(name="nxd-llama-example")\n'}, None),
    ({"setup.py": 'from setuptools import setup\nsetup(name="torch_xla")\n', "examples/.git/HEAD": "ref\n"}, None),
])
def test_the_project_declared_above_the_file_tells(tmp_path, files, library):
    _write(tmp_path, {**files, "examples/run.py": "import torch_xla\n"})
    found = Finder().library_of(str(tmp_path / "examples" / "run.py"))
    assert (found.spec.name if found else None) == library


def test_a_setup_cfg_that_configparser_would_read_for_hours_is_read_as_one_without_a_name(tmp_path):
    """A line of blanks between two words (no `=` or `:`) makes configparser's option pattern backtrack: quadratic,
    6 s for 32,000 blanks. The file is a tree's, untrusted: it is read as a project without a readable name, at
    once; blanks that align a `=`, or stand after it, are read as ever."""
    slow = "[metadata]\nname = torch_xla\nsummary a" + " " * 500_000 + "b\n"
    _write(tmp_path, {"setup.cfg": slow, "examples/run.py": "import torch_xla\n"})
    with deadline(5, "setup.cfg"):
        assert Finder().library_of(str(tmp_path / "examples" / "run.py")) is None
    aligned = "[metadata]\n# a comment" + " " * 40 + "with blanks\nname" + " " * 30 + "= torch_xla\n" \
        "description = a" + " " * 40 + "b\n"
    _write(tmp_path, {"setup.cfg": aligned})
    assert Finder().library_of(str(tmp_path / "examples" / "run.py")).spec.name == "torch_xla"


@pytest.mark.parametrize("files, library", [
    (["torch_xla/__init__.py", "torch_xla/core/__init__.py"], "torch_xla"),
    (["src/optimum/neuron/__init__.py", "src/optimum/neuron/core/__init__.py"], "optimum-neuron"),
    (["nemo/neuronx-nemo-megatron/apex/apex/__init__.py", "nemo/neuronx-nemo-megatron/apex/apex/core/__init__.py"],
     "the Neuron fork of NeMo, Megatron and apex (neuronx-nemo-megatron)"),
    # look-alikes: a subpackage named torch_xla, a folder named torch_xla without __init__.py, optimum itself
    (["mypkg/__init__.py", "mypkg/torch_xla/__init__.py", "mypkg/torch_xla/core/__init__.py"], None),
    (["scripts/torch_xla/core/__init__.py"], None),
    (["optimum/__init__.py", "optimum/core/__init__.py"], None),
    (["src/transformers/__init__.py", "src/transformers/models/__init__.py"], "transformers"),
    (["src/lightning/__init__.py", "src/lightning/fabric/__init__.py"], "Lightning"),
    (["mypkg/__init__.py", "mypkg/accelerate/__init__.py"], None),
    (["nemo/nemo/__init__.py", "nemo/nemo/core/__init__.py"], None),
])
def test_the_files_own_top_level_package_tells(tmp_path, files, library):
    _write(tmp_path, {name: "" for name in files})
    module = tmp_path / os.path.dirname(files[-1]) / "module.py"
    module.write_text("import torch_xla\n")
    found = Finder().library_of(str(module))
    assert (found.spec.name if found else None) == library


def test_set_aside_counts_files_per_library_and_keeps_the_rest(tmp_path):
    _write(tmp_path, {"torch_xla/__init__.py": "", "torch_xla/a.py": "", "torch_xla/b/__init__.py": "",
                      "train.py": ""})
    kept, libraries = set_aside(_targets(tmp_path, "torch_xla/a.py", "train.py", "torch_xla/b/__init__.py"))
    assert [t.path for t in kept] == [str(tmp_path / "train.py")]
    assert [(lib.name, lib.files) for lib in libraries] == [("torch_xla", 2)]


def test_a_tpu_launch_script_keeps_its_launcher(tmp_path):
    """`python train.py` of a program that calls xmp.spawn becomes torchrun for Neuron, not in a TPU script."""
    (tmp_path / "train.py").write_text("import torch_xla.distributed.xla_multiprocessing as xmp\n\n"
                                       "def _mp_fn(i):\n    pass\n\nxmp.spawn(_mp_fn, nprocs=8)\n")
    neuron = b"export NEURON_RT_NUM_CORES=8\npython train.py\n"
    tpu = b"export PJRT_DEVICE=TPU\npython train.py\n"
    script = str(tmp_path / "run.sh")
    assert launch_shell(script, neuron, Settings(unsafe_fixes=True), True).new_bytes is not None
    result = launch_shell(script, tpu, Settings(unsafe_fixes=True), True)
    assert result.new_bytes is None and result.findings == []


def test_inferentia1_installs_report_nm513_once_per_command(tmp_path):
    work = copy_case(FIXTURES / "products" / "inf1_project", tmp_path)
    result = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    found = sorted((os.path.basename(f.path), f.cell, f.code) for f in result.findings)
    assert found == [("Dockerfile", None, "NM513"), ("compile.py", None, "NM513"), ("compile.sh", None, "NM513"),
                     ("inf1_resnet50.ipynb", 2, "NM513"), ("inf1_resnet50.ipynb", 3, "NM513"),
                     ("requirements.txt", None, "NM513")]
    pinned = run([str(work)], Settings(select=PIN_CODES), rewrite=False, jobs=1)
    assert {f.code for f in pinned.findings} == {"NM513"}


def test_tpu_files_get_no_finding_about_neuron(tmp_path):
    work = copy_case(FIXTURES / "products" / "tpu_project", tmp_path)
    (work / "eval.sh").unlink()  # the script that serves both stacks (its Neuron lines are migrated)
    result = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    assert result.findings == []


def test_a_lock_file_of_another_product_is_not_judged(tmp_path):
    from neuron_migrate.pin.lockfile import process_lockfile

    lock = 'version = 1\n\n[[package]]\nname = "{}"\nversion = "{}"\n\n[[package]]\nname = "torch"\nversion = "{}"\n'
    inf1 = lock.format("torch-neuron", "1.13.1.2.9.6.0", "1.13.1").encode()
    tpu = lock.format("libtpu", "0.0.21", "2.9.0").encode()
    neuron = lock.format("torch-xla", "2.9.0", "2.9.0").encode()
    assert process_lockfile("uv.lock", inf1, Settings(), False).findings == []
    assert process_lockfile("uv.lock", tpu, Settings(), False).findings == []
    assert {f.code for f in process_lockfile("uv.lock", neuron, Settings(), False).findings} == {"NM609"}


def test_a_fork_cloned_under_another_name_is_told_by_its_git_remote(tmp_path):
    repo = tmp_path / "workspace"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text('[remote "origin"]\n\turl = https://github.com/aws-neuron/'
                                          'neuronx-nemo-megatron.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n')
    (repo / "nemo" / "collections").mkdir(parents=True)
    (repo / "nemo" / "collections" / "train.py").write_text("import torch_xla.core.xla_model as xm\nxm.mark_step()\n")
    kept, libraries = set_aside(_targets(repo, "nemo/collections/train.py"))
    assert kept == [] and [lib.evidence for lib in libraries] == [
        "the git remote `https://github.com/aws-neuron/neuronx-nemo-megatron.git`"]
    (repo / ".git" / "config").write_text('[remote "origin"]\n\turl = git@github.com:me/my-nemo-experiments.git\n')
    kept, libraries = set_aside(_targets(repo, "nemo/collections/train.py"))
    assert len(kept) == 1 and libraries == []


FORK = "the Neuron fork of NeMo, Megatron and apex (neuronx-nemo-megatron)"


@pytest.mark.parametrize("files, library", [
    ({"setup.py": 'from setuptools import setup\nsetup(name="nemo_toolkit",\n'
                  '      url="https://github.com/aws-neuron/neuronx-nemo-megatron")\n'}, FORK),
    ({"pyproject.toml": '[project]\nname = "nemo-toolkit"\n\n[project.urls]\n'
                        'Source = "https://github.com/aws-neuron/neuronx-nemo-megatron/tree/main/nemo"\n'}, FORK),
    ({"setup.cfg": "[metadata]\nname = nemo_toolkit\nproject_urls =\n"
                   "    Source = git@github.com:aws-neuron/neuronx-nemo-megatron.git\n"}, FORK),
    ({"nemo_toolkit.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: nemo-toolkit\nVersion: 1.14.0\n"
                                        "Home-page: https://github.com/aws-neuron/neuronx-nemo-megatron\n\nNeMo\n"},
     FORK),
    ({"neuronx_nemo_megatron.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: neuronx-nemo-megatron\n"}, FORK),
    # look-alikes: upstream NeMo's metadata, a repository whose name only starts the same, an unreadable name,
    # a folder of several projects' egg-infos (site-packages-like), the body of a PKG-INFO (not its headers)
    ({"setup.py": 'from setuptools import setup\nsetup(name="nemo_toolkit", url="https://github.com/NVIDIA/NeMo")\n'},
     None),
    ({"pyproject.toml": '[project]\nname = "nemo-notes"\n\n[project.urls]\n'
                        'Home = "https://github.com/me/neuronx-nemo-megatron-notes"\n'}, None),
    ({"a.egg-info/PKG-INFO": "Name: neuronx-nemo-megatron\n", "b.egg-info/PKG-INFO": "Name: b\n"}, None),
    ({"nemo_toolkit.egg-info/PKG-INFO": "Name: nemo-toolkit\n\nForked from github.com/aws-neuron/"
                                        "neuronx-nemo-megatron\nHome-page: https://github.com/aws-neuron/"
                                        "neuronx-nemo-megatron\n"}, None),
], ids=["setup.py url", "project.urls", "setup.cfg project_urls", "egg-info home-page", "egg-info name",
        "upstream nemo", "similar repository", "several egg-infos", "pkg-info body"])
def test_a_fork_under_another_folder_name_is_told_by_its_package_metadata(tmp_path, files, library):
    root = tmp_path / "workspace" / "nemo"
    _write(root, {**files, "nemo/__init__.py": "", "nemo/core/__init__.py": "",
                  "nemo/core/optim.py": "import torch_xla.core.xla_model as xm\n"})
    found = Finder().library_of(str(root / "nemo" / "core" / "optim.py"))
    assert (found.spec.name if found else None) == library
    if library:
        assert found.root == str(root) and ("names the repository" in found.evidence or "declares" in found.evidence)


def test_a_sphinx_configuration_is_left_alone_and_says_why(tmp_path):
    work = copy_case(FIXTURES / "stack" / "sphinx_docs", tmp_path)
    result = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    by_path = {os.path.relpath(r.path, work): r for r in result.results}
    docs = by_path[os.path.join("docs", "source", "conf.py")]
    assert not docs.findings and "Sphinx documentation configuration" in docs.skipped
    trainer = by_path[os.path.join("trainer", "conf.py")]
    assert not trainer.skipped and {f.code for f in trainer.findings} >= {"NM101"}
