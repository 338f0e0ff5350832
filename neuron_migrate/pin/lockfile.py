"""Lock files (uv.lock, poetry.lock, pylock.toml): generated, so never edited; a pin they contradict is reported.

After `pin` changes pyproject.toml, the lock file still installs the old versions until it is regenerated. The
marker goes above the package's table and disappears when the locker writes the file again.
"""

from __future__ import annotations

import os
import re

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from neuron_migrate.findings import FileResult
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.matrix import Family, Matrix, matrix
from neuron_migrate.settings import Settings

_TABLE = re.compile(r"^\[\[packages?\]\]\s*(?:#.*)?$")  # a comment may follow (TOML)
_FIELD = re.compile(r"""^(name|version)\s*=\s*["']([^"']+)["']""")
LOCKERS = {"uv.lock": "uv lock", "poetry.lock": "poetry lock"}


def locked(doc: TextDocument) -> list[tuple[int, str, str]]:
    """(offset of the `[[package]]` line, canonical name, version) of every locked package."""
    out = []
    table = None
    fields: dict[str, str] = {}
    offset = 0
    for line in doc.text.splitlines(keepends=True):
        if _TABLE.match(line):
            table, fields = offset, {}
        elif line.startswith("["):
            table = None
        elif table is not None and (m := _FIELD.match(line)):
            fields[m.group(1)] = m.group(2)
            if len(fields) == 2:
                out.append((table, canonicalize_name(fields["name"]), fields["version"]))
                table = None
        offset += len(line)
    return out


def problem(name: str, version: str, family: Family, mx: Matrix) -> str | None:
    if name in mx.legacy_packages:
        return "a legacy XLA package"
    pin = family.pins.get(name)
    if not pin:
        return None
    try:
        public = Version(version).public
    except InvalidVersion:
        return None
    if name == "torch-neuronx" and not mx.is_native_neuronx(public):
        return "the legacy XLA build"
    if not SpecifierSet(pin).contains(public, prereleases=True):
        return f"outside the torch {family.torch} family (`{name}{pin}`)"
    return None


def process_lockfile(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    packages = locked(doc)
    names = {name for _, name, _ in packages}
    if not planning.in_scope(names) or planning.product(names) is not None:  # TPU or Inferentia 1: not Neuron's
        return doc.result(data)
    mx = matrix()
    name = os.path.basename(path)
    command = f"`{LOCKERS[name]}`" if name in LOCKERS else "your locking tool"
    for offset, package, version in packages:
        if why := problem(package, version, doc.family, mx):
            doc.report("NM609", offset, lock=name, package=package, version=version, why=why, command=command)
    return doc.result(data)
