"""Small pure helpers the rules share: arguments, string literals, legacy API names."""

from __future__ import annotations

import re

import libcst as cst

from neuron_migrate.engine.names import dotted_str as _dotted
from neuron_migrate.syntax.codegen import code as _generated

XM = "torch_xla.core.xla_model"
INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group",
                                "torch.distributed.distributed_c10d.init_process_group"})

DEVICE_STRING = re.compile(r"^xla(:\d+)?$")
DEVICE_PREFIX = re.compile(r"^xla(:|$)")


def arg(call: cst.Call, position: int | None, keyword: str | None) -> cst.Arg | None:
    """The argument at `position` (positional, before any keyword or star) or named `keyword`."""
    if keyword is not None:
        for a in call.args:
            if a.keyword is not None and a.keyword.value == keyword:
                return a
    if position is not None:
        positional = []
        for a in call.args:
            if a.keyword is not None or a.star:
                break
            positional.append(a)
        if position < len(positional):
            return positional[position]
    return None


def has_star(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def positional_count(call: cst.Call) -> int:
    return sum(1 for a in call.args if a.keyword is None and not a.star)


def string_value(node: cst.CSTNode | None) -> str | None:
    """The value of a str literal (not bytes, not an f-string); None for anything else."""
    if type(node) is cst.SimpleString:
        prefix = node.prefix.lower()
        if prefix in ("", "u", "r"):
            quote = node.quote
            body = node.value[len(prefix) + len(quote):-len(quote)]
            if "\\" not in body and "\r" not in body:
                return body  # no escapes, no newline to normalise: the text is the value (evaluated_value compiles)
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_device_string(node: cst.CSTNode | None) -> bool:
    """`"xla"`, `"xla:0"`, or an f-string `f"xla:{rank}"`."""
    value = string_value(node)
    if value is not None:
        return bool(DEVICE_STRING.match(value))
    if type(node) is cst.FormattedString and node.parts:
        first = node.parts[0]
        return type(first) is cst.FormattedStringText and bool(DEVICE_PREFIX.match(first.value)) and (
            first.value in ("xla", "xla:") and (len(node.parts) == 1 or first.value == "xla:"))
    return False


def spells_device_string(strings) -> bool:
    """Whether a file whose string constants (Python's tree: implicit concatenations joined, an f-string's text
    parts apart) are `strings` may hold a literal `is_device_string` accepts (an f-string's first part `xla:`)."""
    return any(value == "xla:" or DEVICE_STRING.match(value) for value in strings)


def respell_literal(node: cst.SimpleString, old: str, new: str) -> cst.SimpleString:
    """A device name's literal (its value `old`, `old:<index>`) naming `new` instead, with its prefix and quotes. Where
    the source spells `old` with escapes (`"\\x78la"`), the new name is written plainly."""
    start = len(node.prefix) + len(node.quote)
    if node.value.startswith(old, start):
        return node.with_changes(value=node.value[:start] + new + node.value[start + len(old):])
    rest = (string_value(node) or old)[len(old):].replace("\n", "\\n")  # `:1`, and the newline `$` lets through
    prefix = "".join(c for c in node.prefix if c not in "rR")  # the written escapes are plain ones
    return node.with_changes(value=f"{prefix}{node.quote}{new}{rest}{node.quote}")


def respell_device(node: cst.BaseExpression, new: str = "neuron") -> cst.BaseExpression:
    """The same literal with `xla` replaced by `new`, keeping prefix and quotes."""
    if isinstance(node, cst.SimpleString):
        return respell_literal(node, "xla", new)
    if isinstance(node, cst.FormattedString):
        first = node.parts[0]
        assert isinstance(first, cst.FormattedStringText)
        return node.with_changes(parts=[first.with_changes(value=new + first.value[3:]), *node.parts[1:]])
    return node


def _plain_chain(node: cst.CSTNode) -> str | None:
    """`a.b.c` written without parentheses or blanks around its dots, as text; None for anything else."""
    parts = []
    while type(node) is cst.Attribute and not node.lpar:
        dot = node.dot
        if type(dot.whitespace_before) is not cst.SimpleWhitespace or dot.whitespace_before.value \
                or type(dot.whitespace_after) is not cst.SimpleWhitespace or dot.whitespace_after.value \
                or node.attr.lpar:
            return None
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name or node.lpar or not parts:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))
_LEAVES = (cst.Name, cst.SimpleString, cst.Integer, cst.Float)


def code(node: cst.CSTNode) -> str:
    if type(node) in _LEAVES and not node.lpar:
        return node.value  # the common case, without a code-generation pass
    chain = _plain_chain(node)
    if chain is not None:
        return chain
    return _generated(node)


def short(node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(code(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def reads_of(ctx, name: str, scope) -> int:
    """The reads of `name` anywhere in the file that see its binding in `scope`."""
    return sum(s.reads.get(name, 0) for s in ctx.analysis.scopes if ctx.analysis.lookup(name, s) is scope)


SETTING_CALLS = frozenset({"int", "str", "float", "os.getenv", "os.environ.get", "os.path.join"})


def reads_setting(value: cst.BaseExpression) -> bool:
    """`value` only reads a setting and converts it: literals, names, `os.environ[...]`, int()/str()/float(),
    os.getenv()/os.environ.get(), os.path.join(), and f-strings, concatenations and arithmetic of those."""
    if isinstance(value, (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.Attribute)):
        return True
    if type(value) is cst.FormattedString:
        return all(type(part) is cst.FormattedStringText or (
            part.format_spec is None and reads_setting(part.expression)) for part in value.parts)
    if type(value) is cst.ConcatenatedString:
        return reads_setting(value.left) and reads_setting(value.right)
    if type(value) is cst.BinaryOperation:
        return reads_setting(value.left) and reads_setting(value.right)
    if type(value) is cst.Subscript:
        return _dotted(value.value) == "os.environ" and len(value.slice) == 1 \
            and type(value.slice[0].slice) is cst.Index and reads_setting(value.slice[0].slice.value)
    if type(value) is cst.Call:
        return _dotted(value.func) in SETTING_CALLS and all(
            a.keyword is None and not a.star and reads_setting(a.value) for a in value.args)
    return False
