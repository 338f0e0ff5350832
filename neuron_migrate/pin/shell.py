"""`pip install` commands in shell scripts, Dockerfile `RUN` lines and notebook cells.

A small shell lexer gives each word its span and unquoted value, so an edit changes one word and keeps
its quotes, the line continuations and everything else on the line. Recognised: `pip`, `pip3`, `pip3.12`,
`python -m pip`, `python3 -m pip`, `uv pip`, after `sudo`, `env` or variable assignments, with `!` / `%`
notebook prefixes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from neuron_migrate.engine.edits import MARKER_PREFIX
from neuron_migrate.findings import FileResult, Finding
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.document import TextDocument
from neuron_migrate.pin.matrix import matrix, python_fields
from neuron_migrate.policy import unused_suppressions
from neuron_migrate.settings import Settings
from neuron_migrate.engine.sources import Source

_SEPARATORS = ";&|()\n"
_NEEDS_QUOTES = re.compile(r"[\s*?\[\]<>|&;()$`\"'\\{}!~#]")
_PIP = re.compile(r"^[!%]?pip(3(\.\d+)?)?$")
_PYTHON = re.compile(r"^[!%]?(python(3(\.\d+)?)?|\$\{?PYTHON\}?)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECTION = re.compile(r"^(?:\d*|&)(?:>>?|<<?|>&|<&|>\|)(.*)$")
_PREFIXES = frozenset({"sudo", "env", "exec", "time", "nohup", "command"})
VALUE_OPTIONS = frozenset({
    "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target", "--platform",
    "--python-version", "--implementation", "--abi", "--root", "--prefix", "--src", "--upgrade-strategy",
    "-C", "--config-settings", "--global-option", "--no-binary", "--only-binary", "--progress-bar", "-i",
    "--index-url", "--extra-index-url", "-f", "--find-links", "--log", "--proxy", "--retries", "--timeout",
    "--exists-action", "--trusted-host", "--cert", "--client-cert", "--cache-dir", "--report", "--python",
    "--keyring-provider", "--use-feature", "--use-deprecated", "--group", "-p", "--index", "--default-index",
    "--index-strategy", "--torch-backend", "--extra", "--resolution", "--prerelease",
})


@dataclass(frozen=True)
class Word:
    start: int  # span of the whole word in the text
    end: int
    value: str  # after quote removal
    inner: tuple[int, int] | None = None  # span inside the quotes, when one pair of quotes holds the whole word
    quote: str = ""
    closed: bool = True  # False: a quote opened in it runs to the end of the text (a truncated or broken line)


def commands(text: str, start: int = 0, end: int | None = None) -> list[list[Word]]:
    """The simple commands of a shell text (words, no operators), with comments skipped."""
    end = len(text) if end is None else end
    out: list[list[Word]] = []
    current: list[Word] = []
    i = start
    while i < end:
        ch = text[i]
        if ch in " \t\r":
            i += 1
        elif ch == "\\" and text[i + 1:i + 2] in ("\n", "\r"):
            i += 3 if text[i + 1:i + 3] == "\r\n" else 2
        elif ch in _SEPARATORS:
            if current:
                out.append(current)
                current = []
            i += 1
        elif ch == "#":
            while i < end and text[i] not in "\r\n":
                i += 1
        else:
            word, i = _word(text, i, end)
            current.append(word)
    if current:
        out.append(current)
    return out


def _word(text: str, i: int, end: int) -> tuple[Word, int]:
    start = i
    value = []
    segments = 0
    quoted = None
    closed = True
    while i < end and text[i] not in " \t\r\n" + _SEPARATORS:
        ch = text[i]
        segments += 1
        if ch in "'\"":
            close = _closing(text, i, end)
            closed &= i < close < end
            inner = text[i + 1:close]
            value.append(inner if ch == "'" else re.sub(r"\\([\\\"$`])", r"\1", inner))
            quoted = (i + 1, close, ch)
            i = min(close + 1, end)
        elif ch == "\\" and text[i + 1:i + 2] in ("\n", "\r"):
            break  # a line continuation ends the word
        elif ch == "\\" and i + 1 < end:
            value.append(text[i + 1])
            i += 2
        elif ch == "$" and text[i + 1:i + 2] == "(":
            close = _matching_paren(text, i + 1, end)
            value.append(text[i:close + 1])
            i = close + 1
        else:
            value.append(ch)
            i += 1
            while i < end and text[i] not in " \t\r\n'\"\\$" + _SEPARATORS:
                value.append(text[i])
                i += 1
    if segments == 1 and quoted is not None:
        return Word(start, i, "".join(value), (quoted[0], quoted[1]), quoted[2], closed), i
    return Word(start, i, "".join(value), closed=closed), i


def _closing(text: str, i: int, end: int) -> int:
    """The index of the quote that closes the one at `i`; where none does, `end` (or, for a quote that is the
    last character, `i`)."""
    quote = text[i]
    j = i + 1
    while j < end:
        if text[j] == "\\" and quote == '"':
            j += 2
            continue
        if text[j] == quote:
            return j
        j += 1
    return end if end > i + 1 else i


def _matching_paren(text: str, i: int, end: int) -> int:
    depth = 0
    for j in range(i, end):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return end - 1


@dataclass
class PipInstall:
    """One `pip install` command: the words that are requirements, and the rest."""

    words: list[Word]
    requirements: list[Word]
    indexes: list[str]
    other_sources: bool  # `-r file`, `-e path`: the command installs more than its requirement words

    def texts(self) -> list[str]:
        return [w.value for w in self.requirements]


def _without_redirections(words: list[Word]) -> list[Word]:
    """The words of a command less its redirections (`2>/dev/null`, `> log.txt`, `2>&1`)."""
    out = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        m = _REDIRECTION.match(word.value) if not word.quote else None
        if m:
            skip = not m.group(1)
            continue
        out.append(word)
    return out


def pip_install(words: list[Word]) -> PipInstall | None:
    """The `pip install` command `words` make, or None; none where a quote in it is never closed: such a line
    (a truncated file, a broken edit) is not read, so nothing is added to it."""
    words = _without_redirections(words)
    if not words or not all(w.closed for w in words):
        return None
    values = [w.value for w in words]
    i = 0
    while i < len(words) and (values[i] in _PREFIXES or _ASSIGNMENT.match(values[i])
                              or (i and values[i - 1] in _PREFIXES and values[i].startswith("-"))):
        i += 1
    if i < len(words) and os.path.basename(values[i]) == "uv" and values[i + 1:i + 2] == ["pip"]:
        i += 2
    elif i < len(words) and _PIP.match(os.path.basename(values[i])):
        i += 1
    elif i < len(words) and _PYTHON.match(os.path.basename(values[i])):
        try:
            m = values.index("-m", i)
        except ValueError:
            return None
        if values[m + 1:m + 2] != ["pip"]:
            return None
        i = m + 2
    else:
        return None
    while i < len(words) and values[i].startswith("-"):
        i += 1  # pip's own options (`--no-cache-dir install` is rare; `-q install` is not)
    if values[i:i + 1] != ["install"]:
        return None
    requirements, indexes = [], []
    other_sources = False
    i += 1
    while i < len(words):
        value = values[i]
        if value.startswith("-"):
            option, _, attached = value.partition("=")
            takes_value = option in VALUE_OPTIONS and not attached
            argument = values[i + 1] if takes_value and i + 1 < len(words) else attached
            if option in ("-i", "--index-url", "--extra-index-url", "--index", "--default-index"):
                indexes.append(argument)
            other_sources |= option in ("-r", "--requirement", "-e", "--editable")
            i += 2 if takes_value else 1
            continue
        requirements.append(words[i])
        i += 1
    return PipInstall(words, requirements, indexes, other_sources)


# -- edits -------------------------------------------------------------------------------------------------

def _quoted(value: str, quote: str) -> str:
    if not _NEEDS_QUOTES.search(value):
        return value
    if quote == "'" and "'" not in value:
        return f"'{value}'"
    return '"' + re.sub(r"([\\\"$`])", r"\\\1", value) + '"'


def _preferred_quote(command: PipInstall) -> str:
    return next((w.quote for w in command.words if w.quote), '"')


def _own_line(doc: TextDocument, word: Word) -> bool:
    """Whether the word stands alone on its physical line (a `\\`-continued argument list)."""
    before = doc.text[doc.line_start(word.start):word.start]
    after = doc.text[word.end:doc.line_end(word.start)].rstrip("\r\n").strip()
    return not before.strip() and after in ("\\", "")


def _replace_word(doc: TextDocument, word: Word, new: str, quote: str) -> None:
    if word.inner is not None and (word.quote == "'" and "'" not in new or word.quote == '"'
                                   and not re.search(r"[\\\"$`]", new)):
        doc.replace(word.inner[0], word.inner[1], new)
    else:
        doc.replace(word.start, word.end, _quoted(new, word.quote or quote))


def _remove_words(doc: TextDocument, command: PipInstall, removed: list[Word]) -> None:
    """Remove words of a command; trailing ones go with the spacing (and continuations) before them."""
    trailing = []
    for word in reversed(command.words):
        if word not in removed:
            break
        trailing.insert(0, word)
    for word in removed:
        if word not in trailing:
            _remove_word(doc, word)
    if trailing:
        before = command.words[command.words.index(trailing[0]) - 1]
        doc.replace(before.end, trailing[-1].end, "")


def _remove_word(doc: TextDocument, word: Word) -> None:
    if _own_line(doc, word):
        doc.replace(doc.line_start(word.start), doc.line_end(word.start), "")
        return
    start = word.start
    while start > 0 and doc.text[start - 1] in " \t":
        start -= 1
    if doc.text[start - 1:start] in ("\n", "\r", ""):
        end = word.end
        while end < len(doc.text) and doc.text[end] in " \t":
            end += 1
        doc.replace(word.start, end, "")
    else:
        doc.replace(start, word.end, "")


def _insert_after(doc: TextDocument, word: Word, texts: list[str]) -> None:
    """Add shell words (already quoted) after `word`: on lines of their own when the arguments have theirs."""
    if not texts:
        return
    if _own_line(doc, word):
        indent = re.match(r"[ \t]*", doc.text[doc.line_start(word.start):]).group()
        line_end = doc.line_end(word.start)
        rest = doc.text[word.end:line_end]
        continued = rest.rstrip("\r\n").strip() == "\\"
        newline = rest[len(rest.rstrip("\r\n")):] or doc.newline
        lines = [indent + t for t in texts]
        if continued:
            doc.replace(line_end, line_end, "".join(line + " \\" + newline for line in lines))
        else:
            doc.replace(word.end, word.end, " \\" + newline + (" \\" + newline).join(lines))
        return
    doc.replace(word.end, word.end, "".join(" " + t for t in texts))


def logical_line_start(doc: TextDocument, offset: int) -> int:
    """The first physical line of the backslash-continued line holding `offset` (where a marker may go)."""
    start = doc.line_start(offset)
    while start > 0 and doc.text[doc.line_start(start - 1):start].rstrip("\r\n").rstrip(" \t").endswith("\\"):
        start = doc.line_start(start - 1)
    return start


@dataclass(frozen=True)
class Variable:
    """A variable defined once in the file (`NEURONX_VERSION=2.9.*`, Dockerfile `ARG`): its value and where it is."""

    name: str
    value: str
    start: int
    end: int


_MAJOR_MINOR = re.compile(r"(?<!\d)\d+\.\d+")  # the version a specifier names, as prose writes it (`2.21.x`)
_VERSION_REFERENCE = re.compile(r"(?P<head>[^$]*==)\$(?:\{(?P<braced>[A-Za-z_]\w*)\}|(?P<plain>[A-Za-z_]\w*))")


def defined_once(definitions: list[Variable]) -> dict[str, Variable]:
    names = [d.name for d in definitions]
    return {d.name: d for d in definitions if names.count(d.name) == 1}


def assignment(doc: TextDocument, word: Word) -> Variable | None:
    """The variable a `NAME=value` word defines (quotes around the value are not part of it)."""
    m = _ASSIGNMENT.match(word.value)
    if not m:
        return None
    start, end = word.start + m.end(), word.end
    raw = doc.text[start:end]
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        start, end = start + 1, end - 1
    return Variable(word.value[:m.end() - 1], doc.text[start:end], start, end)


def shell_variables(doc: TextDocument) -> dict[str, Variable]:
    """Plain assignments (`V=1`, `export V="1"`) of a shell script."""
    found = []
    for words in commands(doc.text):
        names = words[1:] if words[0].value in ("export", "readonly") else words
        variables = [assignment(doc, w) for w in names]
        if variables and all(variables):
            found += variables
    return defined_once(found)


def pin_commands(doc: TextDocument, spans: list[tuple[int, int]], present: set[str] | frozenset[str] = frozenset(),
                 variables: dict[str, Variable] | None = None) -> set[str]:
    """Pin every `pip install` in the given spans of the document; returns the packages they install.

    A version taken from a variable defined once in the file (`torch-neuronx==${NEURONX_VERSION}`) is pinned
    where the variable gets its value.
    """
    found = [c for start, end in spans for words in commands(doc.text, start, end)
             if (c := pip_install(words)) is not None]
    names = set(present) | ({planning.TPU_BUILD} if planning.drives_tpu(doc.text) else set())
    for command in found:
        names |= planning.names_of(command.texts())
        if any(planning.TPU_LINKS.search(w.value) for w in command.words):  # `-f <libtpu index>`
            names.add(planning.TPU_BUILD)
    if not planning.in_scope(names):
        return names
    _check_environments(doc, spans, found)
    has_index = matrix().index_url in doc.text or any(_is_index(u) for c in found for u in c.indexes)
    # the text is one environment: a library built on torch_xla one command installs (a Dockerfile's later
    # `pip install neuronx-distributed`) holds the other commands' lists as its own list is held
    libraries = planning.xla_libraries()
    shown = os.path.basename(doc.path)
    own = [[f"`{w.value}` ({shown})" for w in c.requirements
            if (req := planning.parse(w.value)) is not None and req.name in libraries] for c in found]
    for n, command in enumerate(found):
        line = logical_line_start(doc, command.words[0].start)
        beside = tuple(e for m, entries in enumerate(own) if m != n for e in entries)
        result = _pin_command(doc, command, names, line, variables or {}, beside)
        names |= result
        if not has_index and result & set(matrix().required_packages):
            _add_index(doc, command, line)
    return names


_VERSIONED_PYTHON = re.compile(r"^python(\d\.\d{1,2})$")
_PYTHON_VALUE = re.compile(r"^(?:python)?(\d\.\d{1,2})(?:\.\d+)?$")
_CONDA = frozenset({"conda", "mamba", "micromamba"})


@dataclass(frozen=True)
class Environment:
    """A virtual environment a command makes: where (a folder, or a conda name), with which Python."""

    word: Word  # the word naming its Python
    version: str
    place: str
    text: str  # the command, shortened


def skip_prefixes(values: list[str]) -> int:
    """The index of a command's own name, after `sudo -E`, `env`, `time` and variable assignments."""
    i = 0
    while i < len(values) and (values[i] in _PREFIXES or _ASSIGNMENT.match(values[i])
                               or (i and values[i - 1] in _PREFIXES and values[i].startswith("-"))):
        i += 1
    return i


