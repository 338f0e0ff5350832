"""The XLA-stack libraries: files of torch_xla, neuronx-distributed, optimum-neuron ... are left alone.

Those libraries are built on torch_xla: rewritten line by line they would run on neither stack (some calls
rewritten, others kept, the package's own imports marked, its setup.py made to drop torch-xla while its code still
imports it). They are dependencies to replace, not code to migrate. So, after the files are found and before any
is read, the files of such a library are set aside, sources and pins alike, and the run reports one note per
library (`Run.libraries`) instead of findings.

A file belongs to a library (the table is `rules/libraries.toml`) when
- the project declared above it is one: the nearest folder with a project file (pyproject.toml `[project]` or
  `[tool.poetry]` name, setup.cfg `[metadata] name`, setup.py `setup(name=...)`) declares its name;
- or its own top-level package is one: the folders above the file that hold an `__init__.py`, walked up from the
  file's folder (`.../torch_xla/core/xla_model.py` is in package `torch_xla` without any project file, as in a
  wheel's sources; `optimum/neuron/...` is in `optimum.neuron`, `optimum` being a namespace folder);
- or it lies in the repository folder of a Neuron fork that kept the upstream names (`neuronx-nemo-megatron`),
  or in a git clone of one under another folder name (the remote URL in its `.git/config` names the fork).

Code that imports such a library from outside (a training script, another project) is not affected.
"""

from __future__ import annotations

import ast
import configparser
import functools
import os
import re
import tomllib
from dataclasses import dataclass
from typing import Iterable

from packaging.utils import canonicalize_name

from neuron_migrate.catalogue import load_data

PROJECT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
XLA_STACK, MULTI_BACKEND = "xla-stack", "multi-backend"  # built on torch_xla; serving TPUs through it among others
LINK = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/index.html"


@dataclass(frozen=True)
class Spec:
    """One row of rules/libraries.toml."""

    name: str
    packages: tuple[tuple[str, ...], ...]
    projects: frozenset[str]
    folders: frozenset[str]
    instead: str
    kind: str = XLA_STACK


@functools.lru_cache(maxsize=1)
def specs() -> tuple[Spec, ...]:
    return tuple(Spec(row["name"], tuple(tuple(p.split(".")) for p in row.get("packages", ())),
                      frozenset(canonicalize_name(p) for p in row.get("projects", ())),
                      frozenset(row.get("folders", ())), row["instead"], row.get("kind", XLA_STACK))
                 for row in load_data("libraries.toml")["library"])


@dataclass(frozen=True)
class Library:
    """An XLA-stack library met in the run: the files of it that were found and left alone."""

    name: str  # as the table names it
    root: str  # the folder that holds it, as shown to the user
    evidence: str  # how it was told: "pyproject.toml declares `optimum-neuron`", "package `torch_xla`"
    instead: str
    files: int
    kind: str = XLA_STACK

    @property
    def message(self) -> str:
        files = "file was" if self.files == 1 else f"{self.files} files were"
        if self.kind == MULTI_BACKEND:
            return (f"{self.name} is a library that serves several backends ({self.evidence}): its torch_xla code "
                    f"paths serve TPU users too, so its {files} left alone (code and pins); {self.instead}")
        return (f"{self.name} is part of the XLA-based stack ({self.evidence}): its {files} left alone (code and "
                f"pins), since such a library is replaced on the native backend, not migrated line by line; "
                f"migrate the code that uses it ({self.instead})")

    def to_json(self) -> dict:
        return {"path": self.root, "library": self.name, "kind": self.kind, "evidence": self.evidence,
                "files": self.files, "message": self.message, "link": LINK}


@dataclass(frozen=True)
class Found:
    spec: Spec
    root: str  # absolute folder
    evidence: str


