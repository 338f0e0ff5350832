"""One report policy for every file kind: is a code on, silenced on this line, fixed, marked?

Every handler (the Python engine, notebooks, the pin formats, shell launch lines, environment variables in shell
scripts and Dockerfiles) finds its idioms its own way and asks `Policy.decide` what to do with each one, in
this order:

    enabled?     `--select` / `--ignore` / `per-file-ignores` (Settings.enabled)
    suppressed?  a `# neuron-migrate: ignore[...]` / `# noqa: NM...` comment on the line (suppress.py)
    marked?      the line already carries this code's `# TODO(neuron-migrate CODE)` marker: its NM900 stands
                 for the finding, which is not repeated
    then         the finding is reported, with the catalogue's message; under `rewrite` the handler makes the
                 fix (safe codes; unsafe codes with `--unsafe-fixes`), leaves a marker (manual codes, except
                 check-only ones, and except files not moving to neuron for codes marked only there), or
                 does nothing more.

A handler says where the line is (`where`: a statement for Python, a line number for text files) and how to
tell that it is marked; everything else is decided here, once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from neuron_migrate import catalogue
from neuron_migrate.engine.edits import MARKER_PREFIX, marker_text
from neuron_migrate.findings import Finding, FixSafety
from neuron_migrate.settings import Settings
from neuron_migrate.suppress import UNUSED_CODE, LineSuppressions

UNUSED_SUPPRESSION = UNUSED_CODE  # NM901


class Suppressor(Protocol):
    """The suppression comments of one file: `suppresses` says whether `code` is silenced at `where` and
    remembers the comment as used (the others are reported as NM901)."""

    def suppresses(self, where, code: str) -> bool: ...


@dataclass(frozen=True)
class Decision:
    """What to do with a finding that is reported."""

    code: str
    message: str
    link: str
    fixable: bool  # the finding's `fixable`: a fix exists and this run may apply it
    fix: bool  # rewrite: make the rule's edit now (and count it as applied)
    mark: bool  # rewrite: leave a TODO marker above the line
    what: str = ""  # what the marker says (the catalogue's short form)
    held_back: bool = False  # an unsafe fix this run does not make (`--unsafe-fixes` would)

    @property
    def status(self) -> str:
        """What `rewrite` does about the finding: "fixed", "marked" or "left" (see engine/context.py)."""
        return "fixed" if self.fix else "marked" if self.mark else "left"

    def finding(self, policy: "Policy", line: int, col: int, **where) -> Finding:
        """The finding of this decision at `line`:`col` of the policy's file, with its status under rewrite."""
        return Finding(policy.path, line, col, self.code, self.message, self.fixable,
                       status=self.status if policy.rewrite else None, held_back=self.held_back or None, **where)

    @property
    def marker(self) -> str:
        return marker_text(self.code, self.what or self.message, self.link)


def _never() -> bool:
    return False


def _always() -> bool:
    return True


class Policy:
    """The report policy for one file of one run."""

    __slots__ = ("settings", "path", "rewrite")

    def __init__(self, settings: Settings, path: str, rewrite: bool) -> None:
        self.settings = settings
        self.path = path
        self.rewrite = rewrite

    def enabled(self, code: str) -> bool:
        return self.settings.enabled(code, self.path)

    def decide(self, code: str, where, suppressions: Suppressor | None, fields: dict,
               marked: Callable[[], bool] = _never, migrating: Callable[[], bool] = _always,
               held: bool = False) -> Decision | None:
        """The decision for a finding of `code` at `where`, or None when it is not reported (not enabled,
        suppressed, or already marked). `fields` fill the catalogue message; `marked` and `migrating`
        (does the file move to neuron?) are asked only when the answer matters. `held`: the fix waits for an
        unsafe fix this run holds back (a pin beside the torch-xla that stays), so it is held back with it."""
        if not self.enabled(code):
            return None
        if suppressions is not None and where is not None and suppressions.suppresses(where, code):
            return None
        if marked():
            return None
        info = catalogue.rule(code)
        held_back = (info.fix is FixSafety.UNSAFE or (held and info.fix is FixSafety.SAFE)) \
            and not self.settings.unsafe_fixes
        fixable = info.fix in (FixSafety.SAFE, FixSafety.UNSAFE) and not held_back
        fix = mark = False
        if self.rewrite:
            if info.fix is FixSafety.MANUAL:
                mark = not info.check_only and (not info.marks_migrating_only or migrating())
            else:
                fix = fixable
        return Decision(code, info.format(**fields), info.link, fixable, fix, mark,
                        info.format_marker(**fields) if mark else "", held_back)

    def unused_suppression(self, code: str) -> str | None:
        """The NM901 message for a suppression of `code` ("*": a bare `# neuron-migrate: ignore`) that silenced
        nothing; None when it is not reported (NM901 is off, or `code` is not checked in this run)."""
        if not self.enabled(UNUSED_SUPPRESSION) or not (code == "*" or self.enabled(code)):
            return None
        return unused_suppression_message(code)


NOT_PER_LINE = frozenset({"NM900", "NM901"})  # markers and the suppressions themselves: silenced with `ignore`


def unused_suppression_message(code: str) -> str:
    """The NM901 message for a suppression of `code` ("*": a bare `# neuron-migrate: ignore`) that silenced
    nothing: it was not needed, it names an unknown code, or the code is not silenced per line."""
    what = "`# neuron-migrate: ignore`" if code == "*" else code
    if code == "*" or (code in catalogue.catalogue() and code not in NOT_PER_LINE):
        problem = f"is not needed: nothing on this line is reported as {what}"
    elif code in NOT_PER_LINE:
        problem = f"has no effect: {code} is not silenced per line (`ignore = [\"{code}\"]` in [tool.neuron-migrate])"
    else:
        problem = f"names an unknown code: no neuron-migrate rule is {code} (`neuron-migrate rules` lists them)"
    return catalogue.rule(UNUSED_SUPPRESSION).format(code=what, problem=problem)


def unused_suppressions(policy: Policy, suppressions: LineSuppressions | None,
                        used: set[tuple[int, str]]) -> list[Finding]:
    """NM901 for the suppression comments of a text file that no handler of the file used."""
    out: list[Finding] = []
    for line, col, end_col, code in suppressions.unused(used) if suppressions is not None else ():
        message = policy.unused_suppression(code)
        if message is not None:
            out.append(Finding(policy.path, line, col, UNUSED_SUPPRESSION, message, end_line=line, end_col=end_col))
    return out


def marked_above(lines_above: Sequence[str], code: str) -> bool:
    """Whether the comment lines right above a line (the end of `lines_above`) hold this code's marker, wherever
    it sits among them (a person may have added a comment under it)."""
    tag = f"{MARKER_PREFIX}{code})"
    for line in reversed(lines_above):
        text = line.strip()
        if not text.startswith("#"):
            return False
        if text.startswith(tag):
            return True
    return False
