"""The tree pre-filter: what Python's tree of a file spells, its names resolved through the file's imports.

The byte pre-filter (`Rule.may_match`) passes a file on when a rule's trigger words occur anywhere in it. On real
code the common words (`padding`, `compile`, `double`, `load`, `cuda`) are everywhere, and most files that pass
never give the rule anything: `re.compile` is no `torch.compile`, a `padding` argument of a convolution pads no batch.
The engine parses Python's tree of such a file first anyway (its syntax errors are the ones users know, and
findings are placed by its lines); one walk of it gives a `Scan`, and a rule that declares `may_match_tree` says
from it whether it can report anything in the file. Where no rule can, and nothing else runs (the NM199 step,
markers, suppression comments), LibCST never parses the file, in `check` and `rewrite` alike; a file `rewrite`
leaves alone this way is still compiled, for what Python finds only when compiling. Where the NM199 step runs
(the file names torch_xla) every rule that may report runs, enabled or not (that step reports the XLA names no
rule took): there only the predicates that read no selection are asked (`Rule.tree_predicate_any_selection`), and
a rule they clear leaves the file's LibCST pass.

What a scan holds is a superset of what the rules resolve, so a predicate written against it is exact when it is a
necessary condition of every report the rule makes:

- `quals`: every dotted name a name chain can stand for. The analysis (engine/names.py) resolves the first name of a
  chain through an import binding of that name in its scope; the scan takes every import binding of the name in
  any scope of the file. `from torch.utils.data import DataLoader as DL` puts `torch.utils.data.DataLoader` in
  `quals` wherever `DL` is read; `import torch as th` puts `torch.compile` there for `th.compile`. Every shorter
  chain of a longer one is in it too (`torch`, `torch.utils`, ...).
- `attrs`: every attribute name (`x.double` gives `double`), `called`: the attribute or name a call calls,
  `keywords`: every keyword argument's name, `strings`: every string constant, `imports`: what every import binds
  (its dotted path; relative imports give none, as in the analysis), `modules`: every module an absolute import
  statement names (`import a.b.c` gives `a.b.c`, `from a.b import c` gives `a.b`), `text`: the file's text.

`tests/test_scan.py` holds `check` and `rewrite` with the tree pre-filter to their results without it over every
fixture, example, catalogue example, standard-library sample and torch_xla's sources, and checks each predicate
against each finding of its rule.
"""

from __future__ import annotations

import ast
from typing import Iterator

_Name, _Attribute, _Call, _Constant = ast.Name, ast.Attribute, ast.Call, ast.Constant
_Import, _ImportFrom, _keyword = ast.Import, ast.ImportFrom, ast.keyword


class Scan:
    __slots__ = ("quals", "attrs", "called", "keywords", "strings", "imports", "modules", "text")

    def __init__(self, tree: ast.AST, text: str) -> None:
        aliases: dict[str, set[str]] = {}  # a name -> every dotted path an import binds it to
        names: set[str] = set()
        chains: set[tuple[str, ...]] = set()
        attrs: set[str] = set()
        called: set[str] = set()
        keywords: set[str] = set()
        strings: set[str] = set()
        modules: set[str] = set()
        for node in nodes(tree):
            kind = node.__class__
            if kind is _Name:
                names.add(node.id)
            elif kind is _Attribute:
                attrs.add(node.attr)
                parts = [node.attr]
                value = node.value
                while value.__class__ is _Attribute:
                    parts.append(value.attr)
                    value = value.value
                if value.__class__ is _Name:
                    parts.append(value.id)
                    chains.add(tuple(reversed(parts)))
            elif kind is _Call:
                func = node.func
                if func.__class__ is _Attribute:
                    called.add(func.attr)
                elif func.__class__ is _Name:
                    called.add(func.id)
            elif kind is _keyword:
                if node.arg is not None:
                    keywords.add(node.arg)
            elif kind is _Constant:
                if node.value.__class__ is str:
                    strings.add(node.value)
            elif kind is _Import:
                for alias in node.names:
                    modules.add(alias.name)
                    if alias.asname is not None:
                        aliases.setdefault(alias.asname, set()).add(alias.name)
                    else:
                        head = alias.name.partition(".")[0]
                        aliases.setdefault(head, set()).add(head)
            elif kind is _ImportFrom:
                if node.level == 0 and node.module is not None:
                    modules.add(node.module)
                    for alias in node.names:
                        if alias.name != "*":
                            aliases.setdefault(alias.asname or alias.name, set()).add(f"{node.module}.{alias.name}")
        quals: set[str] = set()
        for name in names & aliases.keys():
            quals |= aliases[name]
        for chain in chains:
            bound = aliases.get(chain[0])
            if bound:
                rest = chain[1:]
                for base in bound:
                    for i in range(1, len(rest) + 1):
                        quals.add(".".join((base, *rest[:i])))
        self.quals = quals
        self.attrs = attrs
        self.called = called
        self.keywords = keywords
        self.strings = strings
        self.imports = {q for bound in aliases.values() for q in bound}
        self.modules = modules
        self.text = text

    def any_qual(self, names) -> bool:
        """Whether any of these dotted names can be read in the file."""
        quals = self.quals
        return any(n in quals for n in names)

    def any_qual_under(self, prefixes) -> bool:
        """Whether a name that is one of these dotted names or lies under one (`torch.sparse` for
        `torch.sparse.mm`) can be read in the file: `unsupported.lookup` finds a table entry for it."""
        return _any_under(self.quals, prefixes)

    def any_module_under(self, prefixes) -> bool:
        """Whether an import statement names one of these modules or a module under one."""
        return _any_under(self.modules, prefixes)

    def imports_under(self, roots: tuple[str, ...]) -> bool:
        """Whether the file imports from one of these top-level packages (see rules.unsupported.imports_any)."""
        return any(q.partition(".")[0] in roots for q in self.imports)


# The fields no walk of the engine needs to look into: a node's expression context (`Load`, `Store`, `Del`) and
# operators (`op`, a comparison's `ops`), and the fields Python's grammar (its ASDL) types as an identifier, number
# or string (`Name.id`, `ImportFrom.level`, ...). A `Constant` holds no node. A context or operator is a leaf that
# no walk dispatches on; `tests/test_scan.py` holds the walks to `ast.walk` less those leaves.
_NOT_NODES = frozenset({"ctx", "op", "ops", "id", "attr", "arg", "module", "level", "is_async", "simple",
                        "conversion", "kind", "type_comment"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(kind: type) -> tuple[str, ...]:
    """The fields of node class `kind` that may hold the nodes a walk reads (see `_NOT_NODES`), found once."""
    found = _CHILD_FIELDS.get(kind)
    if found is None:
        found = _CHILD_FIELDS[kind] = () if kind is ast.Constant else \
            tuple(f for f in kind._fields if f not in _NOT_NODES)
    return found


def nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree`, itself included, but the expression contexts and operators, in no particular order:
    what `ast.walk` gives (breadth first) less those leaves, in under half its time (no generator per node, no
    check of each field's type through `isinstance`, no look at the fields that hold no node)."""
    stack = [tree]
    pop, push = stack.pop, stack.append
    node_type = ast.AST
    table = _CHILD_FIELDS
    while stack:
        node = pop()
        yield node
        fields = table.get(node.__class__)
        for name in child_fields(node.__class__) if fields is None else fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, node_type):
                        push(item)
            elif isinstance(value, node_type):
                push(value)


def _any_under(names: set[str], prefixes) -> bool:
    for name in names:
        while name:
            if name in prefixes:
                return True
            name = name.rpartition(".")[0]
    return False