def _environment(words: list[Word]) -> Environment | None:
    """The environment a command makes with a named Python: `python3.8 -m venv DIR`, `virtualenv -p python3.8 DIR`
    (or `--python=3.8`), `uv venv --python 3.8 [DIR]`, `conda create -n NAME python=3.8`."""
    values = [w.value for w in words]
    i = skip_prefixes(values)
    if i >= len(words):
        return None
    head = os.path.basename(values[i])
    if (m := _VERSIONED_PYTHON.match(head)) and values[i + 1:i + 3] in (["-m", "venv"], ["-m", "virtualenv"]):
        places = [v for v in values[i + 3:] if not v.startswith("-")]
        return Environment(words[i], m.group(1), places[-1], _shortened(values)) if places else None
    venv = head == "virtualenv" or (head == "uv" and values[i + 1:i + 2] == ["venv"])
    conda = head in _CONDA and "create" in values[i + 1:i + 3]
    named, place, j = None, None, i + (2 if head == "uv" or conda else 1)
    while j < len(words):
        option, _, attached = values[j].partition("=")
        value = attached or (values[j + 1] if j + 1 < len(words) else "")
        if venv and option in ("-p", "--python"):
            named = (words[j], value)
            j += 1 if attached else 2
            continue
        if conda and option in ("-n", "--name", "-p", "--prefix"):
            place = value
            j += 1 if attached else 2
            continue
        if conda and option == "python" and attached:
            named = (words[j], attached.lstrip("="))
        elif venv and not values[j].startswith("-"):
            place = values[j]
        j += 1
    if named is None or not (m := _PYTHON_VALUE.match(named[1])):
        return None
    return Environment(named[0], m.group(1), place or (".venv" if head == "uv" else ""), _shortened(values))


