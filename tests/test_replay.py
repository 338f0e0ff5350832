"""A `check` whose inputs did not change is replayed from its record (engine/replay.py): the same output and exit
code, and any change to what the recorded run looked at (a file, a folder's entries, a config file where one was
looked for, a link, the environment, the command line) runs the command again."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from neuron_migrate.engine import replay, store

LEGACY = "import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\nxm.mark_step()\n"
# A look-alike of the legacy module: no finding, until one letter makes it the real one (same size)
CLEAN = "import torch_xlb.core.xla_model as xm\n\ndevice = xm.xla_device()\n"


class Command:
    """`neuron-migrate ARGS` the way start.main runs it, in this process: (exit code, stdout, stderr), and
    whether it was replayed."""

    def __init__(self, capsys, monkeypatch) -> None:
        self.capsys, self.monkeypatch = capsys, monkeypatch
        self.replayed: list[bool] = []
        real = replay.replay

        def spy(argv):
            code = real(argv)
            self.replayed.append(code is not None)
            return code

        monkeypatch.setattr(replay, "replay", spy)

    def __call__(self, *args: str) -> tuple[int, str, str]:
        from neuron_migrate.start import main

        self.monkeypatch.setattr(replay, "ARGV", None)  # as a new process has it
        self.monkeypatch.setattr(sys, "argv", ["neuron-migrate", *args])
        sigint = signal.getsignal(signal.SIGINT)  # the command line ignores Ctrl-C once it has said everything
        self.capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        finally:
            signal.signal(signal.SIGINT, sigint)
        assert not replay.recording(), "a command left its recording on"
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose files are older than the run (`SLACK_NS` 0: a file changed before the run started is
    never taken for one changed during it), its own cache folder and user secret."""
    _own_cache(tmp_path, monkeypatch)
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n", encoding="utf-8")
    (root / "train.py").write_text(LEGACY, encoding="utf-8")
    (root / "pkg" / "util.py").write_text(CLEAN, encoding="utf-8")
    monkeypatch.chdir(root)
    yield root
    store.user_key.cache_clear()


def _own_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("NEURON_MIGRATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user"))
    monkeypatch.setattr(replay, "SLACK_NS", 0)
    store.user_key.cache_clear()


@pytest.fixture
def command(capsys, monkeypatch):
    return Command(capsys, monkeypatch)


def _records(cache) -> list:
    return sorted(cache.glob(f"{replay.PREFIX}*.json"))