class Finder:
    """Which library a file belongs to; every folder is looked at once per run."""

    def __init__(self) -> None:
        self._remotes: dict[str, Found | None] = {}  # repository folder -> the fork its git remote names
        self._projects: dict[str, tuple[str, str, str | None] | None] = {}  # folder -> (root, file, name)
        self._inits: dict[str, bool] = {}

    def library_of(self, path: str) -> Found | None:
        folder = os.path.dirname(os.path.abspath(path))
        return self._by_project(folder) or self._by_package(folder) or self._by_folder(folder) \
            or self._by_remote(folder)

    # -- the project declared above the file ---------------------------------------------------------------
    def _by_project(self, folder: str) -> Found | None:
        project = self._project_above(folder)
        if project is None or project[2] is None:
            return None
        root, file, name = project
        wanted = canonicalize_name(name)
        for spec in specs():
            if wanted in spec.projects:
                return Found(spec, root, f"{file} declares the project `{name}`")
        return None

    def _project_above(self, folder: str) -> tuple[str, str, str | None] | None:
        """(folder, file, declared name or None) of the nearest project file above `folder`, stopping at a
        repository root; None when there is none."""
        if folder in self._projects:
            return self._projects[folder]
        found = _declared(folder)
        if found is None and not os.path.exists(os.path.join(folder, ".git")):
            parent = os.path.dirname(folder)
            found = self._project_above(parent) if parent != folder else None
        self._projects[folder] = found
        return found

    # -- the file's own top-level package ------------------------------------------------------------------
    def _is_package(self, folder: str) -> bool:
        if folder not in self._inits:
            self._inits[folder] = os.path.isfile(os.path.join(folder, "__init__.py"))
        return self._inits[folder]

    def _by_package(self, folder: str) -> Found | None:
        chain: list[str] = []
        top = folder
        while self._is_package(top):
            chain.insert(0, os.path.basename(top))
            parent = os.path.dirname(top)
            if parent == top:
                break
            top = parent
        if not chain:
            return None
        # a namespace folder (no __init__.py) may hold the package: optimum/neuron
        outer = [os.path.basename(top), *chain]
        for spec in specs():
            for package in spec.packages:
                if tuple(chain[:len(package)]) == package:
                    return Found(spec, os.path.join(top, *package), f"package `{'.'.join(package)}`")
                if len(package) > 1 and tuple(outer[:len(package)]) == package:
                    return Found(spec, os.path.join(os.path.dirname(top), *package),
                                 f"package `{'.'.join(package)}`")
        return None

    # -- the repository of a Neuron fork -------------------------------------------------------------------
    def _by_remote(self, folder: str) -> Found | None:
        """A clone of a Neuron fork under another folder name: its git remote names the fork's repository."""
        if folder in self._remotes:
            return self._remotes[folder]
        top = folder
        while not os.path.isdir(os.path.join(top, ".git")):
            parent = os.path.dirname(top)
            if parent == top:
                self._remotes[folder] = None
                return None
            top = parent
        if top not in self._remotes:
            found = None
            for url in _remote_urls(top):
                name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
                spec = next((s for s in specs() if name in s.folders), None)
                if spec is not None:
                    found = Found(spec, top, f"the git remote `{url}`")
                    break
            self._remotes[top] = found
        self._remotes[folder] = self._remotes[top]
        return self._remotes[top]

    @staticmethod
    def _by_folder(folder: str) -> Found | None:
        parts = folder.split(os.sep)
        for spec in specs():
            for i in range(len(parts) - 1, 0, -1):
                if parts[i] in spec.folders:
                    return Found(spec, os.sep.join(parts[:i + 1]), f"the repository `{parts[i]}`")
        return None


_REMOTE_URL = re.compile(r"^[ \t]*url[ \t]*=[ \t]*(\S+)", re.M)  # blanks of one line: linear (tests/regex_audit.py)


def _remote_urls(repository: str) -> list[str]:
    """The remote URLs in a repository's `.git/config` (none when it cannot be read)."""
    try:
        with open(os.path.join(repository, ".git", "config"), encoding="utf-8", errors="replace") as fh:
            return _REMOTE_URL.findall(fh.read(1 << 16))
    except OSError:
        return []


def _declared(folder: str) -> tuple[str, str, str | None] | None:
    """(folder, file, name) when the folder declares a project; the name is None when it cannot be read."""
    declares = None
    for file in PROJECT_FILES:
        path = os.path.join(folder, file)
        if not os.path.isfile(path):
            continue
        name = _name_in(path)
        if name:
            return folder, file, name
        if name is not None and declares is None:
            declares = (folder, file, None)
    return declares


def _name_in(path: str) -> str | None:
    """The project name a project file declares; "" when it declares a project without a readable name, None
    when it declares none (a pyproject.toml that only configures tools)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    base = os.path.basename(path)
    try:
        if base == "pyproject.toml":
            table = tomllib.loads(data.decode("utf-8", "replace"))
            for section in (table.get("project"), table.get("tool", {}).get("poetry")):
                if isinstance(section, dict):
                    name = section.get("name")
                    return name if isinstance(name, str) else ""
            return None
        if base == "setup.cfg":
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(data.decode("utf-8", "replace"))
            return parser.get("metadata", "name", fallback="") if parser.has_section("metadata") else None
        return _setup_py_name(ast.parse(data))
    except (tomllib.TOMLDecodeError, configparser.Error, SyntaxError, ValueError, RecursionError):
        return ""


def _setup_py_name(module: ast.Module) -> str:
    """`setup(name="x")`, `name=NAME` with `NAME = "x"` at module level, or `name=os.environ.get("...", "x")`."""
    constants = {t.id: node.value.value for node in module.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    for node in ast.walk(module):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func != "setup":
            continue
        for keyword in node.keywords:
            if keyword.arg == "name":
                return _string(keyword.value, constants)
    return ""


def _string(value: ast.expr, constants: dict[str, str]) -> str:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if isinstance(value, ast.Name):
        return constants.get(value.id, "")
    if isinstance(value, ast.Call) and len(value.args) == 2:  # os.environ.get("VAR", "default"), os.getenv(...)
        return _string(value.args[1], constants)
    return ""


def shown(folder: str) -> str:
    """A folder as the user sees it: relative to the working folder when below it."""
    rel = os.path.relpath(folder)
    return folder if rel.startswith("..") else rel


def set_aside(targets: Iterable, finder: Finder | None = None) -> tuple[list, list[Library]]:
    """The targets that belong to no XLA-stack library, and the libraries the others belong to (in the order
    first met, with their file counts)."""
    finder = finder or Finder()
    kept = []
    met: dict[tuple[str, str], list] = {}
    for target in targets:
        found = finder.library_of(target.path)
        if found is None:
            kept.append(target)
            continue
        met.setdefault((found.spec.name, found.root), [found, 0])[1] += 1
    libraries = [Library(found.spec.name, shown(found.root), found.evidence, found.spec.instead, count,
                         found.spec.kind)
                 for found, count in met.values()]
    return kept, libraries
