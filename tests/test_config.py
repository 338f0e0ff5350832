"""[tool.neuron-migrate] in pyproject.toml: found upward, validated, overridden by flags."""

from __future__ import annotations

import json

import pytest

from neuron_migrate.config import ConfigError, resolve
from tests.helpers import cli

LEGACY = "import torch\nx = torch.zeros(3, dtype=torch.float64)\nmodel.to(\"neuron\")\ny = w.cuda()\n"


def _project(tmp_path, table: str):
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'demo'\n\n[tool.neuron-migrate]\n{table}\n")
    src = tmp_path / "src" / "pkg"
    src.mkdir(parents=True)
    (src / "train.py").write_text(LEGACY)
    (src / "test_train.py").write_text(LEGACY)
    return src


def _codes(result) -> list[tuple[str, str]]:
    return sorted((f["path"].rsplit("/", 1)[-1], f["code"]) for f in json.loads(result.stdout)["findings"])


def test_config_is_found_from_the_paths_upward(tmp_path):
    src = _project(tmp_path, 'ignore = ["NM401"]\nper-file-ignores = { "test_*.py" = ["NM3"] }')
    resolved = resolve([str(src / "train.py")])
    assert resolved.source == tmp_path / "pyproject.toml"
    result = cli("check", "--format", "json", str(src))
    assert _codes(result) == [("train.py", "NM320")]


def test_per_file_ignores_relative_to_the_config(tmp_path):
    src = _project(tmp_path, 'per-file-ignores = { "src/pkg/test_*.py" = ["NM4", "NM320"] }')
    result = cli("check", "--format", "json", "src", cwd=tmp_path)
    assert _codes(result) == [("train.py", "NM320"), ("train.py", "NM401")]
    assert src.is_dir()


def test_flags_override_the_config(tmp_path):
    src = _project(tmp_path, 'select = ["NM401"]\nexclude = ["test_*.py"]')
    assert _codes(cli("check", "--format", "json", str(src))) == [("train.py", "NM401")]
    assert _codes(cli("check", "--format", "json", "--select", "NM320", str(src))) == [("train.py", "NM320")]


def test_compile_and_device_style_from_config(tmp_path):
    src = _project(tmp_path, 'compile = false\ndevice-style = "accelerator"\ntorch = "2.13"\nunsafe-fixes = true')
    resolved = resolve([str(src)])
    assert (resolved.settings.compile, resolved.settings.device_style, resolved.settings.torch) == (
        False, "accelerator", "2.13")
    cli("rewrite", str(src / "train.py"))
    assert "y = w.to(DEVICE)" in (src / "train.py").read_text()  # NM320, an unsafe fix the table turned on


def test_unsafe_fixes_from_the_config_and_the_flags_that_override_it(tmp_path):
    """Safe fixes only by default; `unsafe-fixes = true` adds the unsafe ones (NM320 here), `--no-unsafe-fixes`
    takes them off again, and `check` marks a held-back fix `[~]`, a fix `rewrite` makes `[*]`."""
    src = _project(tmp_path, "unsafe-fixes = true")
    assert resolve([str(src)]).settings.unsafe_fixes is True
    assert resolve([str(src)], unsafe_fixes=False).settings.unsafe_fixes is False
    (tmp_path / "pyproject.toml").write_text("[tool.neuron-migrate]\nselect = ['NM3']\n")
    assert resolve([str(src)]).settings.unsafe_fixes is False  # the default
    for table, flags, applied in (("", (), False), ("", ("--unsafe-fixes",), True), ("unsafe-fixes = true", (), True),
                                  ("unsafe-fixes = true", ("--no-unsafe-fixes",), False)):
        (tmp_path / "pyproject.toml").write_text(f"[tool.neuron-migrate]\n{table}\n")
        (src / "train.py").write_text(LEGACY)
        check = cli("check", "--no-cache", "--output-format", "concise", *flags, str(src / "train.py"))
        (line,) = [line for line in check.stdout.splitlines() if ": NM320 " in line]
        assert (" NM320 [*] " in line, " NM320 [~] " in line) == (applied, not applied), check.stdout
        assert ("unsafe fix held back" in check.stdout) == (not applied), check.stdout
        done = cli("rewrite", "--no-cache", *flags, str(src / "train.py"))
        assert ("y = w.cuda()" in (src / "train.py").read_text()) == (not applied), (table, flags)
        assert ("1 unsafe fix held back: `neuron-migrate rewrite --unsafe-fixes` makes it" in done.stdout) \
            == (not applied), done.stdout


def test_release_and_instance_keys(tmp_path):
    src = _project(tmp_path, 'neuron-sdk = "2.33"\ninstance = "trn3"\ntorch = 2.13')
    settings = resolve([str(src)]).settings
    assert (settings.neuron_sdk, settings.instance, settings.torch) == ("2.33", "trn3", "2.13")
    assert resolve([str(src)], neuron_sdk="2.33.0").settings.neuron_sdk == "2.33.0"  # a flag wins


@pytest.mark.parametrize("table, words", [
    ('selct = ["NM1"]', ["unknown key 'selct'", "did you mean 'select'"]),
    ('ignore = ["NM999"]', ["no rule code or prefix 'NM999'"]),
    ('torch = "2.12"', ["'2.13', '2.14'"]),
    ('unsafe-fixes = "yes"', ["unsafe-fixes: expected true or false"]),
    ('neuron-sdk = "2.32"', ["neuron-sdk: expected one of", "'2.34'", "'2.33.1'"]),
    ('instance = "inf1"', ["instance: expected one of", "'trn2', 'trn3', 'inf2', 'trn1'"]),
    ('neuron-sdk = "2.34"\ntorch = "2.13"', ["Neuron 2.34.0 has no torch-neuronx family for torch 2.13",
                                             "choose --neuron-sdk 2.33.1"]),
    ("compile = 1", ["expected true or false"]),
    ('device-style = "cuda"', ["'neuron', 'accelerator'"]),
])
def test_bad_config_is_an_error(tmp_path, table, words):
    src = _project(tmp_path, table)
    with pytest.raises(ConfigError) as info:
        resolve([str(src)])
    assert all(w in str(info.value) for w in words), str(info.value)
    assert str(tmp_path / "pyproject.toml") in str(info.value)
    result = cli("check", str(src))
    assert result.returncode == 2 and words[0] in result.stderr
