"""Shell scripts and Dockerfiles: legacy environment variables and trn1 instance types.

A line that only sets a variable the native backend ignores (`export PJRT_DEVICE=NEURON`,
`ENV XLA_IR_DEBUG=1`) is removed by `rewrite` (NM404); a bfloat16 switch gets a TODO marker above it (NM403);
the rest is reported with its line. A line can silence a code with the same comments as Python
(`# neuron-migrate: ignore[NM405]`, `# noqa: NM405`); the report policy (policy.py) decides.
"""

from __future__ import annotations

import functools
import re

from neuron_migrate import catalogue
from neuron_migrate.engine.edits import MARKER_PREFIX
from neuron_migrate.engine.project import LEGACY_VENV
from neuron_migrate.engine.python import MARKER_CODE, MARKER_RE
from neuron_migrate.findings import FileResult, Finding, FixSafety
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.policy import Decision, Policy, marked_above
from neuron_migrate.rules.environment import code_for, command_table, env_pattern, env_table
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import decode
from neuron_migrate.suppress import LineSuppressions, line_suppressions

TRN1 = re.compile(r"(?<![\w.-])(ml\.)?trn1n?\.\d*x?large\b")
SHELL_COMMENT = re.compile(r"^\s*#")
SUPPRESSION = re.compile(r"#\s*(noqa\b|neuron-migrate:|shellcheck\s)")
DIRECTIVE = re.compile(r"#\s*(?:syntax|escape|check)\s*=", re.I)  # a Dockerfile parser directive
_VALUE = r"""(?P<value>"[^"$`\\]*"|'[^']*'|[^\s"'$`\\;&|<>()#]*)"""
SHELL_SETTING = re.compile(rf"^\s*(?:export\s+)?(?P<name>[A-Za-z_]\w*)={_VALUE}\s*(?:#.*)?$")
DOCKER_SETTING = re.compile(rf"^\s*ENV\s+(?P<name>[A-Za-z_]\w*)(?:=|\s+){_VALUE}\s*(?:#.*)?$", re.I)
DECLARES = re.compile(r"(?:export|ENV|ARG|env)\s+$", re.I)  # `export NAME`, `ENV NAME value`
# Where a word is a command (a line's start after any `NAME=value`, after `;`, `&`, `|`, `(`, a shell keyword or
# `RUN`) or the value a variable holds to be run as one (`MAYBE_COMPILE="neuron_parallel_compile"`).
COMMAND_AT = r"""(?:^[ \t\f]*(?:[A-Za-z_]\w*=\S*\s+)*|[;&|(]\s*|\b(?:exec|time|then|do|else|RUN)\s+|\b[A-Za-z_]\w*=["']?)"""
REMOVED = "NM404"
BF16_OPTION = "NM256"  # the marker names the programs' own bfloat16 option, not autocast
OWN_CODES = ("NM4", "NM5")


