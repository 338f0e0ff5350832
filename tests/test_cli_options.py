"""The options a ruff user expects, through the real entry point (`python -m neuron_migrate` in a subprocess):
standard input, -q, --statistics, --output-file, --config, --select lists, -j, refused combinations, the report
format, folder loops, --add-noqa, JSON / SARIF / GitHub details, colour, code frames, help widths."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli

LEGACY = """import torch_xla.core.xla_model as xm

device = xm.xla_device()
xm.mark_step()
"""
MIGRATED = 'import torch\n\ndevice = torch.device("neuron")\n'
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def concise(*args, **kw):
    return cli("check", "--no-cache", "--output-format", "concise", *args, **kw)


def listed(out) -> list[str]:
    """The lines of `check`'s standard output above its summary, which comes last (where ruff prints
    `Found N errors.`)."""
    lines = out.stdout.splitlines()
    assert lines and lines[-1].startswith(("Found ", "All clear")), out.stdout
    return lines[:-1]


# -- standard input -------------------------------------------------------------------------------------------

def test_check_reads_standard_input(tmp_path):
    out = concise("-", input=LEGACY, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert [line.split(": ")[0] for line in listed(out)] == ["-:1:8", "-:3:10", "-:4:1"]
    named = concise("--stdin-filename", "src/train.py", input=LEGACY, cwd=tmp_path)
    assert named.stdout.replace("src/train.py:", "-:") == out.stdout
    # the name gives the kind: a requirements file goes to the pin rules
    req = concise("-", "--stdin-filename", "requirements.txt", input="torch-neuronx==2.1.0\n", cwd=tmp_path)
    assert req.returncode == 1 and "requirements.txt:1:1: NM602" in req.stdout
    assert list(tmp_path.iterdir()) == []


def test_rewrite_reads_standard_input(tmp_path):
    diff = cli("rewrite", "--diff", "--stdin-filename", "pkg/train.py", input=LEGACY, cwd=tmp_path)
    assert diff.returncode == 1, diff.stderr
    assert diff.stdout.startswith("--- a/pkg/train.py\n+++ b/pkg/train.py\n@@ ")
    assert '+device = torch.device("neuron")' in diff.stdout
    fixed = cli("rewrite", "-", input=LEGACY, cwd=tmp_path)
    assert fixed.returncode == 0 and fixed.stdout == MIGRATED
    same = cli("rewrite", "-", input=MIGRATED, cwd=tmp_path)
    assert same.returncode == 0 and same.stdout == MIGRATED
    assert list(tmp_path.iterdir()) == []


def test_standard_input_is_not_mixed_with_paths(tmp_path):
    f = write(tmp_path / "train.py", LEGACY)
    for args in (("check", "-", str(f)), ("check", "--stdin-filename", "x.py", str(f)), ("check", "--hook", "-"),
                 ("check", "--add-noqa", "-"), ("rewrite", "-", "--output-dir", str(tmp_path / "out"))):
        out = cli(*args, input=LEGACY)
        assert out.returncode == 2 and "Error:" in out.stderr, args
    assert not (tmp_path / "out").exists()


# -- rewrite's exit code and unsafe fixes, as ruff's --fix ------------------------------------------------------

HELD = LEGACY + "model = Net().to(device)\nmodel.train()\n"  # NM107's compile: an unsafe fix


def test_rewrite_exits_1_while_items_are_left_and_its_exit_options(tmp_path):
    f = write(tmp_path / "train.py", HELD)
    done = cli("rewrite", "--no-cache", str(f))
    assert done.returncode == 1, done.stderr  # the compile is held back: left for a person
    assert ".compile(" not in f.read_text() and "[~] 1 unsafe fix held back" in done.stdout
    write(f, HELD)
    assert cli("rewrite", "--no-cache", "--exit-zero", str(f)).returncode == 0
    write(f, HELD)
    done = cli("rewrite", "--no-cache", "--unsafe-fixes", str(f))
    assert done.returncode == 0 and ".compile(" in f.read_text(), done.stdout  # nothing left
    assert cli("rewrite", "--no-cache", "--unsafe-fixes", str(f)).returncode == 0  # nothing to do
    write(f, HELD)
    assert cli("rewrite", "--no-cache", "--unsafe-fixes", "--exit-non-zero-on-fix", str(f)).returncode == 1
    assert cli("rewrite", "--no-cache", "--unsafe-fixes", "--exit-non-zero-on-fix", str(f)).returncode == 0


def test_safe_only_is_a_hidden_alias_of_the_default(tmp_path):
    f = write(tmp_path / "train.py", HELD)
    assert "--safe-only" not in cli("rewrite", "--help").stdout
    done = cli("rewrite", "--no-cache", "--safe-only", str(f))
    assert done.returncode == 1 and ".compile(" not in f.read_text() and "torch_xla" not in f.read_text()
    both = cli("rewrite", "--safe-only", "--unsafe-fixes", str(f))
    assert both.returncode == 2 and "contradict" in both.stderr


# -- -q, --statistics, --output-file ---------------------------------------------------------------------------

def test_quiet_prints_findings_only(tmp_path):
    f = write(tmp_path / "train.py", LEGACY)
    loud, quiet = concise(str(f)), concise("-q", str(f))
    assert quiet.returncode == loud.returncode == 1
    assert quiet.stdout.splitlines() == listed(loud) and quiet.stderr == loud.stderr == ""
    assert loud.stdout.splitlines()[-1].startswith("Found 3 findings in 1 file")
    rewrite = cli("rewrite", "--no-cache", "-q", str(f))
    assert rewrite.returncode == 0 and rewrite.stdout == rewrite.stderr == ""
    assert f.read_text() == MIGRATED


def test_statistics_counts_findings_by_code(tmp_path):
    write(tmp_path / "a.py", LEGACY)
    write(tmp_path / "b.py", LEGACY.replace("xm.mark_step()\n", "xm.mark_step()\nxm.mark_step()\n"))
    findings = json.loads(cli("check", "--no-cache", "--format", "json", str(tmp_path)).stdout)["findings"]
    out = cli("check", "--no-cache", "--statistics", str(tmp_path))
    assert out.returncode == 1
    rows = [line.split() for line in listed(out)]
    counts = {row[1]: int(row[0]) for row in rows}
    assert counts == {code: sum(1 for f in findings if f["code"] == code) for code in {f["code"] for f in findings}}
    assert [int(row[0]) for row in rows] == sorted(counts.values(), reverse=True)
    assert all(row[2] == "[*]" for row in rows)
    as_json = json.loads(cli("check", "--no-cache", "--statistics", "--format", "json", str(tmp_path)).stdout)
    assert {item["code"]: item["count"] for item in as_json} == counts
    assert cli("check", "--statistics", "--format", "sarif", str(tmp_path)).returncode == 2


def test_output_file_takes_what_stdout_would_show(tmp_path):
    f = write(tmp_path / "train.py", LEGACY)
    target = tmp_path / "out" / "findings.json"
    target.parent.mkdir()
    out = cli("check", "--no-cache", "--format", "json", "--output-file", str(target), str(f))
    assert out.returncode == 1 and out.stdout == ""
    assert target.read_text() == cli("check", "--no-cache", "--format", "json", str(f)).stdout
    text = tmp_path / "findings.txt"
    out = cli("check", "--no-cache", "--color", "always", "-o", str(text), str(f))
    assert out.stdout == "" and not ANSI.search(text.read_text()) and "^^^" in text.read_text()
    assert text.read_text().splitlines()[-1].startswith("Found 3 findings")  # the summary too, as ruff writes it


# -- --config, --select, -j, refused combinations, --report ---------------------------------------------------

def test_config_file_given_on_the_command_line(tmp_path):
    f = write(tmp_path / "src" / "train.py", LEGACY)
    write(tmp_path / "src" / "pyproject.toml", '[tool.neuron-migrate]\nselect = ["NM101"]\n')
    write(tmp_path / "ci" / "neuron-migrate.toml", 'select = ["NM103"]\n')
    write(tmp_path / "ci" / "pyproject.toml", '[tool.neuron-migrate]\nignore = ["NM190"]\n')
    codes = lambda out: [line.split()[1] for line in out.stdout.splitlines() if ": NM" in line]  # noqa: E731
    assert codes(concise(str(f))) == ["NM101"]  # the pyproject.toml found from the path
    assert codes(concise("--config", str(tmp_path / "ci" / "neuron-migrate.toml"), str(f))) == ["NM103"]
    assert codes(concise("--config", str(tmp_path / "ci" / "pyproject.toml"), str(f))) == ["NM101", "NM103"]
    write(tmp_path / "empty" / "pyproject.toml", "[project]\nname = 'x'\n")
    for bad in (tmp_path / "empty" / "pyproject.toml", tmp_path / "missing.toml"):
        out = concise("--config", str(bad), str(f))
        assert out.returncode == 2 and str(bad) in out.stderr


def test_select_takes_comma_lists_and_repeats_and_refuses_codes_as_paths(tmp_path):
    f = write(tmp_path / "train.py", LEGACY)
    codes = lambda out: sorted(line.split()[1] for line in listed(out))  # noqa: E731
    assert codes(concise("--select", "NM101,NM103", str(f))) == ["NM101", "NM103"]
    assert codes(concise("--select", "NM101", "--select", "nm103", str(f))) == ["NM101", "NM103"]
    out = concise("--select", "NM101", "NM103", str(f))
    assert out.returncode == 2 and "--select NM1,NM103" in out.stderr and "looks like a rule code" in out.stderr
    out = concise("--select", "NM999", str(f))
    assert out.returncode == 2 and "NM999" in out.stderr


def test_jobs_must_be_positive(tmp_path):
    f = write(tmp_path / "train.py", LEGACY)
    for command in ("check", "rewrite", "pin"):
        for value in ("0", "-3"):
            out = cli(command, "-j", value, str(f))
            assert out.returncode == 2 and "--jobs" in out.stderr, (command, value)
    assert f.read_text() == LEGACY


def test_diff_with_output_dir_is_refused(tmp_path):
    f = write(tmp_path / "src" / "train.py", LEGACY)
    out = cli("rewrite", "--diff", "--output-dir", str(tmp_path / "copy"), str(f.parent))
    assert out.returncode == 2 and "--output-dir" in out.stderr
    assert not (tmp_path / "copy").exists() and f.read_text() == LEGACY


def test_report_format_from_the_name_or_the_option(tmp_path):
    f = write(tmp_path / "train.py", LEGACY)
    out = cli("rewrite", "--diff", "--report", str(tmp_path / "report.txt"), str(f))
    assert out.returncode == 2 and "--report-format" in out.stderr and not (tmp_path / "report.txt").exists()
    cli("rewrite", "--diff", "--report", str(tmp_path / "report.txt"), "--report-format", "json", str(f))
    assert json.loads((tmp_path / "report.txt").read_text())["mode"] == "dry run"
    cli("rewrite", "--diff", "--report", str(tmp_path / "r.MD"), str(f))
    assert (tmp_path / "r.MD").read_text().startswith("#")
    assert cli("rewrite", "--diff", "--report-format", "json", str(f)).returncode == 2  # without --report


def test_a_folder_loop_is_a_warning_not_a_failure(tmp_path):
    write(tmp_path / "pkg" / "sub" / "train.py", LEGACY)
    (tmp_path / "pkg" / "sub" / "back").symlink_to("..")
    out = concise(str(tmp_path / "pkg"))
    assert out.returncode == 1, out.stderr  # the findings, not an error
    assert "warning: symbolic link back to a folder" in out.stderr and "error" not in out.stderr
    assert len(listed(out)) == 3
    clean = tmp_path / "clean"
    write(clean / "ok.py", "x = 1\n")
    (clean / "loop").symlink_to(".")
    assert concise(str(clean)).returncode == 0


# -- --add-noqa -------------------------------------------------------------------------------------------------

def test_add_noqa_silences_the_current_findings(tmp_path):
    code = write(tmp_path / "train.py", (
        "import torch_xla.core.xla_model as xm  # the device\n\n"
        "device = torch_device(1,\n"
        "                      xm.xla_device())\n"
        "with xm.mark_step_scope():  # noqa: E501\n"
        "    pass\n"
        'DOC = """xm.mark_step()"""\n'))
    req = write(tmp_path / "requirements.txt", "torch-neuronx==2.1.0 \\\n    --hash=sha256:abc\n")
    before = json.loads(cli("check", "--no-cache", "--format", "json", str(tmp_path)).stdout)["findings"]
    assert before
    out = cli("check", "--no-cache", "--add-noqa", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "in 2 files" in out.stdout
    text = code.read_text()
    compile(text, "train.py", "exec")
    assert "xm.xla_device())  # noqa: NM101\n" in text  # the last line of the statement
    assert "# noqa: E501, NM" in text  # added to the comment that was there
    assert "--hash=sha256:abc  # noqa: " in req.read_text()
    assert concise(str(tmp_path)).returncode == 0
    again = cli("check", "--no-cache", "--add-noqa", str(tmp_path))
    assert again.returncode == 0 and "Added 0 noqa codes in 0 files" in again.stdout


def test_add_noqa_converges_when_silencing_one_finding_changes_others(tmp_path):
    """Silencing NM106 brings out NM209 (the averaging is then marked), and NM190 (the import is unused once the
    fixes are made) no longer comes once they are not: the comments hold after one run."""
    code = write(tmp_path / "steps.py", (
        "import torch_xla.core.xla_model as xm\n\n\n"
        "def step(loss, optimizer):\n"
        "    loss.backward()\n"
        "    xm.optimizer_step(optimizer)\n"))
    first = json.loads(cli("check", "--no-cache", "--format", "json", str(tmp_path)).stdout)["findings"]
    assert {"NM105", "NM106", "NM190"} <= {f["code"] for f in first}
    out = cli("check", "--no-cache", "--add-noqa", str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    text = code.read_text()
    assert "import torch_xla.core.xla_model as xm\n" in text  # no NM190 code: the import stays used
    assert "xm.optimizer_step(optimizer)  # noqa: NM105, NM106, NM209\n" in text
    after = cli("check", "--no-cache", str(tmp_path))
    assert after.returncode == 0, after.stdout + after.stderr  # no NM901, no new finding
    again = cli("check", "--no-cache", "--add-noqa", str(tmp_path))
    assert again.returncode == 0 and "Added 0 noqa codes in 0 files" in again.stdout and code.read_text() == text


# -- machine formats ----------------------------------------------------------------------------------------------

def _apply(text: str, edits: list[dict]) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: e["location"]["row"], reverse=True):
        assert edit["location"]["column"] == edit["end_location"]["column"] == 1
        lines[edit["location"]["row"] - 1:edit["end_location"]["row"] - 1] = [edit["content"]]
    return "".join(lines)


def test_json_findings_carry_severity_link_and_fix(tmp_path):
    from neuron_migrate import catalogue
    from neuron_migrate.cli.formats import level

    f = write(tmp_path / "train.py", LEGACY + "import torch\nx = torch.zeros(3, dtype=torch.float64)\n")
    data = json.loads(cli("check", "--no-cache", "--format", "json", str(f)).stdout)
    for item in data["findings"]:
        info = catalogue.rule(item["code"])
        assert (item["name"], item["severity"], item["url"]) == (info.name, level(info), info.link)
        if not item["fixable"]:
            assert item["fix"] is None
            continue
        assert item["fix"]["applicability"] == info.fix.value
        # the edits are the rewrite `neuron-migrate rewrite` makes
        assert _apply(f.read_text(), item["fix"]["edits"]) == cli("rewrite", "-", input=f.read_text()).stdout
    assert any(item["fix"] is None for item in data["findings"])  # the float64 note has no fix


def _notebook(tmp_path: Path) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# Train\n"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["import torch\n", "import torch_xla.core.xla_model as xm\n"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": "x = 1\ndevice = xm.xla_device()\n"},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["y = 2\n", "xm.mark_step()"]}]
    nb = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    return write(tmp_path / "train.ipynb", json.dumps(nb, indent=1) + "\n")


def _line_with(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


def test_notebook_findings_land_on_the_ipynb_line(tmp_path):
    nb = _notebook(tmp_path)
    expected = {"NM190": _line_with(nb, "import torch_xla"), "NM101": _line_with(nb, "xla_device"),
                "NM103": _line_with(nb, "mark_step")}
    found = json.loads(cli("check", "--no-cache", "--format", "json", str(nb)).stdout)["findings"]
    assert {f["code"]: f["file_line"] for f in found} == expected
    assert {f["code"]: f["cell"] for f in found} == {"NM190": 2, "NM101": 3, "NM103": 4}
    github = cli("check", "--no-cache", "--format", "github", str(nb)).stdout.splitlines()
    for line in github:
        code = re.search(r"title=(NM\d+)", line).group(1)
        assert f",line={expected[code]}," in line and "col=" not in line
        assert re.search(r"::cell \d, line \d: ", line)
    sarif = json.loads(cli("check", "--no-cache", "--format", "sarif", str(nb)).stdout)
    for result in sarif["runs"][0]["results"]:
        region = result["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] == expected[result["ruleId"]] and "startColumn" not in region
        assert result["properties"]["cell"] in (2, 3, 4)


# -- the terminal ---------------------------------------------------------------------------------------------------

def _on_a_terminal(args: list[str], env: dict) -> str:
    """stdout of the CLI when it is a terminal (a pseudo-terminal)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "neuron_migrate", *args], stdout=slave, stderr=subprocess.DEVNULL,
                            env={**os.environ, **env}, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_only(tmp_path):
    f = write(tmp_path / "train.py", LEGACY)
    env = {k: "" for k in ("NO_COLOR", "FORCE_COLOR", "CI")}
    env["TERM"] = "xterm"
    args = ["check", "--no-cache", str(f)]
    assert ANSI.search(_on_a_terminal(args, env))
    assert not ANSI.search(_on_a_terminal(args, {**env, "NO_COLOR": "1"}))
    assert not ANSI.search(_on_a_terminal([*args, "--color", "never"], env))
    piped = cli(*args)
    assert not ANSI.search(piped.stdout + piped.stderr)
    forced = cli(*args, "--color", "always")
    assert ANSI.search(forced.stdout)
    assert ANSI.sub("", forced.stdout) == piped.stdout
    diff = cli("rewrite", "--diff", "--color", "always", str(f)).stdout
    assert "\x1b[32m+" in diff and "\x1b[31m-" in diff


