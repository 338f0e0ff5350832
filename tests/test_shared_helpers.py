"""The module of helpers the scripts of one folder share (engine/shared.py): written by `rewrite` only, where the run
was given the folder, shown by `--diff`, copied into `--output-dir`, extended (never rewritten) when an earlier run
wrote it, and never written over a file of the project's own."""

from __future__ import annotations

import shutil
import subprocess
import sys
import types

import pytest

from neuron_migrate.engine import shared
from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.project_facts import FileProject
from neuron_migrate.findings import FileResult
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, cli

CASE = FIXTURES / "projects" / "shared_progress_helpers"
MODULE = "examples/training_progress.py"


@pytest.fixture
def work(tmp_path):
    out = tmp_path / "case"
    shutil.copytree(CASE, out, ignore=shutil.ignore_patterns("expected"))
    return out


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_rewrite_writes_the_module_and_says_so(work):
    out = cli("rewrite", "--no-cache", "--unsafe-fixes", str(work))
    assert out.returncode == 1, out.stderr  # the Dockerfile's base image is left for a person
    assert (work / MODULE).read_text() == (CASE / "expected/examples/training_progress.expected.py").read_text()
    assert "Rewrote 14 files (" in out.stdout  # the module is not counted among them
    assert f"created {work / MODULE}, the helpers its folder's scripts now import." in out.stdout
    again = cli("rewrite", "--no-cache", "--unsafe-fixes", str(work))
    assert "Rewrote 0 files" in again.stdout and "created" not in again.stdout


def test_check_and_diff_write_nothing(work):
    before = snapshot(work)
    checked = cli("check", "--no-cache", "--output-format", "concise", str(work / "examples"))
    assert "a class imported from training_progress.py, which the fix writes beside the file" in checked.stdout
    diff = cli("rewrite", "--diff", "--no-cache", str(work / "examples"))
    assert diff.returncode == 1
    assert f"--- /dev/null\n+++ b{work / MODULE}\n@@ -0,0 +1," in diff.stdout and "+class RateTracker:" in diff.stdout
    assert f"would create {work / MODULE}" in diff.stderr
    assert snapshot(work) == before


def test_output_dir_gets_the_module_and_the_source_stays(work, tmp_path):
    before = snapshot(work)
    out = cli("rewrite", "--no-cache", "--output-dir", str(tmp_path / "out"), str(work))
    assert out.returncode in (0, 1), out.stderr
    copy = tmp_path / "out"
    assert (copy / MODULE).read_text().startswith(shared.HELPERS_HEADER)
    assert f"created {copy / MODULE}, the helpers" in out.stdout
    assert "from training_progress import RateTracker" in (copy / "examples/train_cifar.py").read_text()
    assert snapshot(work) == before


def test_named_files_keep_their_own_copies(work):
    """A run on named files writes nothing beside them."""
    scripts = [str(work / "examples/train_mnist.py"), str(work / "examples/train_cifar.py")]
    out = cli("rewrite", "--no-cache", *scripts)
    assert out.returncode in (0, 1), out.stderr
    assert not (work / MODULE).exists()
    for script in scripts:
        text = open(script).read()
        assert "training_progress" not in text and "class RateTracker:" in text
        compile(text, script, "exec")


def test_shards_one_after_the_other_give_the_unsharded_tree(work, tmp_path):
    """Each shard's scripts import from the module as in the unsharded run (the project model sees every file);
    each shard writes or extends the module with what its scripts import."""
    whole = tmp_path / "whole"
    shutil.copytree(work, whole)
    assert cli("rewrite", "--no-cache", str(whole)).returncode in (0, 1)
    for k in (1, 2, 3):
        out = cli("rewrite", "--no-cache", "--shard", f"{k}/3", str(work))
        assert out.returncode in (0, 1), out.stderr
    assert snapshot(work) == snapshot(whole)


