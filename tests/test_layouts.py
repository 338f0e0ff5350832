"""Property test: every rule with a rewrite, on its catalogue example, with the calls' arguments laid out in every
way Python allows (one a line, comments between them, parentheses, trailing commas, multi-line tuples, starred
and keyword arguments added). Whatever the layout: no internal error, the output compiles, and a second run
changes nothing. A layout a rule cannot rewrite is left alone or marked; it never costs the file.
"""

from __future__ import annotations

import ast

import libcst as cst
import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from neuron_migrate import catalogue
from neuron_migrate.engine.python import process_python
from neuron_migrate.findings import FixSafety
from neuron_migrate.settings import Settings

REWRITES = sorted(info.code for info in catalogue.catalogue().values()
                  if info.fix is not FixSafety.MANUAL and info.example_file.endswith(".py") and info.before.strip())
COMMENT = "# note"


def _example(code: str) -> str:
    info = catalogue.rule(code)
    return info.before.strip("\n") + "\n"


class Layout(cst.CSTTransformer):
    """Lays out each call (and each tuple inside one) as `choose` decides (it picks one of the options given)."""

    def __init__(self, choose) -> None:
        self.choose = choose

    def flip(self) -> bool:
        return self.choose((False, True))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        if self.flip() and not any(a.star == "**" for a in args):
            extra = [cst.Arg(value=cst.Name("rest"), star="*"), cst.Arg(value=cst.Name("True"), keyword=cst.Name("flag"))]
            args += self.choose((extra[:1], extra[1:], extra))
        if not args:
            return updated.with_changes(args=args)
        args = [self._value(a) for a in args]
        return updated.with_changes(args=self._commas(args), whitespace_before_args=self._opening())

    def leave_Tuple(self, original: cst.Tuple, updated: cst.Tuple) -> cst.Tuple:
        if not updated.lpar or len(updated.elements) < 2 or not self.flip():
            return updated
        elements = self._commas(list(updated.elements))
        return updated.with_changes(elements=elements, lpar=[cst.LeftParen(whitespace_after=self._opening())])

    def _value(self, arg: cst.Arg) -> cst.Arg:
        value = arg.value
        if self.flip() and not arg.star and isinstance(value, cst.BaseExpression):
            value = value.with_changes(lpar=[cst.LeftParen(), *value.lpar], rpar=[*value.rpar, cst.RightParen()])
        return arg.with_changes(value=value)

    def _break(self) -> cst.BaseParenthesizableWhitespace:
        """After a comma or an opening parenthesis: same line, a new line, or a comment and a new line."""
        kind = self.choose(("space", "newline", "comment"))
        if kind == "space":
            return cst.SimpleWhitespace(" ")
        comment = cst.Comment(COMMENT) if kind == "comment" else None
        return cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  " if comment else ""), comment=comment),
            indent=True, last_line=cst.SimpleWhitespace("        "))

    def _opening(self) -> cst.BaseParenthesizableWhitespace:
        whitespace = self._break()
        return cst.SimpleWhitespace("") if isinstance(whitespace, cst.SimpleWhitespace) else whitespace

    def _commas(self, items: list) -> list:
        out = []
        for i, item in enumerate(items):
            last = i == len(items) - 1
            if last and not self.flip():
                out.append(item.with_changes(comma=cst.MaybeSentinel.DEFAULT))
                continue
            if last and getattr(item, "star", "") == "**":
                out.append(item.with_changes(comma=cst.MaybeSentinel.DEFAULT))  # no comma after **kwargs on 3.x<3.6
                continue
            out.append(item.with_changes(comma=cst.Comma(whitespace_after=self._break())))
        return out


def laid_out(text: str, choices: list[int]) -> str:
    """`text` with its calls laid out by `choices` (read in turn, each picking one option)."""
    picks = iter(choices * 8)
    return cst.parse_module(text).visit(Layout(lambda options: options[next(picks) % len(options)])).code


def _rewrite(data: bytes) -> bytes | None:
    result = process_python("example.py", data, Settings(), True)
    assert result.error is None, result.error
    return result.new_bytes if result.changed else None


@pytest.mark.parametrize("code", REWRITES)
@settings(max_examples=20, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(choices=st.lists(st.integers(min_value=0, max_value=2), min_size=64, max_size=64))
def test_any_argument_layout_is_migrated_or_left_whole(code, choices):
    source = laid_out(_example(code), choices)
    compile(source, "example.py", "exec")  # the layout is valid Python (else the generator is wrong)
    out = _rewrite(source.encode())  # raises on an internal error
    if out is None:
        return
    ast.parse(out)
    compile(out, "example.py", "exec")
    assert _rewrite(out) is None, f"a second run changed the output again:\n{out.decode()}"


def test_the_layouts_cover_every_rule_with_a_rewrite():
    assert {"NM103", "NM201", "NM202", "NM204", "NM223", "NM224"} <= set(REWRITES)
    for code in REWRITES:  # every example still triggers its rule once laid out plainly
        assert code in {f.code for f in process_python("e.py", _example(code).encode(), Settings(), False).findings}