def process_shell(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    return process(path, data, settings, rewrite, SHELL_SETTING, "shell")


def process_dockerfile(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    return process(path, data, settings, rewrite, DOCKER_SETTING, "dockerfile")


def process(path: str, data: bytes, settings: Settings, rewrite: bool, setting: re.Pattern[str],
            kind: str) -> FileResult:
    source = decode(data)
    result = FileResult(path, old_bytes=data)
    policy = Policy(settings, path, rewrite)
    suppressions = line_suppressions(source.text, kind)
    out: list[str] = []
    removed_at: set[int] = set()  # where in `out` a setting was removed with nothing left in its place
    continued = False
    from neuron_migrate.pin.plan import drives_tpu  # here: the Python rules import this module (TRN1)

    tpu = drives_tpu(source.text)  # a TPU script's XLA variables are TPU's: only trn1 instance types are reported
    venv = _venv_program(source.text, settings, tpu)
    option = settings.project.bf16_option if settings.project is not None and kind == "shell" else None
    for lineno, line in enumerate(source.text.splitlines(keepends=True), start=1):
        found = [] if SHELL_COMMENT.match(line) else _findings(
            policy, suppressions, lineno, line, None if continued else setting.match(line), out, tpu, venv, option)
        inside_command, continued = continued, line.rstrip("\r\n").endswith("\\")
        result.findings.extend(f for f, _ in found)
        if any(d.fix and d.code == REMOVED for _, d in found):
            result.applied[REMOVED] = result.applied.get(REMOVED, 0) + 1
            kept = _kept_comment(line, setting, kind, source.newline)
            if not kept:
                removed_at.add(len(out))
            out.extend(kept)
            continue
        if not inside_command:  # a comment line would cut a continued command in two
            indent = line[:len(line) - len(line.lstrip(" \t"))]
            out.extend(indent + d.marker + source.newline for _, d in found if d.mark)
        out.append(line)
    new_text = "".join(_without_orphaned_comments(out, removed_at))
    if rewrite and new_text != source.text:
        result.new_bytes = source.encode(new_text)
        result.manual = _marker_findings(new_text, path, settings)
    # the markers already in the file are findings in both commands (`check --format json` runs a rewrite)
    result.findings.extend(_marker_findings(source.text, path, settings))
    if suppressions is not None:
        result.used_suppressions = suppressions.used
    return result


def _kept_comment(line: str, setting: re.Pattern[str], kind: str, newline: str) -> list[str]:
    """The comment of a removed shell setting (`export PJRT_DEVICE=NEURON  # the XLA runtime`), kept as a line of
    its own at the setting's indentation (a Dockerfile has no comments after an instruction)."""
    m = setting.match(line)
    comment = line[m.end("value"):].strip() if m and kind == "shell" else ""
    if not comment.startswith("#") or SUPPRESSION.search(comment):
        return []
    return [line[:len(line) - len(line.lstrip(" \t"))] + comment + (newline if line.endswith(("\n", "\r")) else "")]


def _without_orphaned_comments(out: list[str], removed_at: set[int]) -> list[str]:
    """`out` without the comment lines right above each place a setting was removed (an index of `removed_at`)
    that only described it: the place is followed by a blank line, a comment or the end, so the comment explained
    nothing else (`# Keep only 3 graphs` above `export NEURON_NUM_RECENT_MODELS_TO_KEEP=3` and the next commented
    setting). A comment over a block that goes on with a kept line, the comments that open the file (after any
    shebang: a licence, a usage note), a directive, a marker or a suppression stay. Where a whole block between
    two blank lines went, one blank line stays."""
    kept = list(out)
    for at in sorted(removed_at, reverse=True):
        if at < len(kept) and kept[at].strip() and not SHELL_COMMENT.match(kept[at]):
            continue
        start = at
        while start and _describes(kept[start - 1]):
            start -= 1
        if start < at and start and not kept[start - 1].startswith("#!"):  # a file's header is not the setting's
            del kept[start:at]
            at = start
        if 0 < at < len(kept) and not kept[at - 1].strip() and not kept[at].strip():
            del kept[at]  # the block went whole: one blank line, not two, where it was
    return kept


def _describes(line: str) -> bool:
    """A plain comment line: not a shebang, a marker, a suppression or a parser directive (`# syntax=...`)."""
    text = line.strip()
    return (text.startswith("#") and not text.startswith(("#!", MARKER_PREFIX))
            and not SUPPRESSION.search(text) and not DIRECTIVE.match(text))


def _leaves_marker(code: str) -> bool:
    info = catalogue.rule(code)
    return info.fix is FixSafety.MANUAL and not info.check_only


def _marker_findings(text: str, path: str, settings: Settings) -> list[Finding]:
    """NM900 for the markers these checks leave (the pin handlers report their own NM6xx markers)."""
    if MARKER_PREFIX not in text or not settings.enabled(MARKER_CODE, path):
        return []
    info = catalogue.rule(MARKER_CODE)
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        m = MARKER_RE.search(line)
        if m and _leaves_marker(m.group(1)) and m.group(1).startswith(OWN_CODES):
            out.append(Finding(path, lineno, m.start() + 1, MARKER_CODE, info.format(code=m.group(1),
                                                                                   text=m.group(2).strip()),
                               end_line=lineno, end_col=len(line.rstrip()) + 1))
    return out


def _venv_program(text: str, settings: Settings, tpu: bool) -> str | None:
    """What the legacy DLAMI venvs a file activates serve (None: they are not reported): the program moving to
    neuron it launches, or one of its project (engine/project.py), or the file itself when it sets the XLA
    stack's variables or runs its tools."""
    if "aws_neuronx_venv" not in text or tpu:
        return None
    project = settings.project
    if project is not None and project.launches_moving is not None:
        return f"`{project.launches_moving}`, which moves to neuron,"
    if env_pattern().search(text) or _command_pattern().search(text):
        return "this script, which sets the XLA stack's variables or runs its tools,"
    return None


def _findings(policy: Policy, suppressions: LineSuppressions | None, lineno: int, line: str,
              setting: re.Match | None, above: list[str], tpu: bool = False,
              venv: str | None = None, option: str | None = None) -> list[tuple[Finding, Decision]]:
    """The line's findings, as the policy decides them; `above`: the lines before it (a marker there stands
    for its code); `venv`: the program a legacy DLAMI venv would run (None: not reported); `option`: the
    bfloat16 option of the programs the script launches (None: none they all take)."""
    out = []
    for col, end, code, fields in _line_findings(line, setting, tpu, venv, option):
        decision = policy.decide(code, lineno, suppressions, fields, marked=lambda: _marked(above, code))
        if code == BF16_OPTION and decision is None:  # NM256 off: the setting is marked as any other
            code = "NM403"
            decision = policy.decide(code, lineno, suppressions, fields, marked=lambda: _marked(above, code))
        if decision is not None:
            out.append((decision.finding(policy, lineno, col + 1, end_line=lineno, end_col=end + 1), decision))
    return out


def _marked(above: list[str], code: str) -> bool:
    """A marker of `code` above the line; either bfloat16 marker (NM403, NM256) stands for the other: once the
    programs are migrated they no longer tell their option, and a second run must not mark the line again."""
    return any(marked_above(above, c) for c in ((code,) if code not in _BF16_MARKERS else _BF16_MARKERS))


_BF16_MARKERS = ("NM403", BF16_OPTION)
_ASSIGNED = re.compile(rf"={_VALUE}")


def _assigned(line: str, end: int) -> str | None:
    """The value of `NAME=value` whose name ends at `end` (None when it is not an assignment)."""
    m = _ASSIGNED.match(line, end)
    return m.group("value").strip("\"'") if m else None


def _other_device(entry: dict, value: str | None) -> bool:
    """A device-selecting variable set to a known value that is not Neuron's (`PJRT_DEVICE=TPU`)."""
    values = entry.get("neuron_values")
    return bool(values) and bool(value) and "$" not in value and value.upper() not in values


def _line_findings(line: str, setting: re.Match | None, tpu: bool = False, venv: str | None = None,
                   option: str | None = None):
    settings = []
    for m in () if tpu else env_pattern().finditer(line):
        if not (line[m.end():m.end() + 1] == "=" or DECLARES.search(line[:m.start()])):
            continue  # a mention (`$NAME`, a word in a message), not a setting
        name = m.group(1)
        alone = setting is not None and setting.group("name") == name
        value = setting.group("value").strip("\"'") if alone else _assigned(line, m.end())
        settings.append((m, name, alone, value))
    if any(_other_device(env_table()[name], value) for _, name, _, value in settings):
        settings = []  # `PJRT_DEVICE=TPU` (with `XLA_USE_BF16=1` beside it): another product's device, not Neuron's
    for m, name, alone, value in settings:
        entry = env_table()[name]
        assigned = _ASSIGNED.match(line, m.end())
        end = setting.end("value") if alone else assigned.end() if assigned else m.end()  # the name and its value
        code = code_for(name, value if alone else None, alone)
        if code == "NM403" and alone and option is not None:  # the line only turns it on: the option replaces it
            yield m.start(), end, BF16_OPTION, {"var": name, "option": option, "did": entry["did"],
                                                "instead": entry["instead"]}
            continue
        yield m.start(), end, code, {"var": name, "did": entry["did"], "instead": entry["instead"]}
    for m in () if tpu else _command_pattern().finditer(line):
        entry = command_table()[m.group("command")]
        yield m.start("path"), m.end("command"), "NM405", {
            "var": m.group("command"), "did": entry["did"], "instead": entry["instead"]}
    for m in TRN1.finditer(line):
        yield m.start(), m.end(), "NM520", {"text": m.group(0)}
    for m in LEGACY_VENV.finditer(line) if venv is not None else ():
        if f"{m.group(1)}.{m.group(2)}" not in matrix().native_torch:
            yield m.start(), m.end(), "NM616", {"venv": m.group(0), "torch": f"{m.group(1)}.{m.group(2)}",
                                                "program": venv}


@functools.lru_cache(maxsize=1)
def _command_pattern() -> re.Pattern[str]:
    names = "|".join(sorted(map(re.escape, command_table()), key=len, reverse=True))
    return re.compile(rf"{COMMAND_AT}(?P<path>(?:[^\s;&|()'\"=]*/)?)(?P<command>{names})(?![\w.-])", re.M)
