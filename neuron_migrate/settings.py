"""Run settings: what the command line and `[tool.neuron-migrate]` decide, passed to every handler."""

from __future__ import annotations

from dataclasses import dataclass, field

from neuron_migrate.project_facts import FileProject


@dataclass(frozen=True)
class Settings:
    select: frozenset[str] = frozenset()  # rule codes or prefixes ("NM1"); empty: all
    ignore: frozenset[str] = frozenset()
    compile: bool = True  # insert model.compile(backend="neuron", dynamic=False) where a model is placed
    unsafe_fixes: bool = False  # also apply the fixes marked unsafe (`--unsafe-fixes`); default: safe ones only
    torch: str | None = None  # target family for pins ("2.13", "2.14"); None: the default in rules/versions.toml
    neuron_sdk: str | None = None  # target Neuron release ("2.34", "2.33.1"); None: the newest with that torch
    instance: str | None = None  # target instance ("trn2", "trn3", "inf2", "trn1"); None: the matrix's default
    device_style: str = "neuron"  # "neuron" or "accelerator"
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = field(default=())
    # `targets` in [tool.neuron-migrate]: (absolute folder or file, target) the user states (engine/project.py)
    targets: tuple[tuple[str, str], ...] = ()
    # what the project model tells this file (set per file by the runner; its key is part of the file's cache key)
    project: FileProject | None = None

    def __post_init__(self) -> None:
        if isinstance(self.project, dict):  # a catalogue example's settings (rules/project.toml)
            facts = {k: tuple(v) if isinstance(v, list) else v for k, v in self.project.items()}
            object.__setattr__(self, "project", FileProject(**facts))

    def enabled(self, code: str, path: str | None = None) -> bool:
        if self.select and not any(code.startswith(s) for s in self.select):
            return False
        if any(code.startswith(s) for s in self.ignore):
            return False
        if path is not None and self.per_file_ignores:
            import fnmatch
            import os

            # config patterns are absolute, or a bare file name pattern
            candidates = (path, os.path.abspath(path).replace(os.sep, "/"), os.path.basename(path))
            for pattern, codes in self.per_file_ignores:
                if any(code.startswith(c) for c in codes) and any(fnmatch.fnmatch(p, pattern) for p in candidates):
                    return False
        return True

    def key(self) -> str:
        """A stable text of everything that changes results (part of the cache key)."""
        return repr((sorted(self.select), sorted(self.ignore), self.compile, self.unsafe_fixes, self.torch,
                     self.device_style, self.per_file_ignores, self.neuron_sdk, self.instance, self.targets))
