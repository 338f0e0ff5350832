"""The XLA-stack libraries: files of torch_xla, neuronx-distributed, optimum-neuron ... are left alone.

Those libraries are built on torch_xla: rewritten line by line they would run on neither stack (some calls
rewritten, others kept, the package's own imports marked, its setup.py made to drop torch-xla while its code still
imports it). They are dependencies to replace, not code to migrate. So, after the files are found and before any
is read, the files of such a library are set aside, sources and pins alike, and the run reports one note per
library (`Run.libraries`) instead of findings.

A file belongs to a library (the table is `rules/libraries.toml`) when
- the project declared above it is one: the nearest folder with a project file (pyproject.toml `[project]` or
  `[tool.poetry]` name, setup.cfg `[metadata] name`, setup.py `setup(name=...)`, an installed `*.egg-info/PKG-INFO`
  `Name:`) declares its name, or names a fork's repository in its URLs (`[project.urls]`, setup.py `url=` /
  `project_urls=`, setup.cfg `url`, PKG-INFO `Home-page:` / `Project-URL:`): the Neuron forks kept the upstream
  package names, so a fork's package is told by the repository its metadata points to;
- or its own top-level package is one: the folders above the file that hold an `__init__.py`, walked up from the
  file's folder (`.../torch_xla/core/xla_model.py` is in package `torch_xla` without any project file, as in a
  wheel's sources; `optimum/neuron/...` is in `optimum.neuron`, `optimum` being a namespace folder);
- or it lies in the repository folder of a Neuron fork that kept the upstream names (`neuronx-nemo-megatron`),
  or in a git clone of one under another folder name (the remote URL in its `.git/config` names the fork).

Code that imports such a library from outside (a training script, another project) is not affected.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from dataclasses import dataclass
from typing import Iterable

from neuron_migrate.catalogue import load_data, toml_reader
from neuron_migrate.pin import canonical_name
from neuron_migrate.engine import store
from neuron_migrate.engine.sources import read_regular

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
    instead_extras: tuple[tuple[str, str], ...] = ()  # (pip extra, what replaces the library installed with it)


@functools.lru_cache(maxsize=1)
def specs() -> tuple[Spec, ...]:
    return tuple(Spec(row["name"], tuple(tuple(p.split(".")) for p in row.get("packages", ())),
                      frozenset(canonical_name(p) for p in row.get("projects", ())),
                      frozenset(row.get("folders", ())), row["instead"], row.get("kind", XLA_STACK),
                      tuple(sorted(row.get("instead_extras", {}).items())))
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
        self._projects: dict[str, Declared | None] = {}  # folder -> the project declared there or above
        self._inits: dict[str, bool] = {}

    def library_of(self, path: str) -> Found | None:
        folder = os.path.dirname(os.path.abspath(path))
        return self._by_project(folder) or self._by_package(folder) or self._by_folder(folder) \
            or self._by_remote(folder)

    # -- the project declared above the file ---------------------------------------------------------------
    def _by_project(self, folder: str) -> Found | None:
        project = self._project_above(folder)
        if project is None:
            return None
        wanted = canonical_name(project.name) if project.name else None
        for spec in specs():
            if wanted is not None and wanted in spec.projects:
                return Found(spec, project.root, f"{project.file} declares the project `{project.name}`")
            url = next((u for u in project.urls if _repository(u) in spec.folders), None)
            if url is not None:
                return Found(spec, project.root, f"{project.file} names the repository `{url}`")
        return None

    def _project_above(self, folder: str) -> Declared | None:
        """The nearest project declared above `folder` (its name None when it cannot be read), stopping at a
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
                name = _repository(url)
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
    data = read_regular(os.path.join(repository, ".git", "config"), 1 << 16)
    return _REMOTE_URL.findall(data.decode("utf-8", "replace")) if data is not None else []


@dataclass(frozen=True)
class Declared:
    """A project file's metadata: where it is, the name it declares (None: unreadable) and the URLs it names."""

    root: str
    file: str
    name: str | None
    urls: tuple[str, ...] = ()


def _repository(url: str) -> str:
    """The repository name at the end of a URL (`https://github.com/aws-neuron/neuronx-nemo-megatron.git`,
    `git@github.com:org/repo`, `https://github.com/org/repo/tree/main`)."""
    parts = url.strip().rstrip("/").split("github.com", 1)[-1].replace(":", "/").strip("/").split("/")
    return parts[1].removesuffix(".git") if len(parts) > 1 else parts[-1].removesuffix(".git")


