"""The catalogue of the checks: documented, explained, and every code reported by some rule or handler."""

from __future__ import annotations

from click.testing import CliRunner

from neuron_migrate import catalogue
from neuron_migrate.cli import main
from neuron_migrate.findings import FixSafety
from neuron_migrate.rules import all_rules
from tests.helpers import cli

CHECKS = ("NM3", "NM4", "NM5", "NM9")
OUTSIDE_RULES = {"NM901": "engine (suppressions)", "NM900": "engine (markers)",
                 "NM511": "accelerate_config handler", "NM512": "accelerate_config handler",
                 "NM521": "engine (project model: handlers._held)", "NM522": "engine (project model: handlers._held)"}


def test_every_check_code_is_reported_by_a_rule_or_handler():
    by_rules = {code for rule in all_rules() for code in rule.codes if code.startswith(CHECKS)}
    assert {c for c in catalogue.catalogue() if c.startswith(CHECKS)} == by_rules | set(OUTSIDE_RULES)


def test_explain_works_for_every_code():
    runner = CliRunner()
    for code, info in catalogue.catalogue().items():
        result = runner.invoke(main, ["explain", code.lower()])
        assert result.exit_code == 0, code
        assert result.output.startswith(f"# {code} {info.name}") and info.link in result.output, code
    assert cli("explain", "NM313").stdout.startswith("# NM313 varying-input-shapes")


def test_check_only_rules_are_manual_and_say_so():
    for info in catalogue.catalogue().values():
        if info.check_only:
            assert info.fix is FixSafety.MANUAL
            assert "Report only" in catalogue.explain(info)