def test_code_frame_and_fixable_mark(tmp_path):
    f = write(tmp_path / "train.py", LEGACY + "import torch\nx = torch.zeros(3, dtype=torch.float64)\n")
    full = cli("check", "--no-cache", str(f)).stdout
    short = concise(str(f)).stdout
    assert "3 | device = xm.xla_device()\n  |          ^^^^^^^^^^^^^^^ NM101\n" in full
    lines = short.splitlines()[:-1]  # above the summary
    assert len(lines) == len(json.loads(cli("check", "--no-cache", "--format", "json", str(f)).stdout)["findings"])
    assert all(line in full.splitlines() for line in lines)
    assert any(" NM101 [*] " in line for line in lines)
    assert any(re.search(r": NM\d+ [^\[]", line) for line in lines)  # a note without a fix has no mark


def test_help_and_tables_fit_100_columns():
    env = {"COLUMNS": "200"}
    top = cli("--help", env=env).stdout
    assert "Print the documentation of one rule, such as NM103." in top and not re.search(r"\w\.\.\.$", top, re.M)
    for args in (("--help",), ("check", "--help"), ("rewrite", "--help"), ("rules", "--help"),
                 ("explain", "--help"), ("rules",), ("verify", "--help"), ("pin", "--help"), ("doctor", "--help")):
        out = cli(*args, env=env)
        assert out.returncode == 0
        long = [line for line in out.stdout.splitlines() if len(line) > 100]
        assert not long, (args, long)
    rules = cli("rules").stdout.splitlines()
    heads = [line for line in rules if not line.startswith(" ")]
    fix_columns = {re.search(r"\s(safe|unsafe|manual)\s", line).start() for line in heads}
    assert len(fix_columns) == 1  # the fix column is aligned, whatever the length of the names
    summary_column = {len(line) - len(line.lstrip()) for line in rules if line.startswith(" ")}
    assert len(summary_column) <= 1


