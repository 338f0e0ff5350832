"""Parsing: LibCST's parser, adjusted for speed where the result cannot differ (inside sessions, see door.py).

- Parsing without the per-node checks. Every LibCST node checks itself when it is built (`CSTNode.__post_init__`
  calls `_validate`): right for trees that code assembles, wasted on the nodes LibCST's own parser builds from
  source that parsed, which are valid by construction (LibCST's source says so at that method: "It might make
  more sense to move validation work into the visitor, which would allow us to avoid validating the tree when
  parsing a file"). The checks are about a seventh of a parse. Inside a session `__post_init__` skips them while
  this thread runs LibCST's parser for `parse_module`, and only then: nodes built after the parse, or by any
  other thread, are still checked.
- Identity hashing in C instead of LibCST's Python method, inside sessions.
- Node constructors that store their fields without `object.__setattr__`, inside sessions of a process that
  parses a project (see `_make_constructors`).
- The replacement texts rules write, parsed once per process (see `expression`).
"""

from __future__ import annotations

import threading
import warnings

import libcst as cst
from libcst._nodes.base import CSTNode

from neuron_migrate.engine.deferred import written
from neuron_migrate.syntax import door


# -- the node checks ---------------------------------------------------------------------------------------
_CHECKED = CSTNode.__dict__["__post_init__"]


class _Parsing(threading.local):
    on = False  # this thread is inside `parse_module`'s call of LibCST's parser


_parsing = _Parsing()


def _checked_unless_parsing(self: CSTNode) -> None:
    if not _parsing.on:
        _CHECKED(self)