def test_a_module_of_the_projects_own_is_never_touched(work):
    (work / MODULE).write_text('"""Our own progress bars."""\n')
    out = cli("rewrite", "--no-cache", str(work / "examples"))
    assert out.returncode in (0, 1), out.stderr
    assert (work / MODULE).read_text() == '"""Our own progress bars."""\n'
    assert "class RateTracker:" in (work / "examples/train_cifar.py").read_text()


def test_a_module_an_earlier_run_wrote_gets_what_it_lacks_at_its_end(work):
    """The first run's module held only RateTracker (the cifar script's); a later run adds the mnist script's
    helpers after it, and the `import time` they read after the docstring, keeping every line already there."""
    shutil.copy(work / "examples/train_mnist.py", work / "examples/train_mnist_v2.py")
    earlier = f"{shared.HELPERS_HEADER}.\"\"\"\n\n\ndef close_summary_writer(summary_writer):\n  summary_writer.close()\n"
    (work / MODULE).write_text(earlier)
    result = run([str(work / "examples")], Settings(), rewrite=True, jobs=1)
    write_results(result)
    text = (work / MODULE).read_text()
    assert text.startswith(f'{shared.HELPERS_HEADER}."""\n\nimport time\n\n\ndef close_summary_writer(')
    assert "\n\n\nclass RateTracker:\n  \"\"\"Items" in text and "def get_summary_writer(logdir):" in text
    compile(text, MODULE, "exec")
    made = next(r for r in result.changed if r.path.endswith(MODULE))
    assert not made.created
    assert run([str(work / "examples")], Settings(), rewrite=True, jobs=1).changed == []


def test_render_follows_the_first_scripts_style():
    tabs = shared.render(["print_training_update"], "\t", '"')
    assert '\n\tprint("| Training Device=' in tabs and '\n\t    device, epoch_text' in tabs  # continuation kept
    assert tabs.startswith("import time\n\n\ndef print_training_update(")
    two = shared.render(["get_summary_writer", "close_summary_writer"], "  ", "'")
    assert "\n  if logdir:\n    from tensorboardX import SummaryWriter\n" in two
    assert "writer.add_scalar('TensorboardStartTimestamp', time.time(), 0)" in two
    namespace: dict = {}
    exec(compile(two, "two", "exec"), namespace)  # our own template, not user code
    closed = []
    namespace["close_summary_writer"](types.SimpleNamespace(flush=lambda: None, close=lambda: closed.append(1)))
    assert closed == [1]


def test_only_the_names_the_scripts_import_from_it_count(tmp_path):
    """A name the module cannot hold (the script's own import of another module of that name's list) is not asked
    for, and a script without the project fact writes no module."""
    script = tmp_path / "a.py"
    new = b"from training_progress import (\n    RateTracker,\n    not_ours,\n)\nimport time  # from training_progress import x\n"
    facts = {str(script): FileProject(shared_helpers="training_progress")}
    made = shared.modules([FileResult(str(script), old_bytes=b"x", new_bytes=new)], facts)
    assert [r.path for r in made] == [str(tmp_path / "training_progress.py")]
    text = made[0].new_bytes.decode()
    assert "class RateTracker:" in text and "def " not in text.split("class RateTracker:")[0]
    assert "not_ours" not in text and "def get_summary_writer" not in text
    assert shared.modules([FileResult(str(script), old_bytes=b"x", new_bytes=new)], {}) == []


def test_scripts_are_not_written_without_the_module(work):
    """The module's write fails (a folder of that name is in the way by then): the scripts that would import it
    stay as they were, with an error each; the other folders' files are written."""
    result = run([str(work)], Settings(), rewrite=True, jobs=1)
    (work / MODULE).mkdir()
    before = (work / "examples/train_cifar.py").read_bytes()
    failures = dict(write_results(result))
    assert set(failures) == {str(work / MODULE), str(work / "examples/train_mnist.py"),
                             str(work / "examples/train_cifar.py")}
    assert (work / "examples/train_cifar.py").read_bytes() == before
    assert "class RateTracker:" in (work / "tools/train_alone.py").read_text()


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_a_reports_fixes_keep_their_own_copies(work, fmt):
    """A fix of a JSON or SARIF report is applied alone, with no module beside it: NM244's brings its copy."""
    out = cli("check", "--no-cache", "--output-format", fmt, str(work / "examples"))
    assert out.returncode == 1, out.stderr
    assert "class RateTracker:" in out.stdout and "from training_progress import" not in out.stdout.replace(
        "(`from training_progress import", "")  # the rule's documentation (SARIF) shows the import as an example
    assert not (work / MODULE).exists()


