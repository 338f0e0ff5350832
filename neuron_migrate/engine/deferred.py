"""The command's dataclasses (LibCST's and its own) with the methods `dataclasses` writes compiled when first
called, not when the class is made.

`import libcst` takes about 125 ms, 70 ms of it in `dataclasses`: for each of LibCST's 240 dataclasses it writes
`__init__`, `__repr__`, `__eq__` and, the classes being frozen, `__setattr__` and `__delattr__` as source text, and
compiles each. Most of them never run: LibCST's node base puts its own `__repr__` and `__eq__` in every node class
(`CSTNode.__init_subclass__`), so dataclasses' are compiled and dropped at once; the frozen guards run only on a
mistake; and one run builds nodes of a part of the classes. The tool's own modules make about 45 dataclasses in a
`check` of one file, 24 ms of its start-up written the same way, and most of their methods never run either.

`install()` (the command's start, `start.py`) has `dataclasses._create_fn` hand out a stand-in for each method of
a class of LibCST or of neuron_migrate (the module whose namespace the method is compiled in: `dataclasses` gives
it); a class of any other module (torch's, imported by `verify`) gets what `dataclasses` writes, as released. The
first call of a stand-in has `dataclasses` compile the method from the same text, names and namespaces it would
have compiled it at once, puts that function in the class in its own place, and calls it: from then on the class
holds what `dataclasses` makes, and it never ran differently. What the stand-ins change is what looks at a method
without calling it (`inspect.signature` of a class not built yet); `written(cls, name)` gives the compiled method
for code that reads one (syntax/parse.py's constructors).

Only the command installs it: `import neuron_migrate` in another program leaves its classes and LibCST's as
released. Python 3.10 to 3.12 only: 3.13 compiles the methods of a class in one text (no `_create_fn`), and
nothing is done there. `tests/test_deferred.py` holds every method, once compiled, equal to the one a plain import
writes, and the command's output over the fixtures equal with and without the stand-ins.
"""

from __future__ import annotations

import sys
from typing import Any

_PACKAGES = ("libcst", "neuron_migrate")  # the modules whose classes get stand-ins, and their submodules


def install() -> None:
    """Defer the methods of the classes LibCST and neuron_migrate make from now on in this process (and in
    workers forked from it); nothing to do where this Python's `dataclasses` is not the one read here, or twice."""
    import dataclasses

    stock = getattr(dataclasses, "_create_fn", None)
    if not (3, 10) <= sys.version_info[:2] <= (3, 12) or not callable(stock) or stock in _STAND_IN_MAKERS:
        return
    dataclasses._create_fn = _stand_in_maker(stock, dataclasses.MISSING)


def _ours(namespace: Any) -> bool:
    """Whether a method compiled in `namespace` (its class's module's globals) belongs to a class of _PACKAGES."""
    name = namespace.get("__name__") if isinstance(namespace, dict) else None
    return isinstance(name, str) and any(name == p or name.startswith(p + ".") for p in _PACKAGES)


# stand-in -> what compiles its method (a stand-in is never copied: dataclasses' wrappers, `__repr__`'s recursion
# guard, hold it and are no stand-ins themselves)
_STAND_INS: dict[Any, Any] = {}


def _stand_in_maker(stock: Any, missing: Any) -> Any:
    """A `_create_fn` that hands out stand-ins for what `stock` (dataclasses' own) would compile for a class of
    _PACKAGES, and what `stock` compiles for any other."""

    def create(name: str, args: Any, body: Any, *, globals: Any = None, locals: Any = None,
               return_type: Any = missing) -> Any:
        if not _ours(globals):
            return stock(name, args, body, globals=globals, locals=locals, return_type=return_type)
        compiled = None

        def compile_now() -> Any:
            nonlocal compiled
            if compiled is None:
                compiled = stock(name, args, body, globals=globals, locals=locals, return_type=return_type)
                if stand_in.__qualname__ != own_name:  # named for its class by dataclasses, as it would have been
                    compiled.__qualname__ = stand_in.__qualname__
            return compiled

        def stand_in(*arguments: Any, **keywords: Any) -> Any:
            method = compile_now()
            if arguments:  # a method: its class (or the base that defines it) holds the compiled one from now on
                for owner in type(arguments[0]).__mro__:
                    if owner.__dict__.get(name) is stand_in:
                        setattr(owner, name, method)
                        break
            return method(*arguments, **keywords)

        stand_in.__name__ = name
        own_name = stand_in.__qualname__
        _STAND_INS[stand_in] = compile_now
        return stand_in

    _STAND_IN_MAKERS.add(create)
    return create


_STAND_IN_MAKERS: set[Any] = set()  # what install() put in dataclasses' place: installed once


def is_stand_in(value: Any) -> bool:
    try:
        return value in _STAND_INS
    except TypeError:  # not hashable: no function
        return False


def compiled(value: Any) -> Any:
    """The method a stand-in stands for (compiled now if it was not yet), or `value` itself."""
    return _STAND_INS[value]() if is_stand_in(value) else value


def written(cls: type, name: str) -> Any:
    """`cls.__dict__[name]` (None where the class defines no such attribute), a stand-in compiled and put in its
    place first."""
    method = cls.__dict__.get(name)
    if is_stand_in(method):
        method = compiled(method)
        setattr(cls, name, method)
    return method