door.register(CSTNode, "__post_init__", _checked_unless_parsing)


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module(text)`, minus the node checks where that is safe; raises `libcst.ParserSyntaxError`
    the same way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not door.patched():
            return cst.parse_module(text)
        if not _Constructors.made:
            _Constructors.parsed += len(text)
            if _Constructors.parsed > _CONSTRUCTORS_AFTER:
                _make_constructors()
        _parsing.on = True
        try:
            return cst.parse_module(text)
        finally:
            _parsing.on = False


# -- identity hashing --------------------------------------------------------------------------------------
def _register_identity_hash_in_c() -> None:
    """LibCST nodes hash by identity through a Python method (`return id(self)`), copied into every node class;
    every dict and set keyed by nodes (parents, edits, the analysis) pays a Python call per lookup. `object`'s
    own hash is an identity hash too, in C (another number: a dict of nodes made outside a session does not find
    them inside one)."""
    python_hash = CSTNode.__dict__["__hash__"]
    classes, seen = [CSTNode], set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if cls.__dict__.get("__hash__") is python_hash:
            door.register(cls, "__hash__", object.__hash__)
        classes.extend(cls.__subclasses__())


_register_identity_hash_in_c()


# -- node constructors ---------------------------------------------------------------------------------------
# A parse builds one Python object per node through the `__init__` that `dataclass(frozen=True)` writes: each field
# goes through `object.__setattr__(self, name, value)`, which looks the name up on the class. Inside sessions each
# node class can take a constructor that stores its fields without that lookup, through the slot's own descriptor
# (LibCST's nodes have slots) or into the instance's dict: the same parameters, defaults and default factories,
# then `__post_init__` as before (skipped for the parser's own nodes, above). That is 5-10% of a parse; writing
# the constructors takes about 2 ms, what they save on some 30k characters, so a process writes them once it has
# parsed twice that (a run over a project; a single small file does not pay for them).
_CONSTRUCTORS_AFTER = 60_000  # characters parsed in this process before the constructors are written
# The classes of about 95% of the nodes a parse of user code builds (whitespace alone is 40%), most built first:
# writing constructors for every class would cost more than a large file's parse saves.
_MOST_BUILT = ("SimpleWhitespace", "Name", "Newline", "TrailingWhitespace", "Arg", "Dot", "Attribute", "EmptyLine",
               "SimpleStatementLine", "Comma", "Call", "AssignTarget", "Assign", "ParenthesizedWhitespace",
               "SimpleString", "Comment", "AssignEqual", "Integer", "IndentedBlock", "Element", "Expr",
               "LeftSquareBracket", "RightSquareBracket", "ImportAlias", "Param", "SubscriptElement", "Subscript",
               "Index", "If", "ComparisonTarget", "Comparison", "BinaryOperation")
_NOT_GIVEN = object()  # stands for a field whose default comes from a factory (as dataclasses does)


class _Constructors:
    parsed = 0  # characters parsed in this process so far
    made = False


def _constructor_source(cls: type, i: int, namespace: dict[str, object]) -> str | None:
    """The source of a faster `__init__` for one LibCST node class (named `_init{i}`, its defaults and setters put
    in `namespace`), or None where its fields are not plain (it keeps its own): every field in `__init__`, none
    keyword-only, each stored in a slot or the instance's dict."""
    import dataclasses
    import keyword

    stock = written(cls, "__init__")
    if stock is None or not dataclasses.is_dataclass(cls) or getattr(stock, "__code__", None) is None \
            or stock.__code__.co_filename != "<string>":  # not the constructor dataclasses wrote
        return None
    fields = dataclasses.fields(cls)
    code = stock.__code__
    if list(code.co_varnames[1:code.co_argcount]) != [f.name for f in fields] or code.co_kwonlyargcount \
            or any(not f.init or not f.name.isidentifier() or keyword.iskeyword(f.name) or f.name.startswith("_")
                   for f in fields):
        return None
    parameters, body = [], []
    for j, f in enumerate(fields):
        held = next((base.__dict__[f.name] for base in cls.__mro__ if f.name in base.__dict__), None)
        name = f"_{i}_{j}"
        if f.default is not dataclasses.MISSING:
            namespace[f"_default{name}"] = f.default
            parameters.append(f"{f.name}=_default{name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory{name}"] = f.default_factory
            parameters.append(f"{f.name}=_NOT_GIVEN")
            body.append(f"    if {f.name} is _NOT_GIVEN: {f.name} = _factory{name}()")
        else:
            parameters.append(f.name)
        if type(held).__name__ == "member_descriptor":  # a slot
            namespace[f"_set{name}"] = held.__set__
            body.append(f"    _set{name}(self, {f.name})")
        elif hasattr(type(held), "__set__") or not cls.__dictoffset__:
            return None  # a property or other data descriptor of that name: only object.__setattr__ honours it
        else:
            body.append(f"    self.__dict__[{f.name!r}] = {f.name}")
    body.append("    self.__post_init__()")
    return f"def _init{i}(self, {', '.join(parameters)}):\n" + "\n".join(body) + "\n"


def _make_constructors() -> None:
    """Write the constructors and have the open session and later ones use them (door.register_now); once."""
    if _Constructors.made:
        return
    _Constructors.made = True
    namespace: dict[str, object] = {"_NOT_GIVEN": _NOT_GIVEN}
    made = []
    for i, name in enumerate(_MOST_BUILT):
        cls = getattr(cst, name, None)
        if not isinstance(cls, type) or not issubclass(cls, CSTNode) \
                or any("__post_init__" in base.__dict__ for base in cls.__mro__ if base is not CSTNode):
            continue  # not a node class of this release, or one that checks itself its own way
        source = _constructor_source(cls, i, namespace)
        if source is not None:
            made.append((i, cls, source))
    exec("".join(source for _, _, source in made), namespace)
    for i, cls, _ in made:
        function = namespace[f"_init{i}"]
        function.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
        door.register_now(cls, "__init__", function)


# -- expressions the rules write -----------------------------------------------------------------------------
# Rules build their replacements from text, and the same few texts come back in file after file
# (`int(os.environ.get("LOCAL_RANK", "0"))`, `"neuron"`): LibCST's parser costs about 0.1 ms a call whatever the
# text's length. Nodes are immutable, so one parsed expression can serve any number of files; within one file a
# node must appear only once (the engine keys its maps by node), so the n-th use of a text in a file takes the
# n-th copy parsed of it (parsed when no file needed that many before). The file is the open session (door.py),
# which counts the copies it was handed; outside a session every call parses anew.
_PARSED: dict[tuple[str, str], list] = {}  # (kind, text) -> the copies parsed so far
_MAX_TEXTS = 4096


def expression(text: str) -> cst.BaseExpression:
    """`libcst.parse_expression(text)`, a node not handed out before in the current file."""
    return _parsed(("expression", text), lambda: cst.parse_expression(text))


def statements(text: str) -> tuple[cst.BaseStatement, ...]:
    """The statements of `libcst.parse_module(text)`, nodes not handed out before in the current file."""
    return _parsed(("statements", text), lambda: tuple(cst.parse_module(text).body))


def _parsed(key: tuple[str, str], parse):
    state = door.current()
    if state is None:
        return parse()
    copies = _PARSED.get(key)
    if copies is None:
        if len(_PARSED) >= _MAX_TEXTS:
            _PARSED.clear()  # a file counting more copies than a list now holds gets new ones (below)
        copies = _PARSED[key] = []
    used = state.handed_out.get(key, 0)
    state.handed_out[key] = used + 1
    if used < len(copies):
        return copies[used]
    node = parse()
    copies.append(node)
    return node