def _declared(folder: str) -> Declared | None:
    """The project the folder declares (its project files, then an installed `*.egg-info/PKG-INFO`); the name is
    None when it cannot be read."""
    declares = None
    urls: list[str] = []
    for file in (*PROJECT_FILES, *_egg_infos(folder)):
        path = os.path.join(folder, file)
        if not os.path.isfile(path):
            continue
        name, found = _metadata_in(path)
        urls += found
        if name:
            return Declared(folder, file, name, tuple(urls))
        if name is not None and declares is None:
            declares = file
    return Declared(folder, declares, None, tuple(urls)) if declares is not None else None


def _egg_infos(folder: str) -> list[str]:
    """The PKG-INFO of the one `*.egg-info` a source tree holds after `pip install -e .` (a folder with several,
    as site-packages, holds other projects' metadata, not its own)."""
    if os.path.basename(folder) in ("site-packages", "dist-packages"):
        return []
    found = store.names_ending(folder, ".egg-info") or []
    return [os.path.join(found[0], "PKG-INFO")] if len(found) == 1 else []


# configparser finds an option line's delimiter with a pattern that backtracks over a run of blanks which something
# other than the delimiter follows: quadratic in the run's length (a line of 32,000 blanks between two letters took
# 6 s, a megabyte would take hours). A setup.cfg with such a run of 16 blanks or more before a line's first `=` or
# `:` is read as a file without a readable name; under 16, a megabyte takes at most 0.2 s.
_SLOW_FOR_CONFIGPARSER = re.compile(r"^[^\S\n]*[^#;\s][^=:\n]*?[^\S\n]{16}[^\s=:]", re.M)


def _metadata_in(path: str) -> tuple[str | None, list[str]]:
    """The project name a project file declares ("" when it declares a project without a readable name, None when
    it declares none: a pyproject.toml that only configures tools) and the URLs it names."""
    import configparser  # here, not at the start: most runs read no project file

    tomllib = toml_reader()
    data = read_regular(path, 1 << 20)
    if data is None:
        return None, []
    base = os.path.basename(path)
    try:
        if base == "pyproject.toml":
            table = tomllib.loads(data.decode("utf-8", "replace"))
            for section in (table.get("project"), table.get("tool", {}).get("poetry")):
                if isinstance(section, dict):
                    name = section.get("name")
                    links = [section.get(k) for k in ("homepage", "repository")]
                    links += list((section.get("urls") or {}).values()) if isinstance(section.get("urls"), dict) else []
                    return name if isinstance(name, str) else "", [u for u in links if isinstance(u, str)]
            return None, []
        if base == "setup.cfg":
            text = data.decode("utf-8", "replace")
            if _SLOW_FOR_CONFIGPARSER.search(text):
                return "", []
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(text)
            if not parser.has_section("metadata"):
                return None, []
            links = [parser.get("metadata", "url", fallback="")]
            extra = parser.get("metadata", "project_urls", fallback="")
            links += [line.partition("=")[2] for line in extra.splitlines()]
            return parser.get("metadata", "name", fallback=""), [u.strip() for u in links if u.strip()]
        if base == "PKG-INFO":
            return _pkg_info(data.decode("utf-8", "replace"))
        return _setup_py_metadata(ast.parse(data))
    except (tomllib.TOMLDecodeError, configparser.Error, SyntaxError, ValueError, RecursionError):
        return "", []


def _pkg_info(text: str) -> tuple[str, list[str]]:
    """`Name:`, `Home-page:` and `Project-URL: Source, <url>` of a PKG-INFO (its headers end at the first blank
    line)."""
    name, links = "", []
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Home-page":
            links.append(value.strip())
        elif key == "Project-URL":
            links.append(value.rpartition(",")[2].strip())
    return name, [u for u in links if u]


def _setup_py_metadata(module: ast.Module) -> tuple[str, list[str]]:
    """`setup(name="x")`, `name=NAME` with `NAME = "x"` at module level, or `name=os.environ.get("...", "x")`; and
    its `url=` and `project_urls={...}` strings."""
    constants = {t.id: node.value.value for node in module.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}
    for node in ast.walk(module):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if func != "setup":
            continue
        name, links = "", []
        for keyword in node.keywords:
            if keyword.arg == "name":
                name = _string(keyword.value, constants)
            elif keyword.arg == "url":
                links.append(_string(keyword.value, constants))
            elif keyword.arg == "project_urls" and isinstance(keyword.value, ast.Dict):
                links += [_string(v, constants) for v in keyword.value.values if v is not None]
        return name, [u for u in links if u]
    return "", []


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
