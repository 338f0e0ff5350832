"""What the scope table and the code paths cost on Python's tree and on LibCST's, over the same files, in one run.

    python -m bench.trees ../shared/ecosystem        # every .py file of the folder that both parsers read

The port of the rules to Python's tree (issue 33) stands on two layers built there: the names (engine/treenames.py)
and the code paths (engine/treepaths.py). Each row is the best of three passes over every file, in this process,
one file at a time: Python's parse (the floor: the engine parses every file with it anyway), then the parse with the
two layers on Python's tree; LibCST's parse, then the parse with its scope analysis (engine/names.py) and its paths
(engine/paths.py, through a FileContext as the rules reach them). The ratios at the end compare the two trees, the
parse included and the layers alone.
"""

from __future__ import annotations

import argparse
import ast
import time
from pathlib import Path

import libcst as cst

from neuron_migrate.engine.context import FileContext
from neuron_migrate.engine.facts import MAIN_BLOCK
from neuron_migrate.engine.names import Analysis
from neuron_migrate.engine.sources import SourceError, decode
from neuron_migrate.engine.treenames import TreeNames
from neuron_migrate.engine.treepaths import TreePaths
from neuron_migrate.settings import Settings


def readable(folder: Path) -> list[tuple[str, str]]:
    """(path, text) of every .py file both parsers read."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        try:
            text = decode(path.read_bytes()).text
            ast.parse(text)
            cst.parse_module(text)
        except (SourceError, SyntaxError, ValueError, cst.ParserSyntaxError, RecursionError):
            continue
        out.append((str(path), text))
    return out


def _best(run, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(files: list[tuple[str, str]]) -> dict[str, float]:
    """Seconds of each pass over the files, one file at a time as the engine takes them (nothing kept between
    files): each parser alone, and each parser with the two layers built on its tree."""

    def python_parse():
        for _, text in files:
            ast.parse(text)

    def python_layers():
        for _, text in files:
            TreePaths(TreeNames(ast.parse(text), text), MAIN_BLOCK.search(text) is not None)

    def libcst_parse():
        for _, text in files:
            cst.parse_module(text)

    def libcst_layers():
        for path, text in files:
            module = cst.parse_module(text)
            FileContext(path, decode(text.encode("utf-8")), module, Analysis(module), Settings()).facts.paths

    return {"python_parse": _best(python_parse), "python": _best(python_layers),
            "libcst_parse": _best(libcst_parse), "libcst": _best(libcst_layers)}


def render(figures: dict[str, float], count: int, folder: Path) -> str:
    rows = [
        ("Python's parse (the floor)", figures["python_parse"]),
        ("  with the names and code paths on its tree", figures["python"]),
        ("LibCST's parse", figures["libcst_parse"]),
        ("  with the names and code paths on its tree", figures["libcst"]),
    ]
    out = [f"{count} files of {folder}, one at a time (best of 3)"]
    out += [f"  {label:<48} {seconds:6.2f} s" for label, seconds in rows]
    python_layers = figures["python"] - figures["python_parse"]
    libcst_layers = figures["libcst"] - figures["libcst_parse"]
    whole = figures["libcst"] / figures["python"]
    out.append(f"  LibCST's / Python's, parse included: {whole:.1f}x; the layers alone: "
               f"{libcst_layers:.2f} s / {python_layers:.2f} s = {libcst_layers / python_layers:.1f}x")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m bench.trees", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the code to read")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        raise SystemExit(f"error: no folder at {args.folder}")
    files = readable(args.folder)
    if not files:
        raise SystemExit(f"error: no Python file both parsers read under {args.folder}")
    figures = measure(files)
    print(render(figures, len(files), args.folder))
    return figures


if __name__ == "__main__":
    main()
