"""`[tool.neuron-migrate]` in pyproject.toml: found from the paths upward (like ruff), overridden by flags.

    [tool.neuron-migrate]
    select = ["NM1", "NM3"]              # codes or prefixes; default: all
    ignore = ["NM107"]
    per-file-ignores = { "tests/*" = ["NM3"], "__init__.py" = ["NM190"] }
    exclude = ["generated/", "*_pb2.py"]  # gitignore-style, like --exclude
    torch = "2.14"                        # target PyTorch family for pins: "2.13" or "2.14"
    neuron-sdk = "2.34"                   # target Neuron release (rules/versions.toml); default: the newest
    instance = "trn2"                     # target instance: "trn2" (default), "trn3", "inf2" or "trn1"
    targets = { "tpu/" = "tpu" }          # what a folder or file runs on, where the project does not say it
    compile = true                        # insert model.compile(backend="neuron") after placement
    unsafe-fixes = false                  # true: `rewrite` also makes the fixes marked unsafe (--unsafe-fixes)
    device-style = "neuron"               # or "accelerator" (torch.accelerator spellings)

The nearest pyproject.toml above the common folder of the paths that has the table wins; a pyproject.toml
without it is passed over. Patterns in `per-file-ignores` are relative to the folder of that file; a
pattern without a slash matches the file name in any folder.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from neuron_migrate import catalogue
from neuron_migrate.engine.sources import SourceError, read_bytes, size_limit
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.settings import Settings

TABLE = "neuron-migrate"
DEVICE_STYLES = ("neuron", "accelerator")
CODE_OR_PREFIX = re.compile(r"^NM\d{0,3}$")


class ConfigError(Exception):
    """A configuration the tool cannot use; the message names the file, the key and what is accepted."""


@dataclass(frozen=True)
class Resolved:
    settings: Settings
    exclude: tuple[str, ...]
    source: Path | None  # the pyproject.toml read, if any
    # pyproject.toml files that could not be read but cannot hold the table either: told, and the run goes on
    warnings: tuple[str, ...] = ()


LOOKALIKE_DIGITS = str.maketrans("OIL", "011")


def find_config(paths: Iterable[str], warnings: list[str] | None = None) -> Path | None:
    """The nearest pyproject.toml with a [tool.neuron-migrate] table, from the paths' common folder upward. A
    table spelled otherwise (`[tool.neuron_migrate]`) is an error, not a file without settings. A file that cannot
    be read (not TOML, nested too deep, too large) is an error when it may hold the table; when its bytes do not
    even name neuron, its message goes to `warnings` and the search goes on (a broken file of another tool
    must not stop the run)."""
    starts = [os.path.abspath(p) for p in paths] or [os.getcwd()]
    starts = [p if os.path.isdir(p) else os.path.dirname(p) for p in starts]
    folder = Path(os.path.commonpath(starts))
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            tool = _read(path).get("tool", {})
        except ConfigError as exc:
            if warnings is None or _may_hold_table(path):
                raise
            warnings.append(f"{exc}; it holds no [tool.{TABLE}] table, so the run went on without it")
            continue
        if not isinstance(tool, dict):
            continue
        if TABLE in tool:
            return path
        misspelt = [k for k in tool if _squeezed(k) == _squeezed(TABLE)]
        if misspelt:
            raise ConfigError(f"{path}: [tool.{misspelt[0]}] is not read; the table is [tool.{TABLE}] "
                              "(with a hyphen): rename it")
    return None


def _may_hold_table(path: Path) -> bool:
    """Whether the bytes of `path` hold "neuron" in any case, as a [tool.neuron-migrate] table however spelled
    does; read in pieces (the file may be too large to parse)."""
    tail = b""
    try:
        with open(path, "rb") as fh:  # a regular file (is_file): no FIFO
            while chunk := fh.read(1 << 20):
                if b"neuron" in (tail + chunk).lower():
                    return True
                tail = chunk[-5:]
    except OSError:
        return True
    return False


def _squeezed(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "").replace(".", "")


def explicit_table(path: Path) -> dict:
    """The settings of a file named with `--config`: a pyproject.toml's [tool.neuron-migrate] table, or the
    top level of any other TOML file (a `neuron-migrate.toml` holding the keys themselves)."""
    if not path.is_file():
        raise ConfigError(f"--config {path}: no such file")
    data = _read(path)
    table = data.get("tool", {}).get(TABLE) if isinstance(data.get("tool"), dict) else None
    if table is not None:
        return table
    if path.name == "pyproject.toml":
        raise ConfigError(f"--config {path}: the file has no [tool.{TABLE}] table")
    return data


def _read(path: Path) -> dict:
    tomllib = catalogue.toml_reader()
    try:
        # a regular file under the limit of its kind: a 50 MB pyproject.toml took a minute and 2.5 GB to parse
        return tomllib.loads(read_bytes(str(path), size_limit("pyproject"), "pyproject").decode("utf-8"))
    except SourceError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML (bytes are not valid utf-8 at byte {exc.start}); fix the file "
                          "or move it aside") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix the file or move it aside") from None
    except RecursionError:  # tomllib reads nested arrays and inline tables recursively
        raise ConfigError(f"{path}: arrays or tables nested too deep to read; fix the file or move it aside"
                          ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def codes(values: Iterable[str], where: str) -> frozenset[str]:
    """Validated rule codes or prefixes (`NM3`, `NM301`); an unknown one is an error."""
    known = catalogue.catalogue()
    out = set()
    for value in values:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected rule codes such as \"NM301\" or prefixes such as \"NM3\", "
                              f"got {value!r}")
        code = value.strip().upper()
        if not CODE_OR_PREFIX.match(code) or not any(k.startswith(code) for k in known):
            digits = code[:2] + code[2:].translate(LOOKALIKE_DIGITS)  # NM1O3: a letter O typed for a zero
            hint = [digits] if digits in known else difflib.get_close_matches(digits, known, n=1)
            raise ConfigError(f"{where}: no rule code or prefix {value!r}"
                              + (f" (did you mean {hint[0]}?)" if hint else "")
                              + "; `neuron-migrate rules` lists them")
        out.add(code)
    return frozenset(out)


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return value


def _choice(value: object, choices: tuple[str, ...], where: str) -> str:
    text = repr(value) if isinstance(value, float) else value  # torch = 2.14 written as a number
    if text not in choices:
        raise ConfigError(f"{where}: expected one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return text


def anchor(pattern: str, root: Path) -> tuple[str, ...]:
    """Absolute fnmatch patterns for a per-file-ignores pattern written relative to `root`."""
    pattern = pattern[2:] if pattern.startswith("./") else pattern
    if "/" not in pattern:
        return (pattern,)  # matched against the file name
    full = f"{root.as_posix().rstrip('/')}/{pattern.lstrip('/')}"
    return (full, full.replace("**/", "")) if "**/" in full else (full,)


TARGETS = ("tpu", "inf1", "inf2", "trn1", "trn2", "trn3", "neuron", "gpu")


def _anchor_path(pattern: str, root: Path) -> str:
    """A `targets` path (a folder or a file, relative to the configuration file's folder) made absolute."""
    return os.path.normpath(os.path.join(str(root.resolve()), pattern[2:] if pattern.startswith("./") else pattern))


def parse_table(table: dict, path: Path) -> dict:
    """The settings a [tool.neuron-migrate] table asks for, validated."""
    where = f"{path} [tool.{TABLE}]"
    out: dict = {}
    for key, value in table.items():
        at = f"{where} {key}"
        if key == "select":
            out["select"] = codes(_strings(value, at), at)
        elif key == "ignore":
            out["ignore"] = codes(_strings(value, at), at)
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{at}: expected a table of pattern = [codes], got {value!r}")
            out["per_file_ignores"] = tuple(
                (full, codes(_strings(c, f"{at} {p!r}"), f"{at} {p!r}"))
                for p, c in value.items() for full in anchor(p, path.parent))
        elif key == "exclude":
            out["exclude"] = tuple(_strings(value, at))
        elif key == "torch":
            out["torch"] = _choice(value, matrix().torch_versions, at)
        elif key == "neuron-sdk":
            out["neuron_sdk"] = _choice(value, matrix().sdk_names, at)
        elif key == "instance":
            out["instance"] = _choice(value, matrix().instances, at)
        elif key == "targets":
            if not isinstance(value, dict):
                raise ConfigError(f"{at}: expected a table of path = target, got {value!r}")
            out["targets"] = tuple((_anchor_path(p, path.parent), _choice(t, TARGETS, f"{at} {p!r}"))
                                   for p, t in value.items())
        elif key in ("compile", "unsafe-fixes"):
            if not isinstance(value, bool):
                raise ConfigError(f"{at}: expected true or false, got {value!r}")
            out[key.replace("-", "_")] = value
        elif key == "device-style":
            out["device_style"] = _choice(value, DEVICE_STYLES, at)
        else:
            known = ("select", "ignore", "per-file-ignores", "exclude", "torch", "neuron-sdk", "instance", "compile",
                     "unsafe-fixes", "device-style", "targets")
            hint = difflib.get_close_matches(key, known, n=1)
            raise ConfigError(f"{where}: unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                              + f"; the keys are {', '.join(known)}")
    return out


def resolve(paths: Iterable[str], **flags) -> Resolved:
    """Settings from the configuration file and the flags that were given (not None).

    A flag replaces the file's value, except `ignore` and `exclude`, which add to it.

    Flags: select, ignore (frozensets), exclude (tuple), compile (bool), torch, device_style (str),
    unsafe_fixes (bool: --unsafe-fixes / --no-unsafe-fixes); config_file (a path): this file instead of the
    pyproject.toml found from the paths.
    """
    paths = list(paths)
    warnings: list[str] = []
    config_file = flags.pop("config_file", None)
    if config_file is not None:
        source = Path(config_file)
        values = parse_table(explicit_table(source), source)
    else:
        source = find_config(paths, warnings)
        values = parse_table(_read(source)["tool"][TABLE], source) if source is not None else {}
    given = {k: v for k, v in flags.items() if v is not None}
    if "ignore" in given:
        given["ignore"] = given["ignore"] | values.get("ignore", frozenset())
    if "exclude" in given:
        given["exclude"] = (*values.get("exclude", ()), *given["exclude"])
    values.update(given)
    exclude = tuple(values.pop("exclude", ()))
    settings = replace(Settings(), **values)
    try:
        matrix().select(settings.neuron_sdk, settings.torch)
    except ValueError as exc:
        where = f"{source} [tool.{TABLE}]" if source is not None and not ({"torch", "neuron_sdk"} & given.keys()) \
            else "--neuron-sdk / --torch"
        raise ConfigError(f"{where}: {exc}") from None
    return Resolved(settings, exclude, source, tuple(warnings))
