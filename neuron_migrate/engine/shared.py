"""The module of helpers a run writes beside the scripts of one folder, in place of a copy in each script.

torch_xla's example and test scripts share `torch_xla.test.test_utils` (the progress line, the TensorBoard writer)
and `xm.RateTracker`; NM244 gives a file that uses them helpers of its own (rules/misc.py). Where two or more
scripts of one folder would each get those copies (the project model decides: `FileProject.shared_helpers`), they
import them instead from one module of that folder, `training_progress.py`, which this run writes: the helpers
the rewritten scripts import, in the indentation and quotes of the first of them. A module of that name that an
earlier run wrote keeps its text; the helpers it lacks are added at its end. One of another origin is never
touched (the project model keeps each script on its own copies then).

Only `rewrite` writes it (in place or into `--output-dir`; `--diff` shows it as a new file); `check` reports the
same findings and writes nothing.
"""

from __future__ import annotations

import io
import os
import re
import tokenize

HELPERS_MODULE = "training_progress"
# the first line of the module: an existing file that starts so is one this tool wrote
HELPERS_HEADER = '"""Training progress helpers shared by the scripts of this folder'
HEADER_REST = (", in place of\ntorch_xla's `torch_xla.test.test_utils` and `xm.RateTracker` (written by\n"
               'neuron-migrate)."""')
# the docstring of NM244's RateTracker class (rules/misc.py), which tells it from a project's class of that name
RATE_TRACKER_DOC = ("Items a second: since the last rate(), smoothed with the one before, and since the start "
                    "(xm.RateTracker).")
# the helpers the module can hold, in the order it defines them
NAMES = ("RateTracker", "print_training_update", "get_summary_writer", "write_to_summary", "close_summary_writer")
# a use of a helper NM244 defines in the file that uses it (xm.RateTracker(), test_utils.get_summary_writer(...))
HELPER_USE = re.compile(r"(?<![\w.])\w+\.(?:RateTracker|print_training_update|get_summary_writer|write_to_summary"
                        r"|close_summary_writer)\(")
HELPERS_IMPORT = re.compile(rf"^from[ \t]+{HELPERS_MODULE}[ \t]+import\b", re.M)


def uses_helpers(text: str) -> bool:
    """HELPER_USE found in `text`, its names looked for first (a plain substring search, in C)."""
    return any(f"{name}(" in text for name in NAMES) and HELPER_USE.search(text) is not None
_IMPORT = re.compile(rf"^from[ \t]+{HELPERS_MODULE}[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n#;]*))", re.M)
_DEFINED = re.compile(r"^(?:class|def)[ \t]+(\w+)", re.M)


def _importers(results: list, facts: dict) -> dict[str, dict[str, list[str]]]:
    """module path -> {importing file's path: the helper names it imports from there}, of the changed results."""
    out: dict[str, dict[str, list[str]]] = {}
    for result in results:
        project = facts.get(result.path)
        if project is None or project.shared_helpers is None or not result.changed or result.error:
            continue
        text = result.new_bytes.decode("utf-8", "replace")
        names = [n.strip() for m in _IMPORT.finditer(text) for n in (m.group(1) or m.group(2)).split(",")
                 if n.strip() in NAMES]
        if names:
            path = os.path.join(os.path.dirname(result.path), f"{project.shared_helpers}.py")
            out.setdefault(path, {})[result.path] = names
    return out


def lonely(results: list, facts: dict) -> list[str]:
    """The files that alone would import a module not written yet (the other scripts of the folder got their
    helpers inline: a progress line, a summary write): they keep copies of their own."""
    return [file for path, files in _importers(results, facts).items() if len(files) == 1
            and not os.path.lexists(path) for file in files]


