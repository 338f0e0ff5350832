"""The program's own files, read before it runs: which of them the script imports, and what torch_xla they
still use.

The import closure is static: every `import` and `from ... import` in the script and, in turn, in the files of
the project (the copied root) that they name, resolved the way the interpreter would from the script's folder,
the working folder, the project root and the folders between the script and the root (where
`sys.path.append("..")` and sibling packages such as `common/` are found). An import at the top of a file (not in
a function, a `try` or a test other than `if __name__ == "__main__":`) runs when the program starts; so does
the file it names.

What a migration left of torch_xla (and of the libraries built on it) in those files is reported before any run:
where the program cannot start without it (an import at start, in a file imported at start) and this interpreter
has no torch_xla, verify stops there and names each line, instead of running every program to that import.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

# The XLA-based stack: a migrated program that still imports one of these needs torch_xla to start.
LEGACY = ("torch_xla", "libneuronxla", "neuronx_distributed", "neuronx_distributed_training",
          "neuronx_distributed_inference", "transformers_neuronx")


@dataclass(frozen=True)
class Leftover:
    """One use of the XLA-based stack in the program's files."""

    path: str  # relative to the project root
    line: int
    code: str  # the line as written
    module: str  # the legacy module it imports or calls into
    at_start: bool  # runs when the program starts (an import at start, in a file imported at start)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} `{self.code}`"


@dataclass
class Closure:
    root: Path  # the project root the files are read in
    files: list[Path]  # the program's own files the script reaches by imports, the script first
    at_start: set[Path]  # those imported when the program starts
    leftovers: list[Leftover]

    def relative(self) -> set[str]:
        return {os.path.relpath(f, self.root) for f in self.files}

    def blocking(self) -> list[Leftover]:
        """The leftovers the program cannot start without, when this interpreter lacks their package."""
        return [u for u in self.leftovers if u.at_start and not _importable(u.module.split(".")[0])]


def _importable(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _legacy(name: str | None) -> bool:
    return bool(name) and name.split(".")[0] in LEGACY


def _is_main_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _imports(tree: ast.Module) -> list[tuple[ast.stmt, bool]]:
    """Every import statement, and whether it runs when the file is first imported (unconditionally)."""
    found: list[tuple[ast.stmt, bool]] = []

    def visit(body: list[ast.stmt], at_start: bool) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append((node, at_start))
            elif isinstance(node, ast.If):
                visit(node.body, at_start and _is_main_guard(node))
                visit(node.orelse, False)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit([n for n in inner if isinstance(n, ast.stmt)] +
                              [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body], False)
    visit(tree.body, True)
    return found


def _names(node: ast.stmt, package: str | None) -> list[str]:
    """The dotted module names an import statement may load (for `from a import b`, `a.b` too)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        if package is None:
            return []
        parts = package.split(".") if package else []
        if node.level - 1 > len(parts):
            return []
        base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    names = [base] if base else []
    return names + [f"{base}.{alias.name}" if base else alias.name for alias in node.names if alias.name != "*"]


def _resolve(name: str, search: list[Path]) -> list[Path]:
    """The files importing `name` runs, found under one of the search folders: each package's `__init__.py`,
    then the module itself."""
    parts = name.split(".")
    for folder in search:
        files: list[Path] = []
        current = folder
        for i, part in enumerate(parts):
            package, module = current / part, current / f"{part}.py"
            if (package / "__init__.py").is_file():
                files.append(package / "__init__.py")
                current = package
            elif module.is_file() and i == len(parts) - 1:
                files.append(module)
            elif package.is_dir() and i < len(parts) - 1:  # a namespace package
                current = package
            else:
                break
        else:
            if files:
                return files
        if files and parts[0] and (folder / parts[0]).exists():
            return files  # the package exists here: a name inside it that is not a module (`from a import f`)
    return []


def _package_of(path: Path, search: list[Path]) -> str | None:
    """The dotted package a file is in, relative to the first search folder that holds it."""
    for folder in search:
        try:
            relative = path.parent.resolve().relative_to(folder.resolve())
        except ValueError:
            continue
        return ".".join(relative.parts)
    return None


def _leftover_calls(tree: ast.Module, bound: dict[str, str]) -> list[tuple[int, str]]:
    """Calls through a name bound to a legacy module (`xm.mark_step()`): line and module."""
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            root = node.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                calls.append((node.lineno, bound[root.id]))
    return calls


def closure(script: Path, root: Path, cwd: Path | None = None) -> Closure:
    """The program's files reached from `script` by imports (within `root`), and the legacy uses in them."""
    script, root = script.resolve(), root.resolve()
    search = [script.parent]
    if cwd is not None and _within(cwd.resolve(), root):
        search.append(cwd.resolve())
    search += [p for p in script.parent.parents if _within(p, root)]
    seen: dict[Path, bool] = {}
    leftovers: list[Leftover] = []
    queue: list[tuple[Path, bool]] = [(script, True)]
    while queue:
        path, at_start = queue.pop(0)
        if path in seen and (seen[path] or not at_start):
            continue
        first = path not in seen
        seen[path] = at_start or seen.get(path, False)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
            tree = ast.parse(text)
        except (OSError, SyntaxError, ValueError):
            continue
        lines = text.splitlines()
        package = _package_of(path, search) if path != script else None
        bound: dict[str, str] = {}
        for node, starts in _imports(tree):
            for name in _names(node, package):
                if _legacy(name):
                    continue
                for found in _resolve(name, search):
                    queue.append((found.resolve(), at_start and starts))
            legacy = _legacy_imports(node)
            for module, alias in legacy:
                bound[alias] = module
            if legacy and (first or at_start):
                code = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
                leftovers.append(Leftover(os.path.relpath(path, root), node.lineno, code, legacy[0][0],
                                          at_start and starts))
        if first:
            for line, module in _leftover_calls(tree, bound):
                code = lines[line - 1].strip() if line <= len(lines) else ""
                leftovers.append(Leftover(os.path.relpath(path, root), line, code, module, False))
    files = [p for p in seen if _within(p, root)]
    unique = {(u.path, u.line): u for u in sorted(leftovers, key=lambda u: u.at_start)}  # at start wins
    return Closure(root, files, {p for p, s in seen.items() if s},
                   sorted(unique.values(), key=lambda u: (u.path, u.line)))


def _legacy_imports(node: ast.stmt) -> list[tuple[str, str]]:
    """(module, the name it binds) for each legacy module an import statement imports."""
    if isinstance(node, ast.Import):
        return [(a.name, a.asname or a.name.split(".")[0]) for a in node.names if _legacy(a.name)]
    if isinstance(node, ast.ImportFrom) and not node.level and _legacy(node.module):
        return [(f"{node.module}.{a.name}", a.asname or a.name) for a in node.names]
    return []


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