def test_a_module_one_script_would_import_is_not_written(work):
    """The cifar script's progress line is written inline (no summary writer): were the mnist script not there,
    the cifar script alone would import the module; it keeps its copy instead, and nothing is created."""
    (work / "examples/train_mnist.py").unlink()
    result = run([str(work / "examples")], Settings(), rewrite=True, jobs=1)
    assert not any(r.created for r in result.changed)
    text = next(r for r in result.changed if r.path.endswith("train_cifar.py")).new_bytes.decode()
    assert "class RateTracker:" in text and "training_progress" not in text


def test_a_crlf_module_is_extended_in_crlf_with_its_import(work):
    """An earlier run's module, checked out with CRLF line ends, that holds no helper reading the clock: the
    helpers added read it, so `import time` comes after the docstring, and every line ends in CRLF."""
    earlier = (f"{shared.HELPERS_HEADER}.\"\"\"\n\n\ndef close_summary_writer(summary_writer):\n"
               "  summary_writer.close()\n").replace("\n", "\r\n")
    (work / MODULE).write_bytes(earlier.encode())
    result = run([str(work / "examples")], Settings(), rewrite=True, jobs=1)
    module = next(r for r in result.changed if r.path.endswith(MODULE))
    data = module.new_bytes
    assert data.count(b"\n") == data.count(b"\r\n")
    text = data.decode().replace("\r\n", "\n")
    assert text.startswith(f'{shared.HELPERS_HEADER}."""\n\nimport time\n\n\ndef close_summary_writer(')
    namespace: dict = {}
    exec(compile(text, MODULE, "exec"), namespace)  # the tool's own templates
    tracker = namespace["RateTracker"]()
    tracker.add(3)
    assert tracker.global_rate() >= 0


def test_the_module_passes_ruff(work):
    """Lint-clean as written: pycodestyle (its line length aside: the helpers are the copies NM244 writes), pyflakes,
    isort."""
    assert cli("rewrite", "--no-cache", str(work / "examples")).returncode in (0, 1)
    helpers = work / "examples" / "helpers"
    helpers.mkdir()
    earlier = helpers / "training_progress.py"  # an earlier run's, extended with what reads the clock
    earlier.write_text(f'{shared.HELPERS_HEADER}."""\n\n\ndef close_summary_writer(summary_writer):\n'
                       "    summary_writer.close()\n")
    script = str(helpers / "a.py")
    made = shared.modules([FileResult(script, old_bytes=b"x", new_bytes=b"from training_progress import RateTracker\n")],
                          {script: FileProject(shared_helpers="training_progress")})
    earlier.write_bytes(made[0].new_bytes)
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "E,W,F,I", "--ignore", "E501", "--no-cache",
                           str(work / MODULE), str(earlier)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_the_output_copy_leaves_out_the_scripts_when_the_module_cannot_be_written(work, tmp_path):
    """--output-dir: a folder is in the way of the module in the copy; the scripts that import it are not written
    there (each an error), the others are."""
    from neuron_migrate.engine import outdir

    out = tmp_path / "out"
    tree = outdir.plan((str(work),), str(out))
    result = run([str(work)], Settings(), rewrite=True, jobs=1)
    (out / "examples" / "training_progress.py").mkdir(parents=True)
    outdir.write_tree(tree, result)
    errors = {r.path for r in result.results if r.error}
    assert errors == {str(work / MODULE), str(work / "examples/train_mnist.py"), str(work / "examples/train_cifar.py")}
    assert (out / "examples/train_cifar.py").read_bytes() == (work / "examples/train_cifar.py").read_bytes()
    assert "class RateTracker:" in (out / "tools/train_alone.py").read_text()
