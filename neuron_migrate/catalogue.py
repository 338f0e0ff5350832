"""The rule catalogue: codes, names, messages, fix safety, documentation and links, read from rules/*.toml.

The data lives at the top level of the repository (`rules/`) and ships inside the package as
`neuron_migrate/catalogue_data/`. Every file there may hold `[[rule]]` tables; other tables (version matrix,
fallback operators, mappings) are read by the modules that own them through `load_data`.

A code whose idiom is a 1:1 rename (the same callable, class or constant under another name, same arguments and
semantics) carries its match data as `[[rule.rename]]` rows, interpreted by one generic rule
(`neuron_migrate/rules/renames.py`) and listed by `explain` under "Names handled":

    [[rule.rename]]
    names = ["torch_xla.device_count", "torch_xla.runtime.addressable_device_count"]  # legacy qualified names
    neuron = "torch.neuron.device_count"            # the spelling written with --device-style neuron
    accelerator = "torch.accelerator.device_count"  # ... and with --device-style accelerator (default: `neuron`)
    import = "torch"                                # the module the spelling is reached through (default: its parent)

An optional `alias` is the name a long module is imported as where the file has no import of it
(`alias = "ckpt_wrapper"`: `import torch.distributed.algorithms._checkpoint.checkpoint_wrapper as ckpt_wrapper`).

Parsing the 15 TOML files costs 23 ms of every start. `catalogue.json` beside them holds each one already parsed,
with its size and digest, and `load_data` takes a file's data from there while its bytes are still those: 2 ms, their
check included. `python -m neuron_migrate.catalogue --write-snapshot` writes it afresh; a test fails when it is stale.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuron_migrate.engine import store
from neuron_migrate.findings import FixSafety

SNAPSHOT = "catalogue.json"  # every TOML file of the folder, parsed, by name: {"size", "digest", "data"}
WRITE_SNAPSHOT = "python -m neuron_migrate.catalogue --write-snapshot"
REQUIRED = ("code", "name", "message", "fix", "link", "summary", "why", "before", "after")
RENAME_KEYS = frozenset({"names", "neuron", "accelerator", "import", "alias"})


@dataclass(frozen=True)
class Rename:
    """One catalogue row: legacy qualified names that become `module` + `.` + the attribute path, per style."""

    names: tuple[str, ...]
    neuron: str
    accelerator: str
    module: str  # what `import` brings in; both spellings start with it
    alias: str | None = None  # the name the module is imported as where the file has no import of it (`as alias`)

    def spelling(self, portable: bool) -> str:
        return self.accelerator if portable else self.neuron

    def attribute(self, portable: bool) -> str:
        """The rest of the spelling after the module (`device_count` of `torch.neuron.device_count` is
        `neuron.device_count` after `torch`)."""
        return self.spelling(portable)[len(self.module) + 1:]


def data_dir() -> Path:
    return Path(store.data_dir())


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    message: str  # a str.format template; the rule fills the fields
    fix: FixSafety
    link: str
    summary: str  # one line: what the rule flags
    why: str  # why it matters
    before: str  # example of legacy code
    after: str  # the same example after the fix (empty for manual rules)
    fix_title: str = ""  # what the fix does, in imperative form
    fix_notes: str = ""  # why the fix is unsafe / what the marker asks for
    group: str = ""
    after_accelerator: str = ""  # the example after the fix with --device-style accelerator (device-naming rules)
    example_file: str = "example.py"  # the file name the example is checked as (kind: requirements, ...)
    check_only: bool = False  # a report without fix and without marker (performance and precision notes)
    # `rewrite` marks it only in files moving to neuron (they import torch_xla / torch_neuronx or use the device);
    # `check` reports it everywhere
    marks_migrating_only: bool = False
    example_settings: dict = field(default_factory=dict)  # settings the example is checked with ({"instance": "trn3"})
    renames: tuple[Rename, ...] = ()  # `[[rule.rename]]` rows: what the generic rename rule rewrites for this code
    marker: str = ""  # the marker's few words (a template like `message`); `explain` holds the long form

    def format(self, **fields: object) -> str:
        try:
            return self.message.format(**fields)
        except (KeyError, IndexError):
            return self.message

    def format_marker(self, **fields: object) -> str:
        """What the marker says: the `marker` template, or the message up to its first colon or semicolon."""
        if self.marker:
            try:
                return self.marker.format(**fields)
            except (KeyError, IndexError):
                return self.marker
        message = self.format(**fields)
        cuts = [i for i in (message.find(": "), message.find("; ")) if i > 0]
        return message[:min(cuts)] if cuts else message


class CatalogueError(Exception):
    pass


@functools.lru_cache(maxsize=None)
def load_data(name: str) -> dict:
    """One TOML file of the catalogue folder (for example `versions.toml`), parsed: the snapshot's copy when the
    file's bytes are the ones it was made from, else the file parsed now (edited since, or not in the snapshot)."""
    with open(data_dir() / name, "rb") as fh:
        raw = fh.read()
    entry = _snapshot(data_dir()).get(name)
    return entry["data"] if _made_from(entry, raw) else _toml(raw)