def _shortened(values: list[str]) -> str:
    return " ".join(values[:5]) + (" ..." if len(values) > 5 else "")


def _activated(words: list[Word]) -> str | None:
    """The environment a command activates: `source DIR/bin/activate`, `. DIR/bin/activate`, `conda activate NAME`."""
    values = [w.value for w in words]
    i = skip_prefixes(values)
    if values[i:i + 1] in (["source"], ["."]) and i + 1 < len(values) and values[i + 1].endswith("/bin/activate"):
        return values[i + 1][:-len("/bin/activate")]
    if i + 2 < len(values) and (os.path.basename(values[i]) in _CONDA or values[i] == "source") \
            and values[i + 1] == "activate":
        return values[i + 2]
    return None


def _installs_into(command: PipInstall) -> str | None:
    """The environment a `pip install` names by its path (`/opt/venv/bin/pip`, `DIR/bin/python -m pip`)."""
    for word in command.words:
        head, _, tail = word.value.rpartition("/bin/")
        if head and (_PIP.match(tail) or _PYTHON.match(tail)):
            return head
    return None


def _check_environments(doc: TextDocument, spans: list[tuple[int, int]], found: list[PipInstall]) -> None:
    """NM618 where the text makes the environment it installs a Neuron package into with a Python TorchNeuron has
    no wheels for (an install reaches the environment through its path or an activation before it)."""
    mx = matrix()
    made: dict[str, Environment] = {}
    active: str | None = None
    flagged: set[str] = set()
    installs = {c.words[0].start for c in found if planning.in_scope(planning.names_of(c.texts()))}
    for start, end in spans:
        for words in commands(doc.text, start, end):
            if (environment := _environment(words)) is not None:
                made[environment.place.rstrip("/")] = environment
                continue
            if (place := _activated(words)) is not None:
                active = place.rstrip("/")
                continue
            command = pip_install(words)
            if command is None or command.words[0].start not in installs:
                continue
            environment = made.get((_installs_into(command) or active or "").rstrip("/"))
            if environment is None or environment.place in flagged or mx.python_supported(environment.version):
                continue
            flagged.add(environment.place)
            word = environment.word
            doc.report("NM618", word.start, logical_line_start(doc, word.start), version=environment.version,
                       command=environment.text, **python_fields())


