"""What the project model (engine/project.py) tells one file: the facts a file's decisions read beyond its bytes.

Kept apart from the model so that `Settings` (which carries them to the handlers, in worker processes too) does not
import it. A file's result depends on these facts: the runner folds `key()` into the file's cache key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

TPU, INF1, INF2, TRN1, NEURON, GPU = "tpu", "inf1", "inf2", "trn1", "neuron", "gpu"
# Targets the native backend does not run on: a program for one of them is not migrated (NM521).
SET_ASIDE = frozenset({TPU, INF1, INF2, TRN1})
# a `__main__` block (the project model reads it from lines, a file's facts from its text)
MAIN_BLOCK = re.compile(r"""^if[ \t]+(?:__name__[ \t]*==[ \t]*["']__main__["']|"""
                        r"""["']__main__["'][ \t]*==[ \t]*__name__)""", re.M)
NAMES = {TPU: "TPU", INF1: "Inferentia 1 (Inf1)", INF2: "Inferentia 2 (Inf2)", TRN1: "Trainium 1 (Trn1)",
         NEURON: "Neuron (Trn2 / Trn3)", GPU: "GPU"}


@dataclass(frozen=True)
class FileProject:
    """The project facts of one file."""

    target: str | None = None  # the target of the programs that reach the file, when the project tells it
    evidence: tuple[str, ...] = ()  # where that target was read: "<place>: <what>", strongest first
    conflict: tuple[str, ...] = ()  # evidence of targets that disagree: the file is held and marked (NM522)
    moving: str | None = None  # a program moving to neuron that reaches the file (its entry, as shown)
    imported_by: str | None = None  # another module of the project that imports this one (as shown)
    modules: tuple[str, ...] = ()  # the project's own modules this file imports (dotted, as imported)
    neuron_project: str | None = None  # where the project installs Neuron's packages ("requirements.txt: ...")
    # the file is told why it is left alone: it has legacy code and conflicting evidence (NM522), or it is the entry
    # of a program set aside that has legacy code (NM521, once per program)
    legacy: bool = False
    entry: bool = False  # a program's entry point: a `__main__` block, a notebook, run by a launch script or estimator
    # a program moving to neuron whose launch environment this file sets up (a DLAMI venv a launch script
    # activates, an estimator's container): the programs it launches, else those of its project root (named from
    # the file's folder)
    launches_moving: str | None = None
    launches_staying: tuple[str, ...] = ()  # ... and the programs it launches that do not move (named the same way)
    # the option (`--bf16`) that every program a launch script starts, all moving to neuron, takes to train in
    # bfloat16, where none of their files reads torch_xla's bfloat16 switches: NM256's marker names it
    bf16_option: str | None = None
    # another Python file of the program this entry starts that calls `init_process_group` (Megatron's
    # `initialize.py`): the group a spawn's function needs is made there, so NM202 makes none before the call
    group_elsewhere: str | None = None
    # the torch.cuda names a module of the file's program (`torch.cuda.FloatTensor = lambda t: ...`) redefines at
    # import time, where the file names torch.cuda: the program's own functions, not CUDA's
    cuda_patched: tuple[str, ...] = ()
    # the attributes a class of a project module the file imports assigns a compiled training step
    # (`self.compiled_step_fn = torch_xla.compile(self.step_fn)`), where the file switches eager mode on: NM110
    # compiles the model there, so a subclass's uncompiled step runs it compiled (NM259)
    base_compiled: tuple[str, ...] = ()
    # optimum-neuron Neuron-only training arguments (`--tensor_parallel_size`) a launcher passes the programs that reach
    # the file, as "argument:launcher" (the launcher as shown); NM508 keeps the Neuron class while the program takes them
    neuron_flags: tuple[str, ...] = ()
    # the bfloat16 switches of torch_xla (XLA_USE_BF16, XLA_DOWNCAST_BF16) another file of the file's programs turns
    # on (a launch script's `export`, a Dockerfile's ENV, a notebook's launch line, `os.environ[...] = "1"`), where
    # NM403 marks them: a read of one here needs no finding of its own
    sets_env: tuple[str, ...] = ()
    # an install list's environment (the requirements files, notebooks and shell scripts of its folder) keeps a
    # library built on torch_xla: "`optimum-neuron[vllm]==0.3.0` (requirements.txt)"; pin leaves the list as written
    xla_beside: tuple[str, ...] = ()
    # a project module of the same moving programs (dotted, as the file imports it) that defines NM244's RateTracker
    # class or gets it in this run: the file imports the class from there instead of writing a copy of its own
    rate_tracker_from: str | None = None
    # the module of the file's folder (bare name, `training_progress`) that holds NM244's helpers for the folder's
    # scripts, written by this run where it does not exist: the file imports them from there (engine/shared.py)
    shared_helpers: str | None = None

    @property
    def set_aside(self) -> bool:
        return self.target in SET_ASIDE and not self.conflict

    def key(self) -> str:
        return repr(self)


def settings_for(settings, facts: FileProject | None):
    """The settings a file is processed with: its project facts, and for an Inf2 / Trn1 program the instance the
    maintained XLA path is reported for (NM510), unless the user named one."""
    if facts is None:
        return settings
    changes: dict = {"project": facts}
    if facts.set_aside and facts.target in (INF2, TRN1) and settings.instance is None:
        changes["instance"] = facts.target
    return replace(settings, **changes)
