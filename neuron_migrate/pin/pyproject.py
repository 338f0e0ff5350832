"""pyproject.toml: PEP 621 dependencies and optional dependencies, PEP 735 groups, Poetry tables, uv and Poetry
package sources, `requires-python`. Edited with tomlkit, so comments, order and quoting stay as they were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import Array, InlineTable, String, StringType, Table

from neuron_migrate.catalogue import toml_reader
from neuron_migrate.engine.sources import SourceError
from neuron_migrate.findings import FileResult
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.matrix import matrix, python_issue
from neuron_migrate.settings import Settings

Path = tuple[str, ...]


@dataclass
class Group:
    """One list of dependencies: a PEP 621 / PEP 735 array, or a Poetry table."""

    path: Path
    poetry: bool
    main: bool  # installed by default (not an extra or a development group)
    names: list[str]  # Poetry: package names; arrays: unused
    texts: list[str | None]  # requirement texts as `plan` reads them
    shown: list[str]  # how each entry looks in the file (for messages and positions)


@dataclass
class Decisions:
    outcomes: dict[Path, dict[int, planning.Outcome]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)  # TOML text of package sources to append


def _get(doc, path: Path):
    node = doc
    for key in path:
        if not hasattr(node, "get") or key not in node:
            return None
        node = node[key]
    return node


def _poetry_to_pep440(constraint: str) -> str:
    constraint = constraint.strip()
    if constraint in ("", "*"):
        return ""
    parts = []
    for part in constraint.split(","):
        part = part.strip()
        if part.startswith("^"):
            version = part[1:]
            numbers = version.split(".")
            head = next((i for i, n in enumerate(numbers) if n != "0"), len(numbers) - 1)
            upper = numbers[:head + 1]
            upper[-1] = str(int(upper[-1]) + 1) if upper[-1].isdigit() else upper[-1]
            parts.append(f">={version},<{'.'.join(upper)}")
        elif part.startswith("~") and not part.startswith("~="):
            version = part[1:]
            numbers = version.split(".")
            upper = numbers[:2] if len(numbers) > 1 else numbers[:1]
            upper[-1] = str(int(upper[-1]) + 1) if upper[-1].isdigit() else upper[-1]
            parts.append(f">={version},<{'.'.join(upper)}")
        elif re.match(r"\d", part):
            parts.append("==" + part)
        else:
            parts.append(part)
    return ",".join(parts)


def _poetry_value(value) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (InlineTable, Table, dict)) and isinstance(value.get("version"), str):
        return value["version"]
    return None


def groups(doc) -> list[Group]:
    out = []
    arrays: list[Path] = [("project", "dependencies")]
    for table in ("project", "optional-dependencies"), ("dependency-groups",):
        node = _get(doc, table)
        if hasattr(node, "keys"):
            arrays += [table + (key,) for key in node.keys()]
    for path in arrays:
        node = _get(doc, path)
        if isinstance(node, Array):
            texts = [str(v) if isinstance(v, String) else None for v in node]
            shown = [v.as_string() if isinstance(v, String) else "" for v in node]
            out.append(Group(path, False, path == ("project", "dependencies"), [], texts, shown))
    tables: list[Path] = [("tool", "poetry", "dependencies"), ("tool", "poetry", "dev-dependencies")]
    poetry_groups = _get(doc, ("tool", "poetry", "group"))
    if hasattr(poetry_groups, "keys"):
        tables += [("tool", "poetry", "group", key, "dependencies") for key in poetry_groups.keys()]
    for path in tables:
        node = _get(doc, path)
        if not hasattr(node, "items"):
            continue
        names, texts, shown = [], [], []
        for name, value in node.items():
            if name == "python":
                continue
            constraint = _poetry_value(value)
            names.append(name)
            texts.append(f"{name} @ source" if constraint is None else name + _poetry_to_pep440(constraint))
            shown.append(f"{name} = {value.as_string() if hasattr(value, 'as_string') else value}")
        out.append(Group(path, True, path == ("tool", "poetry", "dependencies"), names, texts, shown))
    return out


class Locator:
    """Offsets of entries in the original text, found in document order."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.cursor: dict[str, int] = {}

    def find(self, needle: str) -> int:
        """The next occurrence of `needle` outside comments (0 when there is none)."""
        at = self.cursor.get(needle, 0)
        while needle and (at := self.text.find(needle, at)) >= 0:
            line_start = self.text.rfind("\n", 0, at) + 1
            if "#" not in self.text[line_start:at]:
                self.cursor[needle] = at + 1
                return at
            at += 1
        return 0


