"""LibCST's classes with the methods `dataclasses` writes for them compiled when first called, not at import.

`import libcst` takes about 125 ms, 70 ms of it in `dataclasses`: for each of LibCST's 240 dataclasses it writes
`__init__`, `__repr__`, `__eq__` and, the classes being frozen, `__setattr__` and `__delattr__` as source text, and
compiles each. Most of them never run: LibCST's node base puts its own `__repr__` and `__eq__` in every node class
(`CSTNode.__init_subclass__`), so dataclasses' are compiled and dropped at once; the frozen guards run only on a
mistake; and one run builds nodes of a part of the classes.

`install()` (the command's start, `start.py`) puts a finder first in `sys.meta_path`, used once: when `libcst` is
first imported, it has the package's code (and every submodule it imports) run while `dataclasses._create_fn`
hands out a stand-in for each method. The first call of a stand-in has `dataclasses` compile the method from the
same text, names and namespaces it would have compiled it at import, puts that function in the class in its own
place, and calls it: from then on the class holds what `dataclasses` makes, and it never ran differently. What
the stand-ins change is what looks at a method without calling it (`inspect.signature` of a class not built yet);
`written(cls, name)` gives the compiled method for code that reads one (syntax/parse.py's constructors).

Only the command installs it: `import neuron_migrate` in another program leaves its LibCST as released. Python
3.10 to 3.12 only: 3.13 compiles the methods of a class in one text (no `_create_fn`), and nothing is done there.
`tests/test_deferred.py` holds every method, once compiled, equal to the one a plain import writes, and the
command's output over the fixtures equal with and without the stand-ins.
"""

from __future__ import annotations

import sys
from typing import Any

_PACKAGE = "libcst"


def install() -> None:
    """Defer the methods of the next first import of LibCST in this process (and of workers forked from it);
    nothing to do where LibCST is imported already or this Python's `dataclasses` is not the one read here."""
    import dataclasses

    if _PACKAGE in sys.modules or _Finder in sys.meta_path or not (3, 10) <= sys.version_info[:2] <= (3, 12) \
            or not callable(getattr(dataclasses, "_create_fn", None)):
        return
    sys.meta_path.insert(0, _Finder)


class _Finder:
    """Finds nothing itself: on the import of `libcst`, it steps aside, asks the other finders, and wraps the
    loader's `exec_module` of the spec they give."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if name != _PACKAGE:
            return None
        try:
            sys.meta_path.remove(_Finder)
        except ValueError:
            pass
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        run = getattr(spec.loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module: Any) -> None:
            import dataclasses

            stock = dataclasses._create_fn
            dataclasses._create_fn = _stand_in_maker(stock, dataclasses.MISSING)
            try:
                run(module)
            finally:
                dataclasses._create_fn = stock
                del spec.loader.exec_module  # the loader's own again

        try:
            spec.loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader that takes no attribute: LibCST imports as it does
            pass
        return spec


# stand-in -> what compiles its method (a stand-in is never copied: dataclasses' wrappers, `__repr__`'s recursion
# guard, hold it and are no stand-ins themselves)
_STAND_INS: dict[Any, Any] = {}


def _stand_in_maker(stock: Any, missing: Any) -> Any:
    """A `_create_fn` that hands out stand-ins for what `stock` (dataclasses' own) would compile."""

    def create(name: str, args: Any, body: Any, *, globals: Any = None, locals: Any = None,
               return_type: Any = missing) -> Any:
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

    return create


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
