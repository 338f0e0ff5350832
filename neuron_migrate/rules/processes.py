"""How many processes a program can run as, decided once per program, and how its rewritten code asks.

torch_xla answered ranks and world size, and averaged gradients, in every program, whatever started it. Natively
the answers come from torchrun's variables. A program that cannot run as several processes (started with a plain
`python train.py`: no spawn, no process group, no rank or world size asked, no launcher that starts several copies
of it) had one replica under torch_xla: there `xm.optimizer_step(opt)` is `opt.step()`, `xm.save` is `torch.save`
of a CPU copy, and a collective returns the local value. Anywhere else, the rewritten calls read rank and world
size from names the module binds once (`WORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))`), as torchrun
scripts do.
"""

from __future__ import annotations

import os
import re

import libcst as cst

from neuron_migrate.engine import store
from neuron_migrate.engine.cache import digest
from neuron_migrate.engine.facts import fact, fstring_quote
from neuron_migrate.engine.imports import is_docstring
from neuron_migrate.engine.sources import SourceError, decode, read_bytes

# Words of a program that may run as several processes (in its own text or a local module it imports): a
# spawn or launch, a process group, ranks, world sizes, collectives, data-parallel wrappers and samplers, the
# libraries that start processes. Conservative: a word in a comment counts too.
SEVERAL = re.compile(
    r"spawn|torch_xla\.launch|xla_multiprocessing|multiprocessing|init_process_group|torch\.distributed|xla_backend"
    r"|DistributedDataParallel|DistributedSampler|\bDDP\b|FSDP|fsdp|zero_redundancy|ZeroRedundancy|use_spmd|spmd"
    r"|torchrun|MASTER_ADDR|WORLD_SIZE|RANK|ordinal|world_size|process_index|process_count|num_replicas"
    r"|all_reduce|all_gather|reduce_scatter|all_to_all|rendezvous|mesh_reduce|broadcast_master_param"
    r"|reduce_gradients|neuronx_distributed|import accelerate|from accelerate|Accelerator\(|deepspeed|horovod|mpi4py"
    r"|import ray|from ray")
# A launcher that starts several copies of a script it names (in a launch script, notebook, README, job file).
LAUNCHERS = re.compile(r"torchrun|torch\.distributed\.(?:run|launch)|mpirun|\bsrun\b|accelerate launch|deepspeed"
                       r"|nproc_per_node|\bsbatch\b")
MAIN = re.compile(r"""(?m)^if\s+__name__\s*==\s*["']__main__["']""")
# `import x`, `from x import y` at a line start: the local modules a program is made of
LOCAL_IMPORT = re.compile(r"(?m)^[ \t]*(?:from[ \t]+([A-Za-z_]\w*)[ \t]+import\b|import[ \t]+([A-Za-z_]\w*))")
# The program sets torchrun's variables itself: they are read where they are used, not once at import
SETS_RANKS = re.compile(r"""environ\[\s*["'](?:RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE)["']\s*\]\s*=[^=]"""
                        r"""|environ\.(?:setdefault|update)\(|putenv\(""")
# One of those names used in the file's code (a string "RANK" is a variable's key, not a name)
RANK_NAME = re.compile(r"""(?<!["'])\b(?:LOCAL_)?(?:RANK|WORLD_SIZE)\b(?!["'])""")
LAUNCH_SUFFIXES = (".sh", ".bash", ".ipynb", ".md", ".rst", ".yaml", ".yml", ".slurm", ".sbatch")
LAUNCH_NAMES = ("Makefile", "Dockerfile", "Procfile")

VARIABLES = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


@fact
def single_process(ctx) -> bool:
    """The program this file is cannot run as several processes: it is a program's entry (a `__main__` block,
    or a notebook), neither it nor a local module it imports says a word of several processes, and no file
    beside it (or in the folder above) starts it with a launcher of several processes. The files read for the
    decision go into the result's `files_read`, so the cache sees their changes. A file of the folder (or of a
    folder right below it) that imports this one and speaks of several processes makes it one of them too."""
    text = ctx.source.text
    if SEVERAL.search(text):
        return False
    path = ctx.path
    if not (path.endswith(".ipynb") or MAIN.search(text)) or path in ("-", "<stdin>") or not os.path.isfile(path):
        return False
    folder = os.path.dirname(os.path.abspath(path))
    for name in sorted({a or b for a, b in LOCAL_IMPORT.findall(text)}):
        other = _read(ctx, os.path.join(folder, f"{name}.py"))
        if other is not None and SEVERAL.search(other):
            return False
    if _imported_by_several(ctx, folder, os.path.basename(path)[:-len(".py")]):
        return False
    script = os.path.basename(path)
    for place in (folder, os.path.dirname(folder)):
        for name in _entries(ctx, place, LAUNCH_SUFFIXES, LAUNCH_NAMES):
            other = _read(ctx, os.path.join(place, name)) if name != script else None
            if other is not None and script in other and _launches(other, script):
                return False
    return True


def _imported_by_several(ctx, folder: str, stem: str) -> bool:
    """A Python file of `folder` or of a folder right below it imports the module `stem` (a base class a
    multi-process variant extends: `from train_base import Trainer`) and says a word of several processes: the
    module's code runs in that program's processes too."""
    if not stem.isidentifier():
        return False
    imports = re.compile(rf"(?m)^[ \t]*(?:from[ \t]+{stem}[ \t]+import\b|import[ \t]+{stem}\b)")
    places = [folder] + [os.path.join(folder, name[:-1]) for name in _entries(ctx, folder, ("/",))
                         if not name.startswith(".")]
    for place in places:
        for name in _entries(ctx, place, (".py",)):
            other = os.path.join(place, name)
            if other == os.path.abspath(ctx.path):
                continue
            text = _read(ctx, other)
            if text is not None and imports.search(text) and SEVERAL.search(text):
                return True
    return False