def process_pyproject(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    try:
        parsed = tomlkit.parse(doc.text)
    except TOMLKitError as exc:
        raise SourceError(f"not valid TOML ({exc}); fix the file, then run again") from None
    locate = Locator(doc.text).find
    found = groups(parsed)
    installed = [planning.names_of([t for t in g.texts if t]) for g in found]
    if planning.python_in_scope(set().union(set(), *installed)):
        _check_python(doc, parsed, locate, planning.in_scope(set().union(set(), *installed)))
    if not planning.in_scope(set().union(set(), *installed)):
        return doc.result(data)
    main = set().union(set(), *(names for g, names in zip(found, installed) if g.main))
    decisions = Decisions()
    for group, names in zip(found, installed):
        outcomes, added = _pin_group(doc, group, main | names, locate)
        if group.main:
            main |= added
        if outcomes:
            decisions.outcomes[group.path] = outcomes
    _check_sources(doc, parsed, found, decisions)
    if not rewrite:
        return doc.result(data)
    return _render(doc, data, decisions, parsed)


def _pin_group(doc: TextDocument, group: Group, present: set[str], locate: Callable[[str], int]
               ) -> tuple[dict[int, planning.Outcome], set[str]]:
    """The group's approved outcomes, and the packages `rewrite` adds to it (in `check` too, which makes no edit:
    a later main group, such as Poetry's beside [project], must then report what `rewrite` reports)."""
    result = planning.plan(group.texts, doc.family, present, instance=doc.settings.instance,
                           unsafe_fixes=doc.settings.unsafe_fixes)
    offsets = [locate(s) for s in group.shown]
    added: set[str] = set()

    def report(index: int, code: str, fields: dict) -> bool:
        before = len(doc.findings)
        fixed = _report(index, code, fields)
        if code == "NM603" and len(doc.findings) > before and doc.findings[-1].fixable:
            added.update(planning.parse(requirement).name for _, requirement in fields["adds"])
        return fixed

    def _report(index: int, code: str, fields: dict) -> bool:
        if group.poetry:  # say it the Poetry way: `torch = "==2.14.0"`
            if code == "NM603":  # the packages the group lacks (not the outer `added`, which collects them)
                pins = [f'{name} = "{_poetry_pin(requirement, name)}"' for _, requirement in fields["adds"]
                        for name in [planning.parse(requirement).name]]
                fields = {**fields, "requirement": "`, `".join(pins), "pin": "`, `".join(pins)}
            else:
                name = group.names[index]
                pin = f'{name} = "{_poetry_pin(fields["pin"], name)}"' if "pin" in fields else ""
                fields = {**fields, "requirement": group.shown[index], "pin": pin}
        return doc.report(code, offsets[index], end=offsets[index] + len(group.shown[index]), **fields)

    return planning.approve(result, group.texts, report), added


def _poetry_pin(requirement: str, name: str) -> str:
    req = planning.parse(requirement)
    return (req.spec if req is not None else "") or "*"


def _check_python(doc: TextDocument, parsed, locate: Callable[[str], int], neuron: bool) -> None:
    candidates = [(("project", "requires-python"), "requires-python", str),
                  (("tool", "poetry", "dependencies", "python"), "python", _poetry_to_pep440)]
    for path, key, convert in candidates:
        value = _get(parsed, path)
        issue = python_issue(convert(str(value)), neuron) if isinstance(value, str) else None
        if issue is not None:
            offset = locate(value.as_string())
            doc.report(issue[0], offset, end=offset + len(value.as_string()), text=f"{key} = {value.as_string()}",
                       **issue[1])


def _check_sources(doc: TextDocument, parsed, found: list[Group], decisions: Decisions) -> None:
    url = matrix().index_url
    if url in doc.text:
        return
    neuron = set(matrix().required_packages)
    tables = [
        (("tool", "uv"), False, "This uv project", "a `[[tool.uv.index]]` table", "[[tool.uv.index]]",
         f'name = "neuron"\nurl = "{url}"\n'),
        (("tool", "poetry"), True, "This Poetry project", "a supplemental `[[tool.poetry.source]]`",
         "[[tool.poetry.source]]", f'name = "neuron"\nurl = "{url}"\npriority = "supplemental"\n'),
    ]
    for path, poetry, what, how, header, body in tables:
        if _get(parsed, path) is None:
            continue
        installs = set()
        for group in found:
            if group.poetry == poetry:
                installs |= planning.names_of([t for t in group.texts if t])
                for outcome in decisions.outcomes.get(group.path, {}).values():
                    installs |= planning.names_of(outcome.extra)
        if installs & neuron and doc.report("NM604", doc.line_start(max(doc.text.find("[tool"), 0)),
                                           what=what, how=how, url=url):
            decisions.sources.append(f"{header}\n{body}")


def _render(doc: TextDocument, data: bytes, decisions: Decisions, parsed) -> FileResult:
    if not decisions.outcomes and not decisions.sources and not doc.edits:
        return doc.result(data)
    if doc.edits:  # markers first (comments move no entry), then the entries on the marked text
        parsed = tomlkit.parse(doc.render())
    for path, outcomes in decisions.outcomes.items():
        node = _get(parsed, path)
        if isinstance(node, Array):
            _apply_array(node, outcomes)
        else:
            _apply_table(node, outcomes)
    new_text = tomlkit.dumps(parsed)
    for source in decisions.sources:
        new_text = new_text.rstrip("\n") + "\n\n" + source
    tomllib = toml_reader()
    try:
        tomllib.loads(new_text)
    except tomllib.TOMLDecodeError as exc:
        raise SourceError(f"internal error: pinning gave TOML that does not parse ({exc}); the file was left alone. "
                          "Please report this.") from None
    result = doc.result(data)
    if new_text != doc.text:
        result.new_bytes = doc.source.encode(new_text)
        result.applied = {k: v for k, v in doc.applied.items() if v}  # the entries changed through tomlkit count too
    return result


def _string_like(old, value: str):
    literal = isinstance(old, String) and old.type is StringType.SLL and "'" not in value
    return tomlkit.string(value, literal=literal)


def _apply_array(array: Array, outcomes: dict[int, planning.Outcome]) -> None:
    for index in sorted(outcomes, reverse=True):
        outcome = outcomes[index]
        old = array[index]
        extra = [_string_like(old, t) for t in outcome.extra]
        if outcome.remove:
            if extra:
                array[index] = extra.pop(0)
            else:
                del array[index]
                continue
        elif outcome.replacement is not None:
            array[index] = _string_like(old, outcome.replacement)
        for offset, item in enumerate(extra, start=1):
            array.insert(index + offset, item)


def _apply_table(table, outcomes: dict[int, planning.Outcome]) -> None:
    names = [n for n in table.keys() if n != "python"]
    for index in sorted(outcomes, reverse=True):
        outcome = outcomes[index]
        name = names[index]
        if outcome.remove:
            del table[name]
        elif outcome.replacement is not None:
            spec = _poetry_pin(outcome.replacement, name)
            if isinstance(table[name], str):
                table[name] = spec
            else:
                table[name]["version"] = spec
        for requirement in outcome.extra:
            req = planning.parse(requirement)
            table.add(req.name, _poetry_pin(requirement, req.name))