def _is_index(url: str) -> bool:
    return url.strip("'\"").rstrip("/") == matrix().index_url


def _resolve(word: Word, variables: dict[str, Variable]) -> Variable | None:
    m = _VERSION_REFERENCE.fullmatch(word.value)
    return variables.get(m.group("braced") or m.group("plain")) if m else None


def _pin_command(doc: TextDocument, command: PipInstall, present: set[str], line: int,
                 variables: dict[str, Variable], beside: tuple[str, ...] = ()) -> set[str]:
    resolved = {i: v for i, w in enumerate(command.requirements) if (v := _resolve(w, variables))}
    texts: list[str | None] = [w.value.partition("$")[0] + resolved[i].value if i in resolved else w.value
                               for i, w in enumerate(command.requirements)]
    result = planning.plan(texts, doc.family, present, may_empty=command.other_sources,
                           instance=doc.settings.instance,
                           unsafe_fixes=doc.settings.unsafe_fixes,
                           beside=planning.environment(doc.settings) + beside)
    quote = _preferred_quote(command)

    def report(index: int, code: str, fields: dict) -> bool:
        if index in resolved and code != "NM603":  # NM603's requirement is the one it adds
            variable, written = resolved[index], command.requirements[index].value
            fields = {**fields, "requirement": f"{written}` with `{variable.name}={variable.value}"
                      if code == "NM602" else written}
        word = command.requirements[index]
        return doc.report(code, word.start, line, end=word.end, **fields)

    outcomes = planning.approve(result, texts, report)
    extras = {index: list(outcome.extra) for index, outcome in outcomes.items()}
    _extras_into_removed_tail(command, outcomes, extras)
    removed = []
    for index, outcome in outcomes.items():
        word = command.requirements[index]
        extra = extras[index]
        if outcome.remove and not extra:
            removed.append(word)
            continue
        if outcome.remove:
            doc.replace(word.start, word.end, _quoted(extra.pop(0), quote))
        elif outcome.replacement is not None and index in resolved:
            variable = resolved[index]
            doc.replace(variable.start, variable.end, outcome.replacement.partition("==")[2])
        elif outcome.replacement is not None:
            _replace_word(doc, word, outcome.replacement, quote)
        _insert_after(doc, word, [_quoted(v, quote) for v in extra])
    _remove_words(doc, command, removed)
    _drop_stale_comment_above(doc, line, [texts[i] for i, o in outcomes.items()
                                          if (o.remove or o.replacement is not None) and texts[i] is not None])
    installed = planning.names_of([t for t in texts if t is not None]) - matrix().legacy_packages
    return installed | result.added


