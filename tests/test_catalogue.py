"""The catalogue is the documentation and the test: every rule's example must do what its docs say."""

from __future__ import annotations

import re

import pytest

from neuron_migrate import catalogue
from neuron_migrate.engine.discover import kind_of
from neuron_migrate.findings import FixSafety
from neuron_migrate.engine.handlers import process
from neuron_migrate.rules import all_rules
from neuron_migrate.settings import Settings
from tests.helpers import ROOT, cli

RULES = list(catalogue.catalogue().values())


def test_codes_and_names_are_well_formed_and_unique():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for r in RULES:
        assert re.fullmatch(r"NM\d{3}", r.code), r.code
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.name), r.name
        assert r.link.startswith("https://"), r.code
        assert r.summary.strip() and r.why.strip() and r.message.strip(), r.code


def test_every_code_a_rule_reports_is_catalogued():
    known = set(catalogue.catalogue())
    for rule in all_rules():
        assert rule.codes, rule.__name__
        assert set(rule.codes) <= known, f"{rule.__name__} reports codes missing from rules/*.toml"
        assert rule.triggers, f"{rule.__name__} has no pre-filter triggers"


def _run(info, text: str, rewrite: bool, **settings):
    kind = kind_of(info.example_file)
    assert kind is not None, f"{info.code}: no file kind for {info.example_file}"
    settings = {"unsafe_fixes": True, **info.example_settings, **settings}  # the example shows every fix
    result = process(info.example_file, text.encode(), kind, Settings(**settings), rewrite)
    assert result is not None and result.error is None, (info.code, result and result.error)
    return result


@pytest.mark.parametrize("info", RULES, ids=[r.code for r in RULES])
def test_example_before_is_reported(info):
    codes = {f.code for f in _run(info, info.before, rewrite=False).findings}
    assert info.code in codes, f"{info.code}: its own `before` example does not trigger it (got {sorted(codes)})"


@pytest.mark.parametrize("info", [r for r in RULES if r.fix is not FixSafety.MANUAL and r.after.strip()],
                         ids=lambda r: r.code)
def test_example_after_is_what_rewrite_gives(info):
    result = _run(info, info.before, rewrite=True)
    out = result.new_bytes.decode() if result.new_bytes is not None else info.before
    assert out == info.after


@pytest.mark.parametrize("info", [r for r in RULES if r.after_accelerator.strip()], ids=lambda r: r.code)
def test_example_after_accelerator_is_what_rewrite_gives(info):
    result = _run(info, info.before, rewrite=True, device_style="accelerator")
    assert result.new_bytes is not None and result.new_bytes.decode() == info.after_accelerator


@pytest.mark.parametrize("info", [r for r in RULES if r.fix is FixSafety.MANUAL], ids=lambda r: r.code)
def test_manual_example_gets_a_marker_unless_check_only(info):
    result = _run(info, info.before, rewrite=True)
    out = result.new_bytes.decode() if result.new_bytes is not None else info.before
    if "TODO(neuron-migrate" in info.before:  # the marker rule itself: its example is a marker
        assert out == info.before
    elif info.check_only:  # performance and precision notes: reported, never marked
        assert "TODO(neuron-migrate" not in out
    elif info.marks_migrating_only:  # marked only in a file moving to neuron; elsewhere left alone
        assert result.new_bytes is None
        moving = _run(info, "import torch_xla\n" + info.before, rewrite=True)
        assert f"TODO(neuron-migrate {info.code})" in moving.new_bytes.decode()
    else:
        assert f"TODO(neuron-migrate {info.code})" in out


def test_docs_rules_md_is_current():
    path = ROOT / "docs" / "rules.md"
    assert path.read_text(encoding="utf-8") == catalogue.rules_markdown(), (
        "docs/rules.md is stale: run `neuron-migrate rules --markdown > docs/rules.md`")


def test_explain_prints_each_rule():
    for info in RULES[:3] + RULES[-2:]:
        out = cli("explain", info.code.lower())
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"# {info.code} {info.name}")
        assert info.link in out.stdout
    bad = cli("explain", "NM000")
    assert bad.returncode == 2 and "no rule NM000" in bad.stderr