def _same_bytes_and_times(path, text: str) -> None:
    """New content of the same size, the old mtime put back (`cp -p`, `rsync -t`, `touch -r`): only the ctime
    tells."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_second_check_is_replayed_with_the_same_output_and_exit_code(project, command, tmp_path):
    first = command("check", ".")
    assert first[0] == 1 and "NM101" in first[1]
    assert len(_records(tmp_path / "cache")) == 1
    assert command("check", ".") == first
    assert command.replayed == [False, True]
    # the full command prints the same: the record is what it printed
    assert command("check", "--no-cache", ".") == first


@pytest.mark.parametrize("fmt", ["concise", "json", "sarif", "github"])
def test_every_output_format_and_the_errors_are_replayed(project, command, fmt):
    (project / "broken.py").write_text("def f(:\n", encoding="utf-8")  # an error on stderr, exit 2
    first = command("check", "--format", fmt, ".")
    assert first[0] == 2
    assert command("check", "--format", fmt, ".") == first
    assert command.replayed == [False, True]


@pytest.mark.parametrize("args", [["--color", "always"], ["--hook", "train.py", "pkg/util.py"], ["--exit-zero", "-q"],
                                  ["--shard", "1/2"], ["--unsafe-fixes", "--format", "json"]],
                         ids=["colour", "pre-commit-hook", "exit-zero-quiet", "shard", "unsafe-json"])
def test_the_options_a_hook_or_ci_gives_are_replayed(project, command, args):
    paths = [] if "--hook" in args else ["."]
    first = command("check", *args, *paths)
    assert first[1]
    assert command("check", *args, *paths) == first
    assert command.replayed == [False, True]
    if "always" in args:
        assert "\x1b[" in first[1]


def test_statistics_and_its_summary_on_stderr_are_replayed(project, command):
    first = command("check", "--statistics", "--format", "json", ".")
    assert first[2].strip()
    assert command("check", "--statistics", "--format", "json", ".") == first
    assert command.replayed == [False, True]


def _edit_in_place(project):
    _same_bytes_and_times(project / "pkg" / "util.py", CLEAN.replace("torch_xlb", "torch_xla"))


def _new_file(project):
    (project / "pkg" / "more.py").write_text(LEGACY, encoding="utf-8")


def _removed_file(project):
    (project / "train.py").unlink()


def _renamed_file(project):
    (project / "train.py").rename(project / "pkg" / "train.py")


def _config_where_one_was_looked_for(project):
    (project / "pkg" / "pyproject.toml").write_text("[tool.neuron-migrate]\nignore = ['NM101']\n", encoding="utf-8")


def _config_edited(project):
    path = project / "pyproject.toml"
    path.write_text(path.read_text(encoding="utf-8") + "\n[tool.neuron-migrate]\nignore = ['NM103']\n",
                    encoding="utf-8")


def _gitignore(project):
    (project / ".gitignore").write_text("pkg/\n", encoding="utf-8")


def _file_swapped_for_a_link(project):
    other = project.parent / "elsewhere.py"
    other.write_text(LEGACY.replace("mark_step", "rendezvous"), encoding="utf-8")
    (project / "train.py").unlink()
    (project / "train.py").symlink_to(other)


def _folder_swapped_for_a_link(project):
    other = project.parent / "other_pkg"
    other.mkdir()
    (other / "util.py").write_text(LEGACY, encoding="utf-8")
    (project / "pkg" / "util.py").unlink()
    (project / "pkg").rmdir()
    (project / "pkg").symlink_to(other, target_is_directory=True)


def _virtual_environment_marker(project):
    (project / "pkg" / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")


@pytest.mark.parametrize("change", [_edit_in_place, _new_file, _removed_file, _renamed_file,
                                    _config_where_one_was_looked_for, _config_edited, _gitignore,
                                    _file_swapped_for_a_link, _folder_swapped_for_a_link,
                                    _virtual_environment_marker])
def test_a_change_to_what_the_run_looked_at_runs_the_command_again(project, command, change):
    before = command("check", "--format", "concise", ".")
    change(project)
    after = command("check", "--format", "concise", ".")
    assert command.replayed == [False, False]
    assert after == command("check", "--no-cache", "--format", "concise", ".")
    assert after != before, "the change must show in the findings, or this test proves nothing"
    # and the new run is recorded in turn
    assert command("check", "--format", "concise", ".") == after
    assert command.replayed[-1]


def test_the_command_line_the_folder_and_the_environment_are_part_of_the_key(project, command, monkeypatch):
    command("check", ".")
    command("check", "--format", "concise", ".")  # another command line
    monkeypatch.chdir(project / "pkg")
    command("check", "..")  # the same arguments from another folder would print other paths
    monkeypatch.chdir(project)
    monkeypatch.setenv("NO_COLOR", "1")
    command("check", ".")
    assert command.replayed == [False, False, False, False]
    monkeypatch.delenv("NO_COLOR")
    command("check", ".")
    assert command.replayed[-1]


def test_an_unchanged_tree_of_many_files_processed_by_workers_is_replayed_and_their_reads_count(
        project, command):
    """The workers tell what they looked at: a file no one but a worker read (it has no findings, so its lines are
    not shown) still takes the replay away when it changes."""
    for i in range(24):
        (project / "pkg" / f"clean{i}.py").write_text(CLEAN, encoding="utf-8")
    first = command("check", "-j", "2", "--format", "concise", ".")
    assert command("check", "-j", "2", "--format", "concise", ".") == first
    assert command.replayed == [False, True]
    _same_bytes_and_times(project / "pkg" / "clean7.py", CLEAN.replace("torch_xlb", "torch_xla"))
    after = command("check", "-j", "2", "--format", "concise", ".")
    assert not command.replayed[-1]
    assert "clean7.py" in after[1]


def test_what_is_not_recorded(project, command, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    for args in (["--no-cache"], ["--output-file", str(tmp_path / "out.txt")], ["--show-project"]):
        command("check", *args, ".")
        assert not _records(cache), args
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(LEGACY.encode())))
    assert command("check", "-")[0] == 1  # standard input
    assert not _records(cache)
    # a file changed during the run, or too recently to tell: no record, the next run makes one
    monkeypatch.setattr(replay, "SLACK_NS", 3_600_000_000_000)
    command("check", ".")
    assert not _records(cache)


def test_a_config_warning_is_not_replayed_away(project, command, tmp_path):
    path = project / "pyproject.toml"
    path.write_text(path.read_text(encoding="utf-8") + "\n[tool.neuron-migrate]\nno-such-option = 1\n",
                    encoding="utf-8")
    first = command("check", ".")
    assert "warning" in first[2]
    assert not _records(tmp_path / "cache")
    assert command("check", ".") == first


def test_a_record_the_tool_did_not_sign_is_not_replayed(project, command, tmp_path):
    first = command("check", ".")
    [record] = _records(tmp_path / "cache")
    mac, body = record.read_bytes().split(b"\n", 1)
    data = json.loads(body)
    data["out"] = "All clear.\n"
    data["exit"] = 0
    record.write_bytes(mac + b"\n" + json.dumps(data).encode())
    assert command("check", ".") == first
    assert command.replayed[-1] is False
    # signed with another user's secret
    forged = json.dumps({**data}).encode()
    record.write_bytes(store.keyed_digest(b"k" * 32, record.name.encode() + b"\0" + forged).encode() + b"\n" + forged)
    assert command("check", ".") == first
    assert command.replayed[-1] is False


def test_a_record_reached_through_a_link_is_not_read(project, command, tmp_path):
    command("check", ".")
    [record] = _records(tmp_path / "cache")
    moved = tmp_path / "moved.json"
    record.rename(moved)
    record.symlink_to(moved)
    command("check", ".")
    assert command.replayed[-1] is False


def test_only_the_most_recent_records_are_kept(project, command, tmp_path):
    for i in range(replay.KEEP + 3):
        command("check", "--select", f"NM10{i}", ".")
    assert len(_records(tmp_path / "cache")) == replay.KEEP
    command("check", "--select", f"NM10{replay.KEEP + 2}", ".")
    assert command.replayed[-1]


def test_a_replay_writes_nothing(project, command, tmp_path):
    command("check", ".")
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    command("check", ".")
    assert command.replayed[-1]
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_users_way_the_replay_loads_neither_the_command_line_nor_the_rules(tmp_path):
    """`python -m neuron_migrate` in a new process, as users and pre-commit run it, over enough files for the
    workers; the record is made by a run that starts `SLACK_NS` after the files were written (the test waits)."""
    root = tmp_path / "proj"
    root.mkdir()
    for i in range(40):  # more than a pipe holds of findings and code frames: the reader can go away mid-way
        (root / f"train{i}.py").write_text(LEGACY + "xm.mark_step()\n" * 30, encoding="utf-8")
    for folder in ("cache", "u"):  # made now: the run lists the folders above the tree (no project marker there)
        (tmp_path / folder).mkdir()
    env = {**os.environ, "NEURON_MIGRATE_CACHE_DIR": str(tmp_path / "cache"), "XDG_CACHE_HOME": str(tmp_path / "u")}
    time.sleep(replay.SLACK_NS / 1e9 + 0.1)
    code = ("import sys\n"
            "from neuron_migrate.start import main\n"
            "sys.argv = ['neuron-migrate', 'check', '-j', '2', '.']\n"
            "try:\n"
            "    main()\n"
            "finally:\n"
            "    loaded = [m for m in ('click', 'libcst', 'neuron_migrate.cli', 'neuron_migrate.rules', 'hashlib')\n"
            "              if m in sys.modules]\n"
            "    sys.stderr.write(f'loaded: {loaded}\\n')\n")
    command = [sys.executable, "-c", code]

    def run():
        return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)

    first, second = run(), run()
    assert first.returncode == second.returncode == 1
    assert "NM101" in first.stdout and second.stdout == first.stdout
    assert len(first.stdout) > 1 << 17
    assert "'click'" in first.stderr
    assert second.stderr == "loaded: []\n"
    by_module = subprocess.run([sys.executable, "-m", "neuron_migrate", "check", "-j", "2", "."], cwd=root, env=env,
                               capture_output=True, text=True, timeout=300, check=False)
    assert (by_module.returncode, by_module.stdout) == (1, first.stdout)
    # the reader goes away after the first lines (`| head`): exit 1 without a word, as the full command ends
    with subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        proc.stdout.read(200)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == 1
    assert err == "loaded: []\n"


def test_a_folder_above_the_tree_counts_by_the_names_looked_for_there(tmp_path, command, monkeypatch):
    """Above a tree without a project marker, the run looks for a project's `*.egg-info` in every folder up to the
    root (engine/stack.py): a new one there runs the command again, any other new entry (`/tmp` changes all the
    time) does not."""
    _own_cache(tmp_path, monkeypatch)
    above = tmp_path / "above"
    (above / "tree").mkdir(parents=True)
    (above / "tree" / "train.py").write_text(LEGACY, encoding="utf-8")
    monkeypatch.chdir(above / "tree")
    first = command("check", ".")
    (above / "notes.txt").write_text("unrelated\n", encoding="utf-8")
    assert command("check", ".") == first
    assert command.replayed == [False, True]
    egg = above / "torch_xla.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: torch_xla\nVersion: 2.9.0\n", encoding="utf-8")
    after = command("check", ".")
    assert not command.replayed[-1]
    assert after == command("check", "--no-cache", ".") != first


def test_an_upgraded_dependency_makes_another_tool(tmp_path, monkeypatch):
    """The cache and the records are the tool's: a LibCST upgrade (its `__init__.py` rewritten) makes other keys,
    so no result computed with the old one is reused."""
    from importlib.machinery import ModuleSpec, PathFinder

    fake = tmp_path / "libcst" / "__init__.py"
    fake.parent.mkdir()
    fake.write_text("VERSION = '1.8.0'\n", encoding="utf-8")
    real = PathFinder.find_spec

    def find_spec(name, *args):
        return ModuleSpec(name, None, origin=str(fake)) if name == "libcst" else real(name, *args)

    monkeypatch.setattr(PathFinder, "find_spec", find_spec)
    store.tool_fingerprint.cache_clear()
    before = store.tool_fingerprint()
    store.tool_fingerprint.cache_clear()
    assert store.tool_fingerprint() == before
    fake.write_text("VERSION = '1.9.0'\n", encoding="utf-8")
    os.utime(fake, ns=(1, 2))
    store.tool_fingerprint.cache_clear()
    assert store.tool_fingerprint() != before
    store.tool_fingerprint.cache_clear()