def _drop_stale_comment_above(doc: TextDocument, line: int, changed: list[str]) -> None:
    """The comment line right above a command whose pins changed, when it names an old version of them
    (`# Upgrade to neuronx-cc 2.21.x` above `pip install --upgrade neuronx-cc==2.21.*`): it goes with the old
    version. A marker, or a comment that names no changed version, stays."""
    versions = {m.group(0) for text in changed if (req := planning.parse(text)) is not None
                for m in [_MAJOR_MINOR.search(req.spec)] if m is not None}
    if not versions or line == 0:
        return
    start = doc.line_start(line - 1)
    comment = doc.text[start:line].strip()
    if not comment.startswith("#") or comment.startswith(MARKER_PREFIX):
        return
    if any(re.search(rf"(?<![\d.]){re.escape(v)}(?!\d)", comment) for v in versions):
        doc.replace(start, line, "")


def _extras_into_removed_tail(command: PipInstall, outcomes: dict, extras: dict[int, list[str]]) -> None:
    """Where the command's last words go (`torch-xla==2.9.0` at the end) and the word before them gains packages,
    those packages take the place of the first removed word: added on their own lines after the word before,
    they would fall inside the span that removes the tail with its continuations."""
    position = {id(word): i for i, word in enumerate(command.requirements)}
    tail: list[int] = []
    for word in reversed(command.words):
        index = position.get(id(word))
        outcome = outcomes.get(index) if index is not None else None
        if outcome is None or not outcome.remove or extras[index]:
            break
        tail.insert(0, index)
    if not tail or len(tail) == len(command.words):
        return
    before = position.get(id(command.words[command.words.index(command.requirements[tail[0]]) - 1]))
    if before is None or before not in outcomes or not extras[before] or outcomes[before].remove:
        return
    extras[tail[0]], extras[before] = extras[before], []