def test_readme_try_it_command_does_what_the_readme_says(tmp_path, tmp_path_factory):
    import shlex
    import shutil

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Try it"):]
    line = re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)
    command = shlex.split(line.split("&&")[-1])
    assert command[:2] == ["neuron-migrate", "rewrite"] and "--diff" in command
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")  # the command runs in the clone
    before = {p: p.read_bytes() for p in (tmp_path / "examples").rglob("*") if p.is_file()}
    env = {k: v for k, v in os.environ.items() if k != "NEURON_MIGRATE_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("user-cache"))  # the cache key's (engine/cache.py)
    out = subprocess.run([sys.executable, "-m", "neuron_migrate", *command[1:]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 1 and "exits 1" in section  # the README says so
    assert out.stdout.startswith("--- a/examples/") and "Would rewrite" in out.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "examples").rglob("*") if p.is_file()} == before
    assert (tmp_path / ".neuron_migrate_cache").is_dir() and ".neuron_migrate_cache/" in section
    assert sorted(p.name for p in tmp_path.iterdir()) == [".neuron_migrate_cache", "examples", "pyproject.toml"]


def test_readme_try_it_without_cache_leaves_no_folder(tmp_path):
    """`--no-cache: none`, as the README's "Try it" says."""
    import shutil

    shutil.copytree(ROOT / "examples" / "xla_mnist", tmp_path / "examples" / "xla_mnist")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    env = {k: v for k, v in os.environ.items() if k != "NEURON_MIGRATE_CACHE_DIR"}
    out = cli("rewrite", "--diff", "--no-cache", "examples/xla_mnist", cwd=tmp_path, env=env)
    assert out.returncode == 1 and "--no-cache`: none" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["examples", "pyproject.toml"]


def test_readme_use_commands_do_what_their_comments_say(tmp_path):
    """The README's "Use" block, line by line, on a copy of the bundled example as `src/`."""
    import shlex
    import shutil

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Use"):]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)
    commands = [(shlex.split(line.split("#")[0]), line.partition("#")[2]) for line in block.splitlines()]
    assert [c[:2] for c, _ in commands] == [["neuron-migrate", "rewrite"], ["neuron-migrate", "rewrite"],
                                            ["neuron-migrate", "check"], ["neuron-migrate", "rules"]]
    shutil.copytree(ROOT / "examples" / "xla_mnist", tmp_path / "src")
    before = {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir()}

    (diff, diff_says), (apply, apply_says), (check, check_says), (rules, rules_says) = commands
    out = cli(*diff[1:], "--no-cache", cwd=tmp_path)
    assert "files left alone" in diff_says and "exit 1 if anything would change" in diff_says
    assert out.returncode == 1 and out.stdout.startswith("--- a/src/")
    assert {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir()} == before
    untouched = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "src").iterdir()
                 if f"--- a/src/{p.name}" not in out.stdout}
    assert untouched  # files without legacy idioms are in the example

    out = cli(*apply[1:], "--no-cache", cwd=tmp_path)
    assert "migrate in place" in apply_says and "never written" in apply_says and "exit 1 if" in apply_says
    assert out.returncode == 1, out.stderr  # held-back unsafe fixes and the NM405 note are left
    after = {p.name: p.read_bytes() for p in (tmp_path / "src").iterdir()}
    # requirements.txt keeps torch-xla (its removal is unsafe), so its pins wait too: it is not written
    assert {name for name in before if after[name] != before[name]} == {"train.py", "run.sh"}
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "src").iterdir() if p.name in untouched} == untouched
    assert b"torch_xla" not in after["train.py"]

    out = cli(*check[1:], "--no-cache", cwd=tmp_path)
    assert "exit 0/1/2" in check_says and out.returncode == 1  # what is left: a flag for a person to review
    assert re.search(r"^src/run\.sh:\d+:\d+: NM405 ", out.stdout, re.M), out.stdout
    assert "train.py" not in out.stdout

    out = cli(*rules[1:])
    assert "every rule" in rules_says and out.returncode == 0 and "NM101" in out.stdout
    assert cli("explain", "NM103").returncode == 0


