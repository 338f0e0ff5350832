"""Shell scripts and Dockerfiles: legacy environment variables and trn1 instance types.

Report only (these handlers never change a file). A line can silence a code with the same comments as
Python (`# neuron-migrate: ignore[NM405]`, `# noqa: NM405`).
"""

from __future__ import annotations

import re

from neuron_migrate import catalogue
from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.rules.environment import code_for, env_pattern, env_table
from neuron_migrate.settings import Settings
from neuron_migrate.sources import decode
from neuron_migrate.suppress import codes_in

TRN1 = re.compile(r"(?<![\w.-])(ml\.)?trn1n?\.\d*x?large\b")
SHELL_COMMENT = re.compile(r"^\s*#")


def process_shell(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    return FileResult(path, old_bytes=data, findings=scan(path, data, settings))


def process_dockerfile(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    return FileResult(path, old_bytes=data, findings=scan(path, data, settings))


def scan(path: str, data: bytes, settings: Settings) -> list[Finding]:
    out: list[Finding] = []
    for lineno, line in enumerate(decode(data).text.splitlines(), start=1):
        if SHELL_COMMENT.match(line):
            continue
        silenced = codes_in(line[line.index("#"):]) if "#" in line else frozenset()
        for col, code, fields in _line_findings(line):
            if settings.enabled(code, path) and code not in silenced and "*" not in silenced:
                out.append(Finding(path, lineno, col + 1, code, catalogue.rule(code).format(**fields)))
    return out


def _line_findings(line: str):
    for m in env_pattern().finditer(line):
        name = m.group(1)
        entry = env_table()[name]
        yield m.start(), code_for(name, None, False), {"var": name, "did": entry["did"], "instead": entry["instead"]}
    for m in TRN1.finditer(line):
        yield m.start(), "NM520", {"text": m.group(0)}