def _toml(raw: bytes) -> dict:
    return toml_reader().loads(raw.decode())


def toml_reader() -> Any:
    """Python's TOML reader (tomli before 3.11), imported on first use: a run whose catalogue files match the
    snapshot and that reads no project file never loads it (2 ms of start-up)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    return tomllib


def _made_from(entry: object, raw: bytes) -> bool:
    """Whether a snapshot entry holds a table parsed from exactly these bytes (their size and digest)."""
    return isinstance(entry, dict) and entry.get("size") == len(raw) and entry.get("digest") == store.digest(raw) \
        and isinstance(entry.get("data"), dict)


@functools.lru_cache(maxsize=None)
def _snapshot(folder: Path) -> dict:
    """The entries of the folder's snapshot by file name; none when it is missing, unreadable or not the JSON
    document `snapshot_text` writes."""
    try:
        document = json.loads((folder / SNAPSHOT).read_bytes())
    except (OSError, ValueError):
        return {}
    files = document.get("files") if isinstance(document, dict) else None
    return files if isinstance(files, dict) else {}


def snapshot_text(folder: Path) -> str:
    """The snapshot of the TOML files in `folder`: one line per file, in name order. CatalogueError for a value
    that JSON would not give back as tomllib gives it."""
    lines = []
    for path in sorted(folder.glob("*.toml")):
        raw = path.read_bytes()
        data = _toml(raw)
        for key, value in data.items():
            _check_json_safe(value, f"{path.name}: {key}")
        entry = {"size": len(raw), "digest": store.digest(raw), "data": data}
        lines.append(f"{json.dumps(path.name)}: {json.dumps(entry, ensure_ascii=False)}")
    return f'{{"written_by": {json.dumps(WRITE_SNAPSHOT)}, "files": {{\n' + ",\n".join(lines) + "\n}}\n"


def _check_json_safe(value: object, where: str) -> None:
    """CatalogueError unless `value` is made of what JSON gives back unchanged: strings, booleans, integers, finite
    floats, arrays and tables (not TOML's dates and times, nor inf and nan)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_json_safe(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json_safe(item, f"{where}[{i}]")
    elif not isinstance(value, (str, int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        raise CatalogueError(f"{where} is {value!r}, which JSON does not hold as TOML does; {SNAPSHOT} was not "
                             "written (write the value as a string, or teach catalogue.py to encode it)")


@functools.lru_cache(maxsize=1)
def catalogue() -> dict[str, RuleInfo]:
    rules: dict[str, RuleInfo] = {}
    for path in sorted(data_dir().glob("*.toml")):
        for raw in load_data(path.name).get("rule", []):
            missing = [k for k in REQUIRED if k not in raw]
            if missing:
                raise CatalogueError(f"{path.name}: rule {raw.get('code', '?')} lacks {', '.join(missing)}")
            if raw["code"] in rules:
                raise CatalogueError(f"{path.name}: duplicate rule code {raw['code']}")
            fields = {k: v for k, v in raw.items() if k in RuleInfo.__dataclass_fields__}
            fields["fix"] = FixSafety(raw["fix"])
            fields["renames"] = tuple(_rename(path.name, raw["code"], row) for row in raw.get("rename", ()))
            fields.setdefault("group", path.stem)
            rules[raw["code"]] = RuleInfo(**fields)
    return dict(sorted(rules.items()))


def _rename(where: str, code: str, row: dict) -> Rename:
    at = f"{where}: rule {code}: [[rule.rename]]"
    unknown = set(row) - RENAME_KEYS
    if unknown or not row.get("names") or not row.get("neuron"):
        raise CatalogueError(f"{at} needs `names` and `neuron` (and may have `accelerator`, `import`, `alias`); "
                             f"unknown: {', '.join(sorted(unknown)) or 'none'}")
    neuron = row["neuron"]
    accelerator = row.get("accelerator", neuron)
    if accelerator.startswith("torch.neuron."):
        raise CatalogueError(f"{at}: the accelerator spelling {accelerator} runs on Trainium only; give the "
                             f"`torch.accelerator` (or device-neutral) spelling")
    module = row.get("import", neuron.rsplit(".", 1)[0])
    for spelling in (neuron, accelerator):
        if not spelling.startswith(module + "."):
            raise CatalogueError(f"{at}: {spelling} is not reached through the imported module {module}")
    return Rename(tuple(row["names"]), neuron, accelerator, module, row.get("alias"))


def renames() -> dict[str, tuple[str, Rename]]:
    """Every catalogue rename row by legacy qualified name: {name: (code, row)}."""
    found: dict[str, tuple[str, Rename]] = {}
    for info in catalogue().values():
        for row in info.renames:
            for name in row.names:
                if name in found:
                    raise CatalogueError(f"{name} is renamed by both {found[name][0]} and {info.code}")
                found[name] = (info.code, row)
    return found


def rule(code: str) -> RuleInfo:
    try:
        return catalogue()[code]
    except KeyError:
        raise CatalogueError(f"unknown rule code {code}") from None


def _language(example_file: str) -> str:
    name = example_file.rsplit("/", 1)[-1]
    if name.startswith("Dockerfile") or name.endswith(".Dockerfile"):
        return "dockerfile"
    suffixes = {".py": "python", ".toml": "toml", ".sh": "bash", ".yml": "yaml", ".yaml": "yaml", ".cfg": "ini",
                ".ipynb": "json"}
    return next((lang for suffix, lang in suffixes.items() if name.endswith(suffix)), "text")


def explain(info: RuleInfo) -> str:
    """The rule's documentation, in one fixed template (printed by `explain`, collected in docs/rules.md)."""
    out = [f"# {info.code} {info.name}", "", info.summary.strip(), "", "## Why it matters", "", info.why.strip(), ""]
    fence = "```" + _language(info.example_file)
    out += ["## Example", "", fence, info.before.rstrip(), "```", ""]
    if info.after.strip():
        out += ["Use instead:", "", fence, info.after.rstrip(), "```", ""]
    if info.after_accelerator.strip():
        out += ["With `--device-style accelerator` (runs on Trainium, GPU and CPU alike):", "",
                fence, info.after_accelerator.rstrip(), "```", ""]
    if info.renames:
        out += ["## Names handled", ""]
        for row in info.renames:
            styles = f"`{row.neuron}`" if row.accelerator == row.neuron else \
                f"`{row.neuron}` (`--device-style accelerator`: `{row.accelerator}`)"
            out += [f"- `{name}` → {styles}" for name in row.names]
        out.append("")
    out += ["## Fix safety", ""]
    safety = {
        FixSafety.SAFE: "Safe: `neuron-migrate rewrite` applies this fix; the program computes the same thing.",
        FixSafety.UNSAFE: "Unsafe: `neuron-migrate rewrite --unsafe-fixes` applies this fix (plain `rewrite` holds "
        "it back and `check` shows it with `[~]`), and the report lists it for review.",
        FixSafety.MANUAL: "Manual: no automatic fix. `neuron-migrate rewrite` leaves a "
        f"`# TODO(neuron-migrate {info.code})` marker that `check` keeps reporting until a person resolves it.",
    }[info.fix]
    if info.marks_migrating_only:
        safety += (" The marker goes only into files moving to neuron (they import torch_xla or torch_neuronx, or "
                   "already use the `neuron` device); elsewhere `check` reports it and `rewrite` leaves the file "
                   "alone.")
    if info.check_only:
        safety = ("Report only: no automatic fix and no marker; `check` reports it until the code changes or the "
                  "line is suppressed (`# neuron-migrate: ignore[" + info.code + "]`).")
    out.append(safety + (f" {info.fix_notes.strip()}" if info.fix_notes.strip() else ""))
    out += ["", "## Reference", "", info.link, ""]
    return "\n".join(out)


def rules_markdown() -> str:
    """docs/rules.md: generated from the catalogue; a test fails when the checked-in copy is stale."""
    cat = catalogue()
    out = [
        "# Rules",
        "",
        "<!-- Generated by `neuron-migrate rules --markdown`; do not edit by hand. -->",
        "",
        "| Code | Name | Fix | Summary |",
        "| --- | --- | --- | --- |",
    ]
    for info in cat.values():
        out.append(f"| [{info.code}](#{info.code.lower()}-{info.name}) | {info.name} | {info.fix.value} | "
                   f"{info.summary.strip().replace('|', '/')} |")
    out.append("")
    for info in cat.values():
        out.append(explain(info).replace(f"# {info.code}", f"## {info.code}", 1).replace("\n## ", "\n### "))
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    """`python -m neuron_migrate.catalogue --write-snapshot`: writes the catalogue folder's snapshot afresh."""
    if argv != ["--write-snapshot"]:
        print(f"usage: {WRITE_SNAPSHOT}", file=sys.stderr)
        return 2
    try:
        text = snapshot_text(data_dir())
    except CatalogueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    (data_dir() / SNAPSHOT).write_text(text, encoding="utf-8")
    print(f"wrote {data_dir() / SNAPSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