def test_doctor_colours_its_status_column_only_when_asked_or_on_a_terminal():
    env = {k: "" for k in ("NO_COLOR", "FORCE_COLOR", "CI")}
    env["TERM"] = "xterm"
    plain = cli("doctor", "--no-device")
    assert not ANSI.search(plain.stdout)
    forced = cli("doctor", "--no-device", "--color", "always")
    assert ANSI.search(forced.stdout) and ANSI.sub("", forced.stdout).split() == plain.stdout.split()
    assert ANSI.search(_on_a_terminal(["doctor", "--no-device"], env))
    assert not ANSI.search(_on_a_terminal(["doctor", "--no-device"], {**env, "NO_COLOR": "1"}))


@pytest.mark.needs_torch
@pytest.mark.slow  # three verify runs: CI runs it with the slow part
def test_readme_verify_commands_run(tmp_path):
    """The README's `verify` block, each line as written, on copies of the bundled examples: the single-process
    one, the data-parallel one through torchrun, the markdown report appended to a file, and the torch_xla
    reference (where the named interpreter is absent, a clear refusal)."""
    import shlex
    import shutil

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("neuron-migrate verify`"):]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    assert len(lines) == 4 and all(line.startswith("neuron-migrate verify train.py") for line in lines)
    single, parallel, reference, markdown = lines
    shutil.copytree(ROOT / "examples" / "xla_mnist", tmp_path / "mnist")
    shutil.copytree(ROOT / "examples" / "xla_mnist_dp", tmp_path / "mnist_dp")

    out = cli(*shlex.split(single)[1:], cwd=tmp_path / "mnist")
    assert out.returncode == 0 and "equivalent" in out.stdout.lower(), out.stdout + out.stderr[-2000:]
    out = cli(*shlex.split(parallel)[1:], cwd=tmp_path / "mnist_dp")
    assert out.returncode == 0 and "equivalent" in out.stdout.lower(), out.stdout + out.stderr[-2000:]

    command, _, target = markdown.partition(">>")
    out = cli(*shlex.split(command)[1:], cwd=tmp_path / "mnist")
    assert out.returncode == 0, out.stderr[-2000:]
    (tmp_path / "mnist" / target.strip()).write_text(out.stdout)  # what `>> pr.md` appends to a new file
    assert out.stdout.startswith("#") and "|" in out.stdout

    args = shlex.split(reference)[1:]
    interpreter = args[args.index("--reference-python") + 1]
    out = cli(*args, "--max-steps", "3", cwd=tmp_path / "mnist")
    if Path(interpreter).exists():
        assert out.returncode == 0, out.stdout
    else:
        assert out.returncode == 2 and interpreter in out.stderr, out.stderr[-2000:]