def modules(results: list, facts: dict) -> list:
    """The FileResults of the helper modules the changed `results` import from (new files, or helpers added to
    one an earlier run wrote); `facts`: path -> FileProject of every processed file."""
    from neuron_migrate.engine.sources import SourceError, read_bytes
    from neuron_migrate.findings import FileResult

    wanted: dict[str, dict[str, None]] = {}
    styles: dict[str, str] = {}
    rewritten = {r.path: r.new_bytes for r in results if r.changed}
    for path, files in _importers(results, facts).items():
        for file, names in files.items():
            wanted.setdefault(path, {}).update(dict.fromkeys(names))
            styles.setdefault(path, rewritten[file].decode("utf-8", "replace"))
    out = []
    for path, names in sorted(wanted.items()):
        try:
            old = read_bytes(path)
        except SourceError:
            old = None
        if old is not None and not old.startswith(HELPERS_HEADER.encode()):
            continue  # not this tool's (it appeared since the project model looked): the scripts' imports say so
        existing = old.decode("utf-8", "replace") if old is not None else ""
        newline = "\r\n" if "\r\n" in (existing or styles[path]) else "\n"  # the file's, else the first script's
        existing = existing.replace("\r\n", "\n")
        defined = set(_DEFINED.findall(existing))
        missing = [n for n in NAMES if n in names and n not in defined]
        if not missing:
            continue
        style = existing or styles[path]
        quote = _quote(existing) or _quote(styles[path]) or '"'  # an existing module may hold no string yet
        body = render(missing, _indent(style), quote, imports=False)
        timed = "time." in body or "time." in existing
        if not existing:
            text = f"{HELPERS_HEADER}{HEADER_REST}\n\n" + ("import time\n\n\n" if timed else "\n") + body
        else:
            if timed and not re.search(r"(?m)^import[ \t]+time[ \t]*$", existing):
                existing = re.sub(r'"""\n+', '"""\n\nimport time\n\n\n', existing, count=1)  # after the docstring
            text = existing.rstrip("\n") + "\n\n\n" + body
        out.append(FileResult(path, old_bytes=old if old is not None else b"",
                              new_bytes=text.replace("\n", newline).encode(), created=old is None))
    return out


def written_first(results: list) -> list:
    """The changed results in the order to write them: a created module before the scripts that import it."""
    return sorted(results, key=lambda r: not r.created)


def without_module(result, failed: set[str]) -> bool:
    """Whether `result` imports from the module of a folder in `failed` (where it could not be written): the file
    is then not written either."""
    return not result.created and os.path.dirname(result.path) in failed and HELPERS_IMPORT.search(
        result.new_bytes.decode("utf-8", "replace")) is not None


NOT_WRITTEN = "not written: the module of shared helpers it would import could not be written"


def render(names: list[str], indent: str, quote: str, imports: bool = True) -> str:
    """The definitions of the helpers `names`, in order, with the imports they need (`imports`)."""
    from neuron_migrate.engine.context import requote
    from neuron_migrate.rules.misc import HELPER_NAMES, RATE_TRACKER_CLASS, SUMMARY_HELPERS

    templates = {"RateTracker": RATE_TRACKER_CLASS}
    templates.update({HELPER_NAMES[h]: t for h, t, _ in SUMMARY_HELPERS.values()})
    fields = {"name": "RateTracker", "clock": "time", **HELPER_NAMES}
    body = "\n\n\n".join(requote(templates[n].format(**fields), quote) for n in names if n in templates)
    if indent != "    ":
        body = _reindent(body, indent)
    head = "import time\n\n\n" if imports and "time." in body else ""
    return f"{head}{body}\n"


def _reindent(code: str, unit: str) -> str:
    """`code`, indented by four spaces a level, indented by `unit` a level; a line that continues a bracket keeps
    its place relative to the line it continues (as LibCST renders a template into a file)."""
    continued: set[int] = set()
    seen, depth = 0, 0
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.start[0] > seen:
            seen = tok.start[0]
            if depth and tok.type not in (tokenize.NL, tokenize.NEWLINE):
                continued.add(seen)
        if tok.type == tokenize.OP:
            depth += (tok.string in "([{") - (tok.string in ")]}")
    out, start = [], ("", "")
    for row, line in enumerate(code.splitlines(keepends=True), 1):
        lead = line[:len(line) - len(line.lstrip(" "))]
        if row in continued and lead.startswith(start[0]):
            out.append(start[1] + line[len(start[0]):])
        else:
            start = lead, unit * (len(lead) // 4)
            out.append(start[1] + line[len(lead):])
    return "".join(out)


def _indent(text: str) -> str:
    """The file's indentation unit (its first indented block's), four spaces when it has none."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.INDENT:
                return tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return "    "


def _quote(text: str) -> str | None:
    """The quote most of the file's one-line strings use; None when it has none."""
    counts = {"'": 0, '"': 0}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and tok.string[:1] in counts and not tok.string.startswith(("'''", '"""')):
                counts[tok.string[0]] += 1
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    if not any(counts.values()):
        return None
    return "'" if counts["'"] > counts['"'] else '"'
