"""Every regular expression of the package, timed on adversarial inputs of n and 4n characters.

Run as `python -m tests.regex_audit` (tests/test_regex_time.py runs it in a child process, so that a pattern that
backtracks without end is killed and named, not a hung test run). It prints one JSON line per pattern before
timing it (`{"trying": ...}`), and at the end one line `{"slow": [...], "patterns": N, "inputs": M}`.

The patterns: every compiled pattern held by a module of the package or a class or an instance there (the rules'
pre-filters), every literal pattern given to a `re` function in the source (read from the syntax tree), and every
pattern the `re` module compiled while the tool ran over the fixtures (the ones built at run time from tables).

An input is a prefix that starts a construct (`(`, `=`, `import `, `#`, `-r `, ...) and one unit repeated (`#`, a
space, `\\r`, quotes, backslashes, ...). Python's regex engine backtracks: a pattern with nested or overlapping
quantifiers takes time quadratic or exponential in the length of such a run. A pattern is slow when 4n
characters take more than SLOW_RATIO times what n take (linear: 4x; quadratic: 16x), beyond a floor of noise.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import sys
import time
from pathlib import Path

import neuron_migrate
from tests.helpers import deadline

N = 500
SLOW_RATIO = 9.0
HUNG = 5.0  # seconds for one input: a pattern backtracking without end
FLOOR = 0.002  # seconds for 4n characters: below this, nothing a user would notice
UNITS = ["#", " ", "\t", "\r", "\n", "\r\n", "'", '"', "\\", "\\\n", "(", "=", ",", ".", "a", "0", "-",
         "# ", "( ", "=#", "'''", "x.", "a ", "%", "$", ":", "/", "\\ ", "a=", "-r", "NM"]
PREFIXES = ["", "(", "=", "import ", "#", "-r ", "export A=", "x.", "%env ", "pip install ", "# noqa:", "=="]


def _modules():
    out = []
    for info in pkgutil.walk_packages(neuron_migrate.__path__, "neuron_migrate."):
        if info.name.endswith("__main__"):
            continue
        try:
            out.append(importlib.import_module(info.name))
        except Exception:  # an optional part (verify needs torch): its patterns still come from the source
            continue
    return out


def _held(modules) -> list[tuple[re.Pattern, str | None]]:
    """(pattern, the name it is held under, for _uses) for every compiled pattern held by a module, a class or a
    rule."""
    found = []

    def take(value, name=None, depth=0):
        if isinstance(value, re.Pattern):
            found.append((value, name))
        elif depth < 2 and isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                take(item, None, depth + 1)
        elif depth < 2 and isinstance(value, dict):
            for item in value.values():
                take(item, None, depth + 1)

    for module in modules:
        for name, value in vars(module).items():
            take(value, name)
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attr_name, attr in vars(value).items():
                    take(attr, attr_name)
    from neuron_migrate.rules import all_rules

    for rule in all_rules():
        for name, value in [*vars(type(rule)).items(), *getattr(rule, "__dict__", {}).items()]:
            take(value, name)
            if not isinstance(value, type):
                for inner_name, inner in getattr(value, "__dict__", {}).items():
                    take(inner, inner_name)
    return found


def _uses(name: str | None, source: str) -> set[str]:
    """The methods the package calls on a pattern held under `name` (`NAME.match(`); empty when not known."""
    if not name:
        return set()
    return set(re.findall(rf"\b{re.escape(name)}\.(match|fullmatch|search|finditer|findall|sub|subn|split)\(",
                          source))


FUNCS = {"compile", "search", "match", "fullmatch", "sub", "subn", "findall", "finditer", "split"}


def _flags(node) -> int | None:
    if node is None:
        return 0
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "re":
        return int(getattr(re, node.attr))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _flags(node.left), _flags(node.right)
        return None if left is None or right is None else left | right
    return None


def _literal(node):
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None
    return value if isinstance(value, (str, bytes)) else None


def _in_source() -> list[tuple[re.Pattern, str]]:
    found = []
    for path in Path(neuron_migrate.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_bytes())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and node.func.attr in FUNCS and node.args):
                continue
            pattern = _literal(node.args[0])
            flag_node = next((k.value for k in node.keywords if k.arg == "flags"), None)
            if flag_node is None and node.func.attr == "compile" and len(node.args) > 1:
                flag_node = node.args[1]
            elif flag_node is None and node.func.attr in ("search", "match", "fullmatch", "findall", "finditer") \
                    and len(node.args) > 2:
                flag_node = node.args[2]
            flags = _flags(flag_node)
            if pattern is not None and flags is not None:
                found.append((re.compile(pattern, flags), node.func.attr))
    return found


def _compiled_at_run_time() -> list[re.Pattern]:
    """Run the tool over the fixtures in this process, then take what `re` compiled (its cache)."""
    from neuron_migrate.engine.runner import run
    from neuron_migrate.settings import Settings

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    re.purge()
    run([str(fixtures)], Settings(), rewrite=True, jobs=1)
    return [p for p in re._cache.values() if isinstance(p, re.Pattern)]  # type: ignore[attr-defined]


def _held_elsewhere() -> set:
    """The patterns, and the pattern texts, held by modules that are not the package's (tokenize, LibCST, ...) or
    by their classes (configparser's option pattern, compiled when the package first reads a setup.cfg)."""
    out: set = set()

    def take(value) -> None:
        if isinstance(value, re.Pattern):
            out.add((type(value.pattern), value.pattern, value.flags))
        elif isinstance(value, str) and len(value) > 8:
            out.add(value)

    for name, module in list(sys.modules.items()):
        if name.startswith("neuron_migrate") or module is None:
            continue
        for value in list(vars(module).values()):
            take(value)
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for attribute in list(vars(value).values()):
                    take(attribute)
    return out


def _fnmatch_shaped(p: re.Pattern) -> bool:
    """A pattern `fnmatch` translated from a glob (the file kinds' names; fnmatch's own business)."""
    return isinstance(p.pattern, str) and p.pattern.startswith("(?s:") and p.pattern.endswith(")\\Z")


def patterns() -> list[tuple[re.Pattern, str]]:
    """(pattern, how the package uses it): "match" when it only ever matches at a position it is given (`match`,
    `fullmatch`), "search" otherwise (search, finditer, sub, split, or not known)."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in Path(neuron_migrate.__file__).parent.rglob("*.py"))
    how: dict[tuple, set[str]] = {}
    unique: dict[tuple, re.Pattern] = {}

    def add(p: re.Pattern, methods: set[str]) -> None:
        key = (type(p.pattern), p.pattern, p.flags)
        unique.setdefault(key, p)
        how.setdefault(key, set()).update(methods or {"search"})

    for p, name in _held(_modules()):
        add(p, _uses(name, source))
    for p, method in _in_source():
        if method == "compile" and (type(p.pattern), p.pattern, p.flags) in unique:
            continue  # held by a module: its uses are known
        add(p, set() if method == "compile" else {method})
    compiled = _compiled_at_run_time()
    foreign = _held_elsewhere()  # after the run: a module the tool imports on first use (configparser) counts too
    for p in compiled:  # the ones built from tables; not the standard library's nor LibCST's
        key = (type(p.pattern), p.pattern, p.flags)
        if key not in unique and key not in foreign and p.pattern not in foreign and not _fnmatch_shaped(p):
            add(p, set())
    anchored = {"match", "fullmatch"}
    return [(p, "match" if how[key] <= anchored else "search") for key, p in unique.items()]


def _time(pattern: re.Pattern, how: str, text, runs: int = 1) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        if how == "match":
            pattern.match(text)
        else:
            for _m in pattern.finditer(text):
                pass
        best = min(best, time.perf_counter() - start)
    return best


def _inputs(pattern: re.Pattern, n: int):
    for prefix in PREFIXES:
        for unit in UNITS:
            text = prefix + unit * (n // len(unit))
            yield (prefix, unit), (text.encode("latin-1") if isinstance(pattern.pattern, bytes) else text)




def audit() -> None:
    found = patterns()
    slow = []
    count = 0
    for pattern, how in found:
        print(json.dumps({"trying": repr(pattern.pattern)[:300], "how": how}), flush=True)
        small = dict(_inputs(pattern, N))
        for key, big in _inputs(pattern, 4 * N):
            count += 1
            try:
                with deadline(HUNG):
                    if _time(pattern, how, big) < FLOOR:
                        continue
            except TimeoutError:
                slow.append({"pattern": repr(pattern.pattern)[:300], "how": how, "prefix": key[0], "unit": key[1],
                             "4n": f"more than {HUNG} s"})
                print(json.dumps({"found": slow[-1]}), flush=True)
                break
            # measured again, best of three, three times: a loaded machine makes one pair noisy, while
            # super-linear time is slow every time
            for _ in range(3):
                t_big, t_small = _time(pattern, how, big, 3), _time(pattern, how, small[key], 3)
                if not (t_big > SLOW_RATIO * t_small and t_big > FLOOR):
                    break
            else:
                slow.append({"pattern": repr(pattern.pattern)[:300], "how": how, "prefix": key[0], "unit": key[1],
                             "n": round(t_small, 5), "4n": round(t_big, 5)})
                print(json.dumps({"found": slow[-1]}), flush=True)
                break  # one input is enough to name the pattern
    print(json.dumps({"slow": slow, "patterns": len(found), "inputs": count}), flush=True)


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    audit()