# -- what ruff users expect of the command line -------------------------------------------------------------------

def test_check_fix_points_to_rewrite(tmp_path):
    out = cli("check", "--fix", str(tmp_path))
    assert out.returncode == 2 and "`neuron-migrate rewrite PATHS` makes the fixes" in out.stderr


@pytest.mark.parametrize("typed, meant", [("NM1O3", "NM103"), ("nm2O1", "NM201"), ("NM9O1", "NM901")])
def test_a_letter_typed_for_a_digit_gets_the_code_in_did_you_mean(tmp_path, typed, meant):
    out = cli("check", "--select", typed, str(tmp_path))
    assert out.returncode == 2 and f"did you mean {meant}?" in out.stderr, out.stderr


def test_a_folder_with_nothing_to_check_says_so(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here\n")
    out = cli("check", "--no-cache", str(tmp_path))
    assert out.returncode == 0 and out.stdout.startswith("No files to check") and "All clear" not in out.stdout


def test_the_table_spelled_with_an_underscore_is_reported(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.neuron_migrate]\nselect = ["NM1"]\n')
    write(tmp_path / "train.py", "import torch_xla.core.xla_model as xm\nxm.mark_step()\n")
    out = cli("check", "--no-cache", str(tmp_path))
    assert out.returncode == 2 and "[tool.neuron_migrate] is not read; the table is [tool.neuron-migrate]" in out.stderr


def test_a_syntax_error_in_a_file_without_legacy_idioms_is_an_error(tmp_path):
    write(tmp_path / "plain.py", "values = (1, 2\n")
    for command in ("check", "rewrite"):
        out = cli(command, "--no-cache", str(tmp_path))
        assert out.returncode == 2, (command, out.stdout, out.stderr)
        assert "plain.py:1:" in out.stderr and "syntax error" in out.stderr