def _add_index(doc: TextDocument, command: PipInstall, line: int) -> None:
    url = matrix().index_url
    what = " ".join(w.value for w in command.words[:3]) + " ..."
    if doc.report("NM604", command.words[0].start, line, end=command.words[-1].end, what=f"`{what}`",
                  how="`--extra-index-url`", url=url):
        _insert_after(doc, command.words[-1], [f"--extra-index-url {url}"])


def process_shell(path: str, data: bytes, settings: Settings, rewrite: bool) -> FileResult:
    doc = TextDocument.read(path, data, settings, rewrite)
    if "pip" in doc.text:
        pin_commands(doc, [(0, len(doc.text))], variables=shell_variables(doc))
    return doc.result(data)


@dataclass
class PinnedCommand:
    text: str  # the command, pinned (the input when nothing changes or rewrite is False)
    findings: list[Finding]  # positions are relative to the command text (line 1 is its first line)
    applied: dict[str, int]
    installs: set[str]  # packages the pinned command installs


def pin_install_command(text: str, settings: Settings, *, path: str = "<command>", rewrite: bool = True,
                        present: frozenset[str] = frozenset()) -> PinnedCommand:
    """Pin one install command line (`!pip install ...`, `%pip install ...`, `pip install ...`).

    `present`: packages installed elsewhere (earlier notebook cells), so missing packages are added once.
    """
    doc = TextDocument(path, Source(text, "utf-8", False), settings, rewrite)
    installs = pin_commands(doc, [(0, len(doc.text))], present=set(present))
    new_text = doc.render() if rewrite else text
    findings = doc.findings if rewrite else doc.findings + unused_suppressions(
        doc.policy, doc.suppressions, doc.suppressions.used if doc.suppressions else set())
    return PinnedCommand(new_text, sorted(findings, key=lambda f: f.sort_key()), dict(doc.applied), installs)
