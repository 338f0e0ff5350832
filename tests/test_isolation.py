"""One edit that fails never costs the rest of the file: its finding is marked, every other fix is made."""

from __future__ import annotations

from neuron_migrate.engine.python import process_python
from neuron_migrate.rules import all_rules
from neuron_migrate.settings import Settings
from tests.helpers import rewrite_text

LEGACY = """\
import torch
import torch_xla.core.xla_model as xm

def train(loader, step, loss):
    device = xm.xla_device()
    for batch in loader:
        xm.add_step_closure(log, args=(step, loss,  # logged after the step
                                       batch))
        xm.mark_step()
"""


def _rule(code: str):
    return next(r for r in all_rules() if code in r.codes)


def _statuses(text: str) -> dict[str, str]:
    return {f.code: f.status for f in process_python("case.py", text.encode(), Settings(), True).findings}


def test_a_step_closure_with_a_comment_between_its_arguments_is_rewritten_and_keeps_the_comment():
    out = rewrite_text(LEGACY)
    # the argument aligned with the tuple's first element stays aligned with it in the direct call
    assert "        log(step, loss,  # logged after the step\n            batch)\n" in out
    assert "torch_xla" not in out and "xm." not in out
    compile(out, "out.py", "exec")
    assert rewrite_text(out) == out


def _fail_after_reporting(monkeypatch, code: str) -> None:
    """The rule of `code` raises right after it reported `code`, as if building its edit failed."""
    rule = _rule(code)
    real = rule.visit_Call

    def failing(self, node):
        real(self, node)
        if self.ctx.decisions and self.ctx.decisions[-1].code == code:
            raise ValueError("simulated failure while building the edit")

    monkeypatch.setattr(rule, "visit_Call", failing)


def test_a_rule_that_fails_on_one_node_loses_only_that_fix(monkeypatch):
    _fail_after_reporting(monkeypatch, "NM224")
    out = rewrite_text(LEGACY)
    assert 'device = torch.device("neuron")' in out and "xm.mark_step()" not in out  # the other fixes are made
    marker = "        # TODO(neuron-migrate NM224): not rewritten (rule failed: ValueError); neuron-migrate explain NM224\n"
    assert marker in out
    assert "xm.add_step_closure(log, args=(step, loss,  # logged after the step" in out  # the call is kept
    assert "import torch_xla.core.xla_model as xm" in out  # still used by the kept call
    compile(out, "out.py", "exec")
    assert rewrite_text(out) == out  # the marker stands for the finding on the next run
    assert _statuses(LEGACY)["NM224"] == "marked" and _statuses(LEGACY)["NM101"] == "fixed"


def test_an_edit_whose_result_does_not_compile_is_found_dropped_and_marked(monkeypatch):
    """The bad fix is found among the file's decisions (by halving them); the others are still applied."""
    rule = _rule("NM103")
    real = rule.visit_Call

    def broken(self, node):
        before = len(self.ctx.journal)
        real(self, node)
        if len(self.ctx.journal) > before:  # NM103 made its edit: add one that cannot compile
            # `await` outside an async function: LibCST builds it, Python refuses to compile it
            self.ctx.insert_after(self.ctx.current.statement, "await asyncio.sleep(0)\n")

    monkeypatch.setattr(rule, "visit_Call", broken)
    text = LEGACY.replace("        xm.mark_step()\n", "        xm.mark_step()\n    xm.mark_step()\n")
    out = rewrite_text(text)
    compile(out, "out.py", "exec")
    assert out.count("# TODO(neuron-migrate NM103): not rewritten (rewrite did not compile); neuron-migrate") == 2
    assert 'device = torch.device("neuron")' in out and "log(step, loss," in out


def test_check_and_rewrite_still_report_the_same_findings_when_a_rule_fails(monkeypatch):
    _fail_after_reporting(monkeypatch, "NM224")
    key = lambda f: (f.line, f.col, f.code, f.message)
    checked = process_python("case.py", LEGACY.encode(), Settings(), False).findings
    rewritten = process_python("case.py", LEGACY.encode(), Settings(), True).findings
    assert [key(f) for f in checked] == [key(f) for f in rewritten]