def _launches(text: str, script: str) -> bool:
    """A line that names the script also names a launcher of several processes (or continues one that does)."""
    previous = ""
    for line in text.splitlines():
        if script in line and (LAUNCHERS.search(line) or LAUNCHERS.search(previous)):
            return True
        previous = line if line.rstrip().endswith("\\") else ""
    return False


def _entries(ctx, folder: str, suffixes: tuple[str, ...], names: tuple[str, ...] = ()) -> list[str]:
    """The sorted entries of `folder` that end with one of `suffixes` or are one of `names` (a sub-folder's name
    ends in `/`; none when it cannot be listed). They go into the result's `files_read`: a file added there changes
    what was decided, so the cache sees it; any other new entry (the folder above a repository) does not count."""
    key = store.listing_key(folder, suffixes, names)
    found = store.entries(folder, suffixes, names)
    ctx.files_read[key] = store.listing_digest(key, found)
    return found or []


def _read(ctx, path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    try:
        data = read_bytes(path)
        ctx.files_read[os.path.abspath(path)] = digest(data)
        return decode(data).text
    except SourceError:
        return None


@fact
def rank_names(ctx) -> frozenset[str]:
    """Those of `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and `LOCAL_WORLD_SIZE` that rewritten code may read from names
    the module binds once after its imports: the ones the file's code does not use as names itself (a function's
    own `LOCAL_RANK = ...` keeps only that one in place), none where the file sets one of torchrun's variables.
    Read from the text and its tokens, not the tree: `check`'s lean parse must answer as `rewrite`'s full one."""
    text = ctx.source.text
    if SETS_RANKS.search(text):
        return frozenset()
    seen = {m.group() for m in RANK_NAME.finditer(text)}
    return frozenset(VARIABLES) - (_names_in_code(text, seen) if seen else seen)


def _names_in_code(text: str, names: set[str]) -> set[str]:
    """Those of `names` the code reads or binds: a name token, or a word in an f-string's replacement fields
    (`f"LOSSES-RANK-{LOCAL_RANK}.txt"` reads LOCAL_RANK; its text and a plain string's `"{RANK}"` are text); all
    of them where the text does not tokenize."""
    import io
    import tokenize

    used: set[str] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.NAME and token.string in names:
                used.add(token.string)
            elif token.type == tokenize.STRING and "f" in token.string[:token.string.find(token.string[-1])].lower():
                used.update(m.group() for m in RANK_NAME.finditer(_fields(token.string)) if m.group() in names)
    except (tokenize.TokenError, SyntaxError, ValueError):
        return names
    return used


def _fields(fstring: str) -> str:
    """The replacement fields of an f-string token (`{x!r:>{width}}`), one after another; `{{` is text."""
    out, depth, i = [], 0, 0
    while i < len(fstring):
        c = fstring[i]
        if depth == 0 and c in "{}" and fstring[i + 1:i + 2] == c:
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            out.append(" ")
        elif depth:
            out.append(c)
        i += 1
    return "".join(out)


def env_int(ctx, variable: str, default: str) -> str:
    """What torchrun set for `variable`, or the single-process value: the module's name for it where it may
    bind one (see `rank_names`), else `int(os.environ.get("RANK", "0"))` in place.

    The default is a string, as the environment's values are (linters flag a non-string default: PLW1508); an
    expression default becomes `str(...)`, which `int` turns back into the same integer."""
    quote = fstring_quote(ctx, ctx.current.node) if ctx.current is not None else None
    quote = quote or ctx.quote
    if VARIABLES.get(variable) == default and variable in ctx.facts.rank_names and _os_at_top(ctx):
        os_ = ctx.module_ref("os", scope=ctx.analysis.module_scope)
        ctx.define(f"{variable} = int({os_}.environ.get({ctx.string(variable)}, {ctx.string(default)}))")
        return variable
    text = f"{quote}{default}{quote}" if default.lstrip("-").isdigit() else f"str({default})"
    return f"int({ctx.module_ref('os')}.environ.get({quote}{variable}{quote}, {text}))"


def _os_at_top(ctx) -> bool:
    """The names bound once can read `os`: the module binds it nowhere, or only by unconditional import lines at
    its top level (not an `import os` inside `if __name__ == "__main__":`, which runs after them). An `import os`
    below other code is followed by the names (see `imports._add_definitions`): then a rewrite in module-level code
    above it reads the variable in place."""
    bindings = ctx.analysis.module_scope.bindings.get("os", [])
    if not all(b.kind == "import" and not b.conditional for b in bindings):
        return False
    body = list(ctx.module.body)
    index = {id(statement): i for i, statement in enumerate(body)}
    tops = [ctx._top_statement(b.node) for b in bindings]
    if not all(_import_line(top) and id(top) in index for top in tops):
        return False
    leading = next((i for i, statement in enumerate(body) if not (_import_line(statement) or (
        i == 0 and is_docstring(statement)))), len(body))
    last = max((index[id(top)] for top in tops), default=-1)
    if last < leading:
        return True
    site = ctx._top_statement(ctx.current.node) if ctx.current is not None else None
    if isinstance(site, cst.FunctionDef):  # its body runs when called, after the module's imports
        return True
    return site is not None and index.get(id(site), -1) > last


def _import_line(statement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body)
