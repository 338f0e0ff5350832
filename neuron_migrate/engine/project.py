"""The project model: what the project tells about each file, computed once per run before any file is processed.

A file's decisions used to rest on its own bytes only. Real repositories spread one program over several files
and say what they run on elsewhere: in file and folder names, sibling notebooks and READMEs, Dockerfile base
images, launch scripts, SageMaker estimators and requirements. The model reads Python's `ast` of every Python
file and notebook found (not LibCST) and the text of the other files, and builds

- the project roots (the nearest folder above a file with pyproject.toml, setup.py, setup.cfg or .git, else the
  folder given on the command line);
- the import graph among the project's own modules (a module resolves in the importing file's folder and in
  every folder above it up to its root, which covers package imports and the usual `sys.path` additions);
- the programs: entry points (a `__main__` block, a notebook, a file a launch script or notebook runs, a
  SageMaker `entry_point`) and the files each reaches through that graph;
- per program its target with the places it was read from (`targets` in `[tool.neuron-migrate]` first, then the
  program's own path and text, then the scripts and estimators that launch it, then the requirements,
  Dockerfiles and READMEs of its folders); the strongest level that has evidence decides, and two targets on that
  level are a conflict that is marked, never guessed.

Each file then gets its `FileProject` (neuron_migrate/project_facts.py), carried to the handlers in its settings
and folded into its cache key: a file whose program targets TPU, Inf1, Inf2 or Trn1 is set aside (NM521), a helper
module reached from a program that moves to neuron moves too, a module another module imports is a library
whose device-name parameters callers pass as data.
"""

from __future__ import annotations

import ast
import bisect
import functools
import json
import os
import re
from dataclasses import dataclass, field, replace
from typing import Iterable

from neuron_migrate.engine.cache import digest
from neuron_migrate.engine.inputs import head, infrastructure, readme
from neuron_migrate.engine.shared import HELPERS_HEADER, HELPERS_IMPORT, HELPERS_MODULE, RATE_TRACKER_DOC, uses_helpers
from neuron_migrate.project_facts import (GPU, INF1, INF2, MAIN_BLOCK, NAMES, NEURON, SET_ASIDE, TPU, TRN1,
                                          FileProject)

# the files that install a program's packages or set up its environment: held with the programs they serve
INSTALL_KINDS = frozenset({"requirements", "pyproject", "setup-cfg", "conda-env", "dockerfile", "shell"})
ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
LEGACY_ROOTS = frozenset({"torch_xla", "torch_neuronx"})
# evidence levels, strongest first
CONFIG, NAME, TEXT, LAUNCH, FOLDER = range(5)
LEVELS = ("config", "path", "text", "launch", "folder")

# a path component's words: `hf_pretrained_vit_inference_on_inf2.ipynb` -> ... "on", "inf2"
_WORD = re.compile(r"[A-Za-z0-9]+")
_NAME_WORDS = {"tpu": TPU, "tpus": TPU, "tpuv2": TPU, "tpuv3": TPU, "tpuv4": TPU, "tpuv5": TPU, "tpuv5e": TPU,
               "tpuv5p": TPU, "tpuv6e": TPU, "inf1": INF1, "inf2": INF2, "inferentia2": INF2, "inferentia1": INF1,
               "trn1": TRN1, "trn1n": TRN1, "trainium1": TRN1, "trn2": NEURON, "trn3": NEURON, "trainium2": NEURON,
               "trainium3": NEURON}
# an instance type, as a launch script, an estimator or a README writes it
INSTANCE_TYPE = re.compile(r"\b(?:ml\.)?(inf1|inf2|trn1n?|trn2|trn3)\.(?:\d*x?large|metal)\b")
# ... or as prose names it: an instance type, or the family alone ("a NeuronCore on Trn1", "Inf2 instances")
# (a product's generation where a sentence runs something on it, "compile it for AWS Inferentia2", "on Trainium 1",
# counts as its family; "Trainium1 chips feature two NeuronCores" describes the hardware, and "Inferentia" alone is
# either generation)
_RUNS_ON = r"\b(?:on|for|to|with)[ \t]+(?:an?[ \t]+)?(?:AWS[ \t]+)?"
_PROSE_INSTANCE = re.compile(r"\b(?:ml\.)?(inf1|inf2|trn1n?|trn2|trn3)(?:\.\d*x?large|\.metal)?\b|"
                             rf"{_RUNS_ON}((Inferentia|Trainium)[ \t]?([123]))\b", re.I)
_HARDWARE_LETTERS = re.compile(r"inf|trn|trainium", re.I)
# ... where an infrastructure file's key names it: `InstanceType: trn1.32xlarge`, a YAML list under `InstanceTypes:`,
# `"instanceTypes": ["trn1.32xlarge"]`, `instance_type = "inf2.xlarge"`, `--instance-type trn1.2xlarge`,
# `node.kubernetes.io/instance-type: trn1.32xlarge`. The key opens a line (after `- ` or `export `), is a quoted key
# after `{` or `,` (compact JSON) or is a command's option; an instance type in running text (a report's message, a
# description) is not where the jobs go. Linear: a match starts only at a line's start, `{`, `,` or `--`, and each
# repeat ends with its word or its run of separators.
_KEYED_INSTANCE = re.compile(
    r"""(?:^[ \t]*(?:-[ \t]+|export[ \t]+)?["']?|[{,][ \t]*"|--)[\w./]*?instance[-_]?types?["']?(?:[ \t]*[:=])?"""
    r"""[\s"'\[-]*(?:ml\.)?(inf1|inf2|trn1n?|trn2|trn3)\.(?:\d*x?large|metal)\b""", re.I | re.M)
_TRAINS = re.compile(r"\.backward\(|\boptimizer_step\(|\boptimizer\.step\(")
_TRAIN_WORDS = (".backward(", "optimizer_step(", "optimizer.step(")  # what _TRAINS needs, looked for first
_INSTANCE_TARGET = {"inf1": INF1, "inf2": INF2, "trn1": TRN1, "trn1n": TRN1, "trn2": NEURON, "trn3": NEURON}
_FAMILY_TARGET = {"inferentia1": INF1, "inferentia2": INF2, "trainium1": TRN1, "trainium2": NEURON,
                  "trainium3": NEURON}

# TPU named as hardware in prose or comments: "TPU v3-8", "a TPU VM", "Cloud TPU", "TPU v5e", "tpu-v4", "run this
# tutorial on a TPU"
# (case-sensitive: a `tpuv4` preset name in code is not prose)
TPU_PROSE = re.compile(r"\bTPU[ -]?v\d|\bTPU VMs?\b|\bCloud TPU|\btpu-v\d|\bTPU\b[^\n]{0,20}\bv[2-6][ep]?-\d{1,4}\b"
                       r"|\b[Rr]un(?:s|ning)? (?:this|the) (?:tutorial|notebook|example|script|demo) on (?:a )?TPU\b")
_SCAN = "torch_xla's XLA-only scan, which has no native counterpart"
# torch_xla features Neuron's XLA stack never ran: a program built on them was written for TPU (GSPMD: "PyTorch
# NeuronX currently does not support GSPMD", Neuron 2.27 release notes; Pallas kernels are TPU / GPU kernels)
TPU_ONLY_MODULES = (("torch_xla.distributed.spmd", "GSPMD, which Neuron's XLA stack never ran"),
                    ("torch_xla.experimental.custom_kernel", "Pallas kernels, which Neuron's XLA stack never ran"),
                    # torch_xla's scan (and scan_layers, built on it) lowers a loop to one XLA While op: a demo of it
                    # has no native counterpart to move to, and torch_xla documents it for TPU
                    ("torch_xla.experimental.scan", _SCAN),
                    ("torch_xla.experimental.scan_layers", _SCAN))
# a program that stops unless torch_xla runs on TPU: `if device_hw == 'TPU': ... else: sys.exit(1)`, or the message
# pytorch/xla's AMP tests print then ("Only TPU supported for AMP")
_TPU_ONLY_MESSAGE = re.compile(r"""["']Only TPU supported\b[^"'\n]{0,40}["']""")
_EXITS = frozenset({"exit", "_exit", "abort"})
PJRT_TPU = re.compile(r"""\bPJRT_DEVICE["']?\s*(?:=|,|:)\s*["']?TPU\b""")
PJRT_NEURON = re.compile(r"""\bPJRT_DEVICE["']?\s*(?:=|,|:)\s*["']?NEURON\b""")
# a launch line: the Python program it runs
LAUNCHER = re.compile(r"(?:^|[\s;&|(!])(?:python3?(?:\.\d+)?|torchrun|neuron_parallel_compile|accelerate launch|"
                       r"deepspeed|%run)\b[^\n;&|]*?([\w./-]+\.py)\b")
_RUN_MAGIC = re.compile(r"^\s*%run\s+(?:-\S+\s+)*([\w./-]+?)(?:\.py)?\s*$")
# requirements: the products they install
_REQ_INF1 = re.compile(r"^[ \t\f]*(?:torch-neuron|torch_neuron|neuron-cc|neuron_cc)\s*(?:[=<>~!;\[#]|$)", re.I | re.M)
_REQ_TPU = re.compile(r"torch[-_]xla\s*\[\s*tpu\s*\]|libtpu", re.I)
_REQ_NEURON = re.compile(r"^[ \t\f]*(?:torch-neuronx|torch_neuronx|neuronx-cc|neuronx_cc|neuronx-distributed)\b", re.I | re.M)
# Python statements read from lines (engine/project.py reads every file: it must cost little)
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([.\w]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)|import[ \t]+([^\n#;]+))",
                     re.M)
# `torch.cuda.FloatTensor = lambda t: ...` at a line's start: the program redefines a torch.cuda name at import time
_CUDA_PATCH = re.compile(r"^torch\.cuda\.([A-Za-z_]\w*)[ \t]*=(?!=)", re.M)
_INSTALLS_NEURON = re.compile(r"\btorch[-_]neuronx\b")  # a Dockerfile's or pyproject's install of it
# Dockerfile base images
_FROM = re.compile(r"^[ \t\f]*FROM\s+(?:--\S+\s+)*(\S+)", re.I | re.M)
_README_TARGETS = {"tpu": TPU, "inf1": INF1, "inf2": INF2, "trn1": TRN1, "inferentia1": INF1, "inferentia2": INF2,
                   "trainium1": TRN1}
# a launch environment a file sets up: a DLAMI virtual environment a script activates, an estimator's container,
# Ray's XLA configuration (files/envfiles.py and rules/launch_env.py judge them; the model says whether a program
# that moves to neuron is theirs)
LEGACY_VENV = re.compile(r"(?<![\w/])/opt/aws_neuronx_venv_pytorch_(\d+)_(\d+)\w*")
_SETS_ENVIRONMENT = re.compile(r"\b(?:framework_version|pytorch_version|image_uri)\s*=|\bTorchXLAConfig\b")
_ENVIRONMENT_WORDS = ("framework_version", "pytorch_version", "image_uri", "TorchXLAConfig")
# a file that turns a bfloat16 switch of torch_xla on: `XLA_USE_BF16=1` (export, ENV, a launch line),
# `os.environ["XLA_USE_BF16"] = "1"` (also with a notebook's escaped quotes); the value is read after it
BF16_SWITCHES = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")  # environment.toml's `bf16` entries (tests/test_project.py)
_SETS_BF16 = re.compile(rf"""(?<![\w$])({"|".join(BF16_SWITCHES)})(?:=|\\?["']\][ \t]*=[ \t]*)\\?["']?(\w*)""")
_OFF = frozenset({"0", "", "false", "False", "FALSE"})
# a program's own bfloat16 option: `parser.add_argument("--bf16", action="store_true", ...)` (Megatron, many trainers)
_BF16_OPTION = re.compile(r"""\.add_argument\(\s*(["'])(--(?:use[-_])?bf16)\1\s*,[^)]*?"""
                          r"""\baction\s*=\s*["']store_true["']""")
# the install lists of one environment: a folder's requirements files, notebooks and shell scripts
ENVIRONMENT_KINDS = ("requirements", "shell", "notebook")
_PIP_INSTALL = re.compile(r"\bpip3?[ \t]+install\b([^\n;&|]*)")
_OPTIONS_WITH_VALUE = frozenset({"-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-i", "--index-url",
                                 "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "--root"})
README_REACH = 2  # the program's folder and the one above: the READMEs and infrastructure files read
_README_NATIVE = re.compile(r"\btrn[23]\b|Trainium ?[23]", re.I)
_README_WORD = re.compile(r"\b(?:(TPU)s?\b(?:[ -]?v\d|\s+VM|\s+pod)|(inf1|inf2|trn1)(?:n)?(?:\.\d*x?large)?)\b|"
                          rf"{_RUNS_ON}(Inferentia[ \t]?[12]|Trainium[ \t]?1)\b", re.I)


@dataclass
class Evidence:
    target: str
    level: int
    place: str  # the file it was read from, as shown
    what: str
    # a Neuron package install (torch-neuronx): the XLA-based torch-neuronx also runs on Inf2 and Trn1, so it says
    # a Neuron project, never Trn2 / Trn3 against an Inf2 or Trn1 instance named beside it
    package: bool = False
    # what one program's code does (a TPU-only feature or check), not where the sample runs: it is not told to the
    # sibling scripts of its folder (`Project._families`)
    feature: bool = False

    def text(self) -> str:
        return f"{self.place}: {self.what}"


@dataclass
class Module:
    """What the model knows of one Python file or notebook."""

    path: str  # as discovered (shown)
    full: str  # absolute
    root: str
    entry: bool = False  # a `__main__` block, a notebook, or run by a launch script / estimator / notebook
    legacy: bool = False  # imports torch_xla or torch_neuronx (any scope)
    # ... outside any function or class: the file runs on XLA whoever imports it (an import inside a function is
    # an XLA code path of a multi-backend library, as in PyTorch's own `torch/_tensor.py`)
    legacy_top: bool = False
    sets_environment: bool = False  # names an estimator's container (`framework_version=`, `image_uri=`) or Ray's XLA
    imports: list[tuple[str, int]] = field(default_factory=list)  # (module, level) as written
    paths: list[str] = field(default_factory=list)  # folders its `sys.path.insert(0, ...)` / `append` add (absolute)
    runs: list[str] = field(default_factory=list)  # programs it runs (`!python x.py`, `%run x`)
    run_flags: dict[str, set[str]] = field(default_factory=dict)  # ... and the `--flags` its lines pass each
    estimators: list[tuple[str, str]] = field(default_factory=list)  # (entry_point, instance type or "")
    estimator_flags: dict[str, set[str]] = field(default_factory=dict)  # entry_point -> its arguments' names
    # optimum-neuron's Neuron-only training arguments (rules/huggingface.toml) a launcher passes this program:
    # flag -> the launcher (as shown)
    neuron_flags: dict[str, str] = field(default_factory=dict)
    evidence: list[Evidence] = field(default_factory=list)
    edges: set[str] = field(default_factory=set)  # absolute paths of the project modules it imports
    launches: set[str] = field(default_factory=set)  # absolute paths of the programs it runs (`!torchrun x.py`)
    modules: list[str] = field(default_factory=list)  # those imports' dotted names as written
    resolved: dict[str, str] = field(default_factory=dict)  # dotted name as written -> the module's absolute path
    importers: list[str] = field(default_factory=list)
    cuda_patches: set[str] = field(default_factory=set)  # the torch.cuda names it assigns at module level
    # the attributes its methods assign a compiled training step (`self.step = torch_xla.compile(self.step_fn)`)
    compiled_steps: set[str] = field(default_factory=set)


@dataclass
class Program:
    entry: Module
    files: list[Module]
    target: str | None
    evidence: list[Evidence]
    conflict: list[Evidence]
    moving: bool


class Project:
    """The model of every file found in one run."""

    def __init__(self, paths: Iterable[str], targets: Iterable, settings, reader=None) -> None:
        """`reader`: where the Python files and notebooks are read (`read_modules` of a list of (module, kind),
        in order), the workers of a run among them (runner.Workers.read_modules); here by default."""
        self._reader = reader or read_modules
        self.tops = [os.path.abspath(p) for p in paths]
        self._given_folders = frozenset(os.path.dirname(p) for p in self.tops if not os.path.isdir(p))
        self.config_targets = tuple(getattr(settings, "targets", ()) or ())
        # `--instance trn2` / `trn3` (or `instance` in the configuration) says where the code goes: Inf2 and Trn1
        # evidence then tells where it ran, and those programs move
        self.native_instance = getattr(settings, "instance", None) in ("trn2", "trn3")
        self.files = list(targets)
        self.modules: dict[str, Module] = {}
        self.others: dict[str, list[str]] = {}  # kind -> absolute paths (shell, dockerfile, requirements, readme)
        self.programs: list[Program] = []
        self.facts: dict[str, FileProject] = {}
        self._roots: dict[str, str] = {}
        self._started: dict[str, set[str]] = {}  # a launcher (script, notebook, estimator's file) -> its programs
        self._texts: dict[str, str] = {}
        # Every input the model read beyond the targets' list (`inputs()`): the digest of each file's text, whether
        # each root marker exists, each folder's README; a run whose inputs are unchanged reuses the facts
        self._digests: dict[str, str | None] = {}
        self._markers: dict[str, bool] = {}
        self._readmes: dict[str, str | None] = {}
        self._readme_found: dict[str, tuple[bool, list[Evidence]]] = {}  # a README's, read once for its folder
        self._xla_by_folder: dict[str, tuple[str, ...]] = {}
        self._infra: dict[str, list[Evidence]] = {}
        self._listings: dict[str, list[str]] = {}  # folder -> its infrastructure files' names (`inputs()`)
        self._shells: dict[str, set[str]] = {}  # folder -> its launch scripts
        # folder -> (the shared helpers module, the scripts that import from it), or None (`_shared_helpers`)
        self._helper_folders: dict[str, tuple[str, frozenset[str]] | None] = {}
        self._build()

    # -- reading ---------------------------------------------------------------------------------------------
    def _root(self, folder: str) -> str:
        """The nearest folder at or above `folder` that holds a root marker or was given. With neither up to the
        filesystem's root, the nearest folder of a given file: `neuron-migrate check /tmp/job/train.py` reads
        `/tmp/job`, never the unrelated files one folder up in `/tmp`."""
        chain: list[str] = []
        root: str | None = None
        here = folder
        while here not in self._roots:
            chain.append(here)
            if any(self._exists(os.path.join(here, m)) for m in ROOT_MARKERS) or here in self.tops:
                root = here
                break
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
        else:
            root = self._roots[here]
        for i, step in enumerate(chain):
            self._roots[step] = root if root is not None else next(
                (up for up in chain[i:] if up in self._given_folders), step)
        return self._roots[folder]

    def _exists(self, path: str) -> bool:
        found = self._markers[path] = os.path.exists(path)
        return found

    def _text(self, full: str) -> str:
        if full not in self._texts:
            self._digests[full], self._texts[full] = _read(full)
        return self._texts[full]

    def inputs(self) -> dict:
        """What the model has read so far beyond the targets' list, for `unchanged` (JSON)."""
        return {"files": self._digests, "markers": self._markers, "readmes": self._readmes,
                "infrastructure": self._listings}

    def _build(self) -> None:
        code: list[tuple[Module, str]] = []
        for target in self.files:
            full = os.path.abspath(target.path)
            if target.kind in ("python", "notebook"):
                module = Module(target.path, full, self._root(os.path.dirname(full)))
                self.modules[full] = module
                code.append((module, target.kind))
            elif target.kind in ("shell", "dockerfile", "requirements", "pyproject"):
                self.others.setdefault(target.kind, []).append(full)
                if target.kind == "shell":
                    self._shells.setdefault(os.path.dirname(full), set()).add(full)
        for module, read, text in self._reader(code):
            self.modules[module.full] = module  # the reader's (a worker's copy) in the same place of the order
            self._digests[module.full], self._texts[module.full] = read, text
        self._resolve_imports()
        self._launches()
        self._make_programs()

    # -- the import graph ------------------------------------------------------------------------------------
    def _resolve_imports(self) -> None:
        self._stems = {os.path.splitext(full)[0] for full in self.modules}
        self._stems |= {os.path.dirname(full) for full in self.modules if full.endswith("__init__.py")}
        # every stem's last components (`b`, `a/b`, ... of `/p/a/b`): a dotted name none of them spells is no
        # module of the project from any folder (most imports: torch, numpy, transformers)
        self._tails = set()
        for stem in self._stems:
            parts = stem.split(os.sep)
            self._tails.update(os.sep.join(parts[i:]) for i in range(len(parts)))
        for module in self.modules.values():
            folder = os.path.dirname(module.full)
            for name, level in module.imports:
                if level:
                    base = folder
                    for _ in range(level - 1):
                        base = os.path.dirname(base)
                    found = self._find(name, (base,)) if name else None
                else:
                    if name.split(".")[0] in LEGACY_ROOTS:
                        continue
                    found = self._find(name, self._search_path(folder, module.root) + tuple(module.paths))
                if found is not None and found != module.full:
                    module.resolved.setdefault(("." * level) + name, found)
                    if found not in module.edges:
                        module.edges.add(found)
                        module.modules.append(("." * level) + name)
                        self.modules[found].importers.append(module.path)

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def _search_path(folder: str, root: str) -> tuple[str, ...]:
        return tuple(Project._folders_up(folder, root))

    @staticmethod
    def _folders_up(folder: str, root: str) -> list[str]:
        out = [folder]
        while folder != root and folder.startswith(root):
            folder = os.path.dirname(folder)
            out.append(folder)
        return out

    def _find(self, name: str, bases: Iterable[str]) -> str | None:
        parts = name.split(".")
        if all(parts) and os.sep.join(parts) not in self._tails:
            return None
        for base in bases:
            stem = os.path.join(base, *parts)
            if stem not in self._stems:
                continue
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                if candidate in self.modules:
                    return candidate
        return None

    # -- launches ----------------------------------------------------------------------------------------------
    def _launches(self) -> None:
        """Programs a launch script, a notebook or an estimator runs, with the evidence those carry."""
        for full in self.others.get("shell", ()):
            text = self._text(full)
            shown = self._shown(full)
            evidence = _launch_evidence(text, shown)
            flags = _launch_flags(_CONTINUED.sub(" ", text)) if "--" in text else {}
            for program in LAUNCHER.findall(text):
                self._launched(os.path.dirname(full), program, evidence, None, full, flags.get(program, ()))
        for module in list(self.modules.values()):
            folder = os.path.dirname(module.full)
            if module.runs:  # what the notebook says of itself, it says of the programs it runs
                # only the target its own path or text decides (prose naming several tells none here either)
                _, told, _ = _decide([e for e in [*self._path_evidence(module), *module.evidence]
                                      if e.level in (NAME, TEXT)])
                own = [Evidence(e.target, LAUNCH, e.place, f"{module.path} runs it ({e.what})") for e in told]
                for program in module.runs:
                    self._launched(folder, program, own, module, module.full, module.run_flags.get(program, ()))
            for entry, kind in module.estimators:
                m = INSTANCE_TYPE.search(kind)
                evidence = [Evidence(_INSTANCE_TARGET[m.group(1).lower()], LAUNCH, module.path,
                                     f"an estimator runs it on `{kind}`")] if m else []
                self._launched(folder, entry, evidence, None, module.full, module.estimator_flags.get(entry, ()))

    def _launched(self, folder: str, program: str, evidence: list[Evidence], launcher: Module | None,
                  started_by: str, flags: Iterable[str] = ()) -> None:
        """The program a launch line names (resolved from the launcher's folder up to its root) is an entry point,
        with the launcher's evidence; a notebook's program reaches it (its closure is the notebook's too). The
        optimum-neuron Neuron-only arguments among the flags it passes are the program's (`neuron_flags`)."""
        name = program if program.endswith(".py") else program + ".py"
        for base in self._search_path(folder, self._root(folder)):
            full = os.path.normpath(os.path.join(base, name))
            module = self.modules.get(full)
            if module is not None:
                module.entry = True
                module.evidence.extend(evidence)
                for flag in sorted(set(flags) & _neuron_only_arguments()):
                    module.neuron_flags.setdefault(flag, self._shown(started_by))
                self._started.setdefault(started_by, set()).add(full)
                if launcher is not None:
                    launcher.launches.add(full)
                return

    # -- programs and their targets ----------------------------------------------------------------------------
    def _shown(self, full: str) -> str:
        rel = os.path.relpath(full)
        return full if rel.startswith("..") else rel

    def _make_programs(self) -> None:
        reached_by: dict[str, list[Program]] = {}
        reach = {m.full: self._reach(m) for m in self.modules.values() if m.entry}
        reached = {f.full for files in reach.values() for f in files}
        for module in self.modules.values():
            # an entry point; or a script no program imports (a tutorial's top-level code, run cell by cell) that
            # says where it runs or runs torch_xla at its top level (`python train.py` with no `__main__` block)
            if not module.entry and (module.full in reached or not (module.evidence or module.legacy_top)):
                continue
            files = reach.get(module.full) or self._reach(module)
            evidence = self._evidence(module)
            target, strongest, conflict = _decide(evidence)
            if target == INF2 and any(e.target == TRN1 for e in strongest) and self._trains(files):
                target = TRN1  # Inf2 and Trn1 named together: a training program is Trn1's (Inf2 serves models)
            if target in (INF2, TRN1) and self.native_instance:
                # the native backend runs on Trn2 / Trn3 only: an Inf2 or Trn1 program, training or inference, keeps
                # the XLA stack (in maintenance there) unless the user says the job goes to Trn2 / Trn3
                target = None
            # a script's own torch_xla import makes its program XLA, whatever its scope (`_mp_fn` imports it
            # inside); a module it imports does when it imports torch_xla outside any function
            moving = target not in SET_ASIDE and any(f.legacy_top or (f.legacy and f.entry) for f in files)
            self.programs.append(Program(module, files, target, strongest, conflict, moving))
        self._families(reached)
        for program in self.programs:
            for f in program.files:
                reached_by.setdefault(f.full, []).append(program)
        for full, module in self.modules.items():
            programs = reached_by.get(full, [])
            own = [p for p in programs if p.entry is module]
            self.facts[module.path] = self._file_facts(module, own or programs)

    def _families(self, reached: set[str]) -> None:
        """One folder of one sample is one program unless the evidence says otherwise: a program with no target of
        its own takes the Inf1 / Inf2 / Trn1 / TPU target of a sibling set aside by where it runs (a path, its
        prose, its launcher, its folder; not a TPU-only feature of its own code, nor its own name: `train_tpu.py`
        says that `train.py` beside it is the other variant) when the two are one family: one's
        name extends the other's (`train.py`, `train_torchrun.py`, `train_xmp.py`), they import a module of the
        project in common, or the set-aside one is a notebook (a converter script beside Trn1 notebooks). A script
        of the folder that no program runs or imports (a `build.py` that compiles the sample's custom op) joins it
        as a program. Siblings set aside on different targets, or one that moves by its own evidence, tell none."""
        by_folder: dict[str, list[Program]] = {}
        for program in self.programs:
            by_folder.setdefault(os.path.dirname(program.entry.full), []).append(program)
        known = {p.entry.full for p in self.programs}
        for module in self.modules.values():  # the folder's loose legacy scripts
            if module.legacy and module.full not in known and module.full not in reached:
                folder = os.path.dirname(module.full)
                if folder in by_folder:
                    by_folder[folder].append(Program(module, self._reach(module), None, [], [], False))
        for programs in by_folder.values():
            aside = [p for p in programs if p.target in SET_ASIDE and not p.conflict
                     and any(_of_the_sample(e) for e in p.evidence)]
            if not aside or {p.target for p in aside} != {aside[0].target} or any(
                    p.target is not None and p.target not in SET_ASIDE for p in programs):
                continue
            for program in programs:
                if program.target is not None or program.conflict:
                    continue
                closeness, sibling = max(((self._one_family(program, p), p) for p in aside if p.entry.entry),
                                         key=lambda pair: pair[0], default=(0, None))
                if not closeness or sibling is None:
                    continue
                told = next(e for e in sibling.evidence if _of_the_sample(e))
                program.target, program.moving = sibling.target, False
                whose = "" if told.place.split(":")[0] == sibling.entry.path else f", for {sibling.entry.path}"
                program.evidence = [Evidence(sibling.target, FOLDER, told.place,
                                             f"{told.what}{whose} (a script of the same sample)")]
                if program.entry.full not in known:  # a loose script joins as a program
                    self.programs.append(program)

    @staticmethod
    def _one_family(program: Program, sibling: Program) -> int:
        """How closely two programs of one folder are one sample, 0 when they are not: one's name extends the
        other's (3), they import a project module in common (2), the sibling is a notebook or the program a loose
        script (1). The closest set-aside sibling is the one named in the evidence."""
        stems = [os.path.splitext(os.path.basename(p.entry.full))[0] for p in (program, sibling)]
        if any(a != b and a.startswith(b + "_") for a, b in (stems, stems[::-1])):
            return 3
        if program.entry.edges & sibling.entry.edges:
            return 2
        return int(sibling.entry.full.endswith(".ipynb") or not program.entry.entry)

    def _reach(self, entry: Module) -> list[Module]:
        seen = {entry.full}
        order = [entry]
        for module in order:
            for other in sorted(module.edges | module.launches):
                if other not in seen:
                    seen.add(other)
                    order.append(self.modules[other])
        return order

    def _evidence(self, module: Module) -> list[Evidence]:
        out: list[Evidence] = []
        config = self._config_target(module.full)
        if config is not None:
            out.append(config)
        out += self._path_evidence(module)
        out += module.evidence
        out += self._folder_evidence(module)
        return out

    def _config_target(self, full: str) -> Evidence | None:
        best = None
        for prefix, target in self.config_targets:
            if full == prefix or full.startswith(prefix.rstrip("/") + "/"):
                if best is None or len(prefix) > len(best[0]):
                    best = (prefix, target)
        if best is None:
            return None
        return Evidence(_INSTANCE_TARGET.get(best[1], best[1]), CONFIG, "[tool.neuron-migrate] targets",
                        f"`{best[0]}` = \"{best[1]}\"")

    def _path_evidence(self, module: Module) -> list[Evidence]:
        rel = os.path.relpath(module.full, module.root)
        found: dict[str, str] = {}
        for part in rel.split(os.sep):
            for word in _WORD.findall(part):
                target = _NAME_WORDS.get(word.lower())
                if target is not None:
                    found.setdefault(target, word)
        return [Evidence(target, NAME, module.path, f"its path says `{word}`") for target, word in found.items()]

    def _folder_evidence(self, module: Module) -> list[Evidence]:
        """Requirements, Dockerfiles and READMEs of the program's folder and of the folders above, up to its root."""
        out: list[Evidence] = []
        folders = self._search_path(os.path.dirname(module.full), module.root)
        for kind, reader in (("requirements", _requirements_evidence), ("dockerfile", _dockerfile_evidence),
                             ("pyproject", _pyproject_evidence)):
            for full in self.others.get(kind, ()):
                if os.path.dirname(full) in folders:
                    out += reader(self._text(full), self._shown(full))
        out += self._readme_above(folders)
        out += self._infra_above(folders)
        return out

    def _readme_above(self, folders: tuple[str, ...]) -> list[Evidence]:
        """The nearest README that names hardware, in the program's folder or the one above (within its root): a
        sample's folder often has none, and the README of the samples' folder says where they run ("run on
        trn1.32xlarge"). One that names Trn2 / Trn3, or several targets, ends the search with no evidence. A README
        further up speaks of a whole repository (a library's "runs on TPU VMs and GPUs"), not of one program; and
        the one above names TPU for the folder's scripts only in the folder's own README: one up, TPU is what
        torch_xla's own repository says of itself ("PyTorch/XLA connects PyTorch and Cloud TPUs"), over examples
        written for every XLA device, where a Neuron samples folder's README names its instances."""
        for depth, folder in enumerate(folders[:README_REACH]):
            if folder not in self._readmes:
                self._readmes[folder] = readme(folder)
            name = self._readmes[folder]
            if name is None:
                continue
            full = os.path.join(folder, name)
            if full not in self._readme_found:
                self._readme_found[full] = _readme_evidence(self._text(full), self._shown(full))
            named, evidence = self._readme_found[full]
            if depth and any(e.target == TPU for e in evidence):
                continue
            if named:
                return evidence
        return []

    def _infra_above(self, folders: tuple[str, ...]) -> list[Evidence]:
        """The instance types that the infrastructure files of the nearest folder (the program's or the one above,
        within its root) that has any name: Terraform, CloudFormation, a job queue's or job definition's YAML /
        JSON, a userdata or launch script. They say where the jobs that run the folder's scripts go."""
        for folder in folders[:README_REACH]:
            if folder not in self._infra:
                self._infra[folder] = self._read_infra(folder)
            if self._infra[folder]:
                return self._infra[folder]
        return []

    def _read_infra(self, folder: str) -> list[Evidence]:
        names = self._listings[folder] = infrastructure(folder)
        found: dict[str, Evidence] = {}
        for full in sorted(self._shells.get(folder, set()) | {os.path.join(folder, n) for n in names}):
            text = self._text(full)
            if not INSTANCE_TYPE.search(text):
                continue
            named: dict[str, Evidence] = {}
            for m in _KEYED_INSTANCE.finditer(text):
                start = text.rfind("\n", 0, m.start()) + 1
                if text[start:m.start()].lstrip().startswith("#"):
                    continue  # a commented-out key: `# InstanceType: trn1.32xlarge`, `# aws ... --instance-type`
                target = _INSTANCE_TARGET[m.group(1).lower()]
                value = text[m.start(1):m.end()]
                named.setdefault(target, Evidence(target, FOLDER, f"{self._shown(full)}:"
                                                  f"{text.count(chr(10), 0, m.start(1)) + 1}",
                                                  f"its infrastructure names `{value}`"))
            if len(named) == 1:  # a file that names several targets (a stack for every family) tells none
                found.setdefault(*named.popitem())
        return list(found.values())

    def _file_facts(self, module: Module, programs: list[Program]) -> FileProject:
        targets = {p.target for p in programs if p.target is not None}
        # a helper moves with its programs when every program that reaches it moves (one also used by a GPU
        # program stays as it is: its CUDA calls serve that one)
        moving = next((p.entry.path for p in programs if p.moving), None) if all(
            p.moving or p.target in SET_ASIDE for p in programs) else None
        conflict: list[str] = []
        evidence: list[str] = []
        target = None
        for p in programs:
            conflict += [e.text() for e in p.conflict]
        aside = [p for p in programs if p.target in SET_ASIDE]
        if aside and moving is not None:  # shared by a program set aside and one that moves: neither is guessed
            conflict += [f"{p.entry.path} runs on {NAMES[p.target]} ({p.evidence[0].text()})" for p in aside]
            conflict += [f"{p.entry.path} moves to neuron" for p in programs if p.moving]
        elif len(targets) == 1:
            target = targets.pop()
            evidence = [e.text() for p in programs if p.target == target for e in p.evidence]
        elif targets:
            aside = targets & SET_ASIDE
            if aside and (targets - aside or moving):
                conflict += [f"{p.entry.path} runs on {NAMES[p.target]} ({p.evidence[0].text()})"
                             for p in programs if p.target is not None]
            elif aside:  # several set-aside targets (a TPU script and an Inf2 notebook share a helper)
                target = sorted(aside)[0]
                evidence = [e.text() for p in programs for e in p.evidence]
        if target in SET_ASIDE and moving is not None and not conflict:
            moving = None
        held = target in SET_ASIDE or bool(conflict)
        # who is told: a file with legacy code whose evidence conflicts (NM522 marks each), and a program set aside
        # at its entry (one NM521 for the program, when any of its files has legacy code)
        told = held and (module.legacy if conflict else any(
            p.entry is module and any(f.legacy for f in p.files) for p in programs))
        text = self._text(module.full)
        # the torch.cuda names a module of the file's programs (else of its root) redefines at import time, for a
        # file that names cuda
        patched = self._cuda_patched(module, programs) if "cuda" in text else ()
        # the Neuron-only training arguments launchers pass, told only to a file that imports optimum-neuron (NM508)
        flags = tuple(sorted({f"{flag}:{launcher}" for p in programs for flag, launcher in p.entry.neuron_flags.items()
                              })) if any(name.startswith("optimum.neuron") for name, _ in module.imports) else ()
        # only what the file's decisions read: a cache key changes with these facts and no others
        sets_env = self._bf16_set_elsewhere(module, programs) if "_BF16" in text else ()
        group = next((self._shown(f.full) for p in programs if p.entry is module for f in p.files
                      if f is not module and "init_process_group(" in self._text(f.full)), None) \
            if module.entry and "spawn" in text else None
        shared = self._rate_tracker_from(module, programs) if moving and "RateTracker" in text else None
        helpers = self._shared_helpers(module) if moving and uses_helpers(text) else None
        compiled = tuple(sorted({attr for edge in module.edges if edge in self.modules
                                 for attr in self.modules[edge].compiled_steps})) if "eager_mode" in text else ()
        return FileProject(target if held else None, tuple(dict.fromkeys(evidence)) if held else (),
                           tuple(dict.fromkeys(conflict)), moving, module.importers[0] if module.importers else None,
                           tuple(module.modules), None, told, module.entry,
                           *(self._launch_facts(module.full) if module.sets_environment and not held else (None, ())),
                           cuda_patched=patched, neuron_flags=flags,
                           sets_env=sets_env, group_elsewhere=group, rate_tracker_from=shared,
                           shared_helpers=helpers,
                           base_compiled=compiled)

    def _rate_tracker_from(self, module: Module, programs: list[Program]) -> str | None:
        """The project module (dotted, as this file imports it) that defines the RateTracker class NM244 writes for
        `xm.RateTracker()`, or gets it in this run: a module of the same moving programs whose only uses of the name
        are `xm.RateTracker()` calls without arguments (torch_xla imported at its top, no `noqa` on those lines), or
        that defines `class RateTracker` at its top (migrated before). The file imports it from there instead of
        writing a second copy."""
        files = {f.full for p in programs if p.moving for f in p.files}
        for dotted, full in sorted(module.resolved.items()):
            if full not in files or dotted.startswith("."):
                continue
            text = self._text(full)
            if _RATE_TRACKER_CLASS.search(text) and RATE_TRACKER_DOC in text:  # NM244's, not a class of that name
                return dotted
            calls = _RATE_TRACKER_CALL.findall(text)
            if self.modules[full].legacy_top and "xla_model" in text and calls \
                    and len(calls) == text.count("RateTracker") and not any("noqa" in line for line in calls):
                return dotted
        return None

    def _shared_helpers(self, module: Module) -> str | None:
        """The module of the file's folder that holds NM244's helpers (RateTracker, the summary writer's) for the
        folder's scripts, written by this run (engine/shared.py), where two or more scripts of that folder each
        would get copies: the folder's files that only moving programs started there reach, in a folder that is no
        package (each script runs with its folder first on the import path, so a bare `from training_progress
        import ...` finds it) and that the run was given (a run on named files writes no file beside them). A
        file of that name that this tool did not write keeps every script on copies of its own."""
        folder = os.path.dirname(module.full)
        if folder not in self._helper_folders:
            self._helper_folders[folder] = self._helpers_module(folder)
        found = self._helper_folders[folder]
        return found[0] if found is not None and module.full in found[1] else None

    def _helpers_module(self, folder: str) -> tuple[str, frozenset[str]] | None:
        reaching: dict[str, list[Program]] = {}
        for p in self.programs:
            for f in p.files:
                if os.path.dirname(f.full) == folder and f.full.endswith(".py"):
                    reaching.setdefault(f.full, []).append(p)
        # the modules of the folder only its own moving scripts run (a base class the scripts import by its bare
        # name, as they would import the new module)
        scripts = frozenset(full for full, programs in reaching.items() if uses_helpers(self._text(full))
                            and all(p.moving and os.path.dirname(p.entry.full) == folder for p in programs))
        given = any(folder == top or folder.startswith(top.rstrip(os.sep) + os.sep)
                    for top in self.tops if os.path.isdir(top))
        if not scripts or not given or self._exists(os.path.join(folder, "__init__.py")) \
                or self._exists(os.path.join(folder, HELPERS_MODULE)):
            return None
        # the scripts run with their folder first on the import path, and the folder ships whole: each imports a
        # module of the folder by its bare name already (`import args_parse`), which would fail as well were it run
        # as `python -m pkg.script`, loaded from elsewhere, or uploaded or copied alone
        for full in scripts:
            module = self.modules[full]
            if module.entry and not any(os.path.dirname(target) == folder and "." not in dotted and target != full
                                        for dotted, target in module.resolved.items()) \
                    and not any(os.path.dirname(os.path.abspath(i)) == folder for i in module.importers):
                return None  # (or a sibling imports it so: a trainer base that runs on its own too)
        # another module of that name the scripts could import (one they import already, one in a folder they add
        # to the import path), or a list of what ships that names the scripts (a Dockerfile's COPY, setup.py's
        # py_modules, a MANIFEST.in): the new module would be shadowed, shadow it, or be left behind
        path = os.path.join(folder, f"{HELPERS_MODULE}.py")
        members = [self.modules[full] for full in scripts]
        if any(level == 0 and name.split(".")[0] == HELPERS_MODULE and m.resolved.get(name) != path
               for m in members for name, level in m.imports) \
                or any(self._exists(os.path.join(added, f"{HELPERS_MODULE}.py"))
                       or self._exists(os.path.join(added, HELPERS_MODULE)) for m in members for added in m.paths):
            return None
        stems = [os.path.splitext(os.path.basename(full))[0] for full in scripts]
        for place in self._folders_up(folder, self._root(folder)):
            for name in _SHIPPING:
                listing = os.path.join(place, name)
                if self._exists(listing) and any(re.search(rf"\b{re.escape(stem)}\b", self._text(listing))
                                                 for stem in stems):
                    return None
        ours = False
        if self._exists(path) or os.path.islink(path):
            if not (os.path.isfile(path) and not os.path.islink(path)
                    and self._text(path).startswith(HELPERS_HEADER)):
                return None
            ours = True
        # scripts an earlier run (a shard before this one) moved onto the module count as its importers
        importers = {full for full in reaching if HELPERS_IMPORT.search(self._text(full))} if ours else set()
        return (HELPERS_MODULE, scripts) if len(scripts | importers) >= 2 else None

    def _cuda_patched(self, module: Module, programs: list[Program]) -> tuple[str, ...]:
        modules = {f.full: f for p in programs for f in p.files} if programs else {
            m.full: m for m in self.modules.values() if m.root == module.root}
        return tuple(sorted({name for m in modules.values() for name in m.cuda_patches}))

    def _bf16_set_elsewhere(self, module: Module, programs: list[Program]) -> tuple[str, ...]:
        """The bfloat16 switches that another file of the module's programs turns on: the scripts and notebooks
        that launch a program, the Dockerfiles of its folders, its other Python files (NM403 marks each there)."""
        places: set[str] = set()
        for p in programs:
            places |= {launcher for launcher, started in self._started.items() if p.entry.full in started}
            places |= {f.full for f in p.files}
            folders = self._search_path(os.path.dirname(p.entry.full), p.entry.root)
            places |= {full for full in self.others.get("dockerfile", ()) if os.path.dirname(full) in folders}
        places.discard(module.full)  # the file's own settings: the rule sees them
        found: set[str] = set()
        for full in sorted(places):
            text = self._text(full)
            if "_BF16" not in text:
                continue
            for line in text.splitlines():
                if not line.lstrip().startswith("#"):
                    found.update(m.group(1) for m in _SETS_BF16.finditer(line) if m.group(2) not in _OFF)
        return tuple(sorted(found))

    def _launch_facts(self, full: str) -> tuple[str | None, tuple[str, ...]]:
        """A moving program whose environment the file sets up, and the programs it launches that stay (an
        estimator's model served elsewhere: its container is not the moving program's)."""
        folder = os.path.dirname(full)
        staying = tuple(sorted(os.path.relpath(p.entry.full, folder) for p in self.programs
                               if not p.moving and p.entry.full in self._started.get(full, ())))
        return self._launches_moving(full), staying

    def _launches_moving(self, full: str) -> str | None:
        """A program moving to neuron whose environment the file at `full` sets up: among the programs it launches
        (a launch script's `torchrun train.py`, an estimator's `entry_point`) when it launches any, else among the
        programs of its project root. The program is named from the file's folder (`train.py`, `../train.py`)."""
        started = self._started.get(full)
        folder = os.path.dirname(full)
        root = self._root(folder)
        return next((os.path.relpath(p.entry.full, folder) for p in sorted(self.programs, key=lambda p: p.entry.path)
                     if p.moving and (p.entry.full in started if started else p.entry.root == root)), None)

    def _bf16_option(self, full: str) -> str | None:
        """The bfloat16 option (`--bf16`, a `store_true` flag of argparse) that every program the launch script at
        `full` starts defines in one of its files, when each of them moves to neuron and none reads torch_xla's
        bfloat16 switches (a program that reads `XLA_USE_BF16` decides with it; the launch keeps the setting)."""
        started = self._started.get(full, set())
        names = set(LAUNCHER.findall(self._text(full)))
        programs = [p for p in self.programs if p.entry.full in started]
        if not programs or len(programs) != len(names) or not all(p.moving for p in programs):
            return None
        options = set()
        for program in programs:
            texts = [self._text(f.full) for f in program.files]
            if any(switch in text for text in texts for switch in BF16_SWITCHES):
                return None
            found = {m.group(2) for text in texts if "bf16" in text for m in _BF16_OPTION.finditer(text)}
            if len(found) != 1:
                return None
            options |= found
        return options.pop() if len(options) == 1 else None

    # -- what the run asks -------------------------------------------------------------------------------------
    def _trains(self, files: Iterable[Module]) -> bool:
        """Whether a program's files train a model (a backward pass, an optimizer step)."""
        return any(_trains(self._text(f.full)) for f in files)

    def _installs_for_held(self, full: str) -> FileProject | None:
        """A requirements file, pyproject, Dockerfile or launch script whose programs (those it launches, else those
        of its folder and below, else of the nearest folder above within its root that has any: `infra/userdata.sh`
        sets up the instance that runs `examples/train.py`) are all set aside: what it installs is their XLA stack,
        left as it is."""
        started = self._started.get(full)
        programs = [p for p in self.programs if started and p.entry.full in started and any(f.legacy for f in p.files)]
        folder = os.path.dirname(full)
        for scope in () if started else self._folders_up(folder, self._root(folder)):
            prefix = scope.rstrip(os.sep) + os.sep
            programs = [p for p in self.programs if p.entry.full.startswith(prefix) and any(f.legacy for f in p.files)]
            if programs:
                break
        if not programs or any(p.target not in SET_ASIDE or p.conflict for p in programs):
            return None
        target = sorted({p.target for p in programs})[0]
        evidence = [f"{p.entry.path} ({e.text()})" for p in programs if p.target == target for e in p.evidence[:1]]
        return FileProject(target, tuple(evidence[:2]))

    def of(self, path: str, kind: str) -> FileProject | None:
        facts = self._of(path, kind)
        if kind == "shell" and (facts is None or not facts.set_aside) and "BF16" in self._text(os.path.abspath(path)):
            option = self._bf16_option(os.path.abspath(path))
            if option is not None:
                facts = replace(facts or FileProject(), bf16_option=option)
        if kind in ENVIRONMENT_KINDS:
            beside = self._xla_installs(os.path.dirname(os.path.abspath(path)))
            if beside:
                return replace(facts or FileProject(), xla_beside=beside)
        return facts

    def _xla_installs(self, folder: str) -> tuple[str, ...]:
        """The installs of a library built on torch_xla (optimum-neuron, neuronx-distributed, ...) in the requirements
        files, notebooks and shell scripts of a folder: one environment, which keeps the XLA stack while one stays.
        Each as "`requirement` (file name)"."""
        if folder in self._xla_by_folder:
            return self._xla_by_folder[folder]
        from neuron_migrate.engine.discover import kind_of
        from neuron_migrate.pin.plan import parse, xla_libraries  # the pin package is only needed here

        libraries = xla_libraries()
        # the folder's files, named in the run or not (`pin notebook.ipynb` beside its requirements.txt): each one
        # found is an input of the model (a cached model is reused only while they read the same)
        try:
            names = sorted(e.name for e in os.scandir(folder) if e.is_file())
        except OSError:
            names = []
        files = {os.path.join(folder, n): kind for n in names if (kind := kind_of(n)) in ENVIRONMENT_KINDS}
        found: list[str] = []
        for full, kind in files.items():
            self._markers[full] = True
            text = self._text(full)
            if not any(name in text for name in libraries):
                continue
            for requirement in _installed(text, kind, kind == "notebook"):
                req = parse(requirement)
                if req is not None and req.name in libraries:
                    found.append(f"`{requirement}` ({os.path.basename(full)})")
        out = self._xla_by_folder[folder] = tuple(dict.fromkeys(found))
        return out

    def _of(self, path: str, kind: str) -> FileProject | None:
        facts = self.facts.get(path)
        if facts is None and kind in INSTALL_KINDS:
            held = self._installs_for_held(os.path.abspath(path))
            if held is not None:
                return held
        if facts is None and kind in ("shell", "dockerfile"):  # the DLAMI venv it activates is a moving program's
            full = os.path.abspath(path)
            moving = self._launches_moving(full) if "aws_neuronx_venv" in self._text(full) else None
            return FileProject(launches_moving=moving) if moving else None
        if facts is None and kind == "accelerate-config":  # the project's Neuron installs speak for it
            folder = os.path.dirname(os.path.abspath(path))
            probe = Module(path, os.path.join(folder, "_"), self._root(folder))
            neuron = next((e.text() for e in self._folder_evidence(probe) if e.target == NEURON), None)
            return FileProject(neuron_project=neuron) if neuron else None
        return None if facts is None or facts == FileProject() else facts

    def report(self) -> str:
        """The programs, their files and targets with the evidence (`check --show-project`)."""
        lines = []
        for program in sorted(self.programs, key=lambda p: p.entry.path):
            target = NAMES.get(program.target, "unknown") if program.target else "unknown"
            legacy = any(f.legacy for f in program.files)
            state = "conflicting evidence" if program.conflict else "no legacy code" if not legacy else (
                "set aside" if program.target in SET_ASIDE else "moves to neuron")
            lines.append(f"{program.entry.path}: target {target} ({state})")
            for e in program.evidence:
                lines.append(f"    evidence [{LEVELS[e.level]}] {e.text()}")
            for e in program.conflict:
                lines.append(f"    conflict [{LEVELS[e.level]}] {NAMES[e.target]}: {e.text()}")
            for f in program.files[1:]:
                lines.append(f"    reaches {f.path}")
        return "\n".join(lines)


def _read(full: str) -> tuple[str | None, str]:
    """The digest of a file the model reads (None when it cannot be read) and its text."""
    data = head(full)
    return (None, "") if data is None else (digest(data), data.decode("utf-8", "replace"))


def read_modules(code: list[tuple[Module, str]]) -> list[tuple[Module, str | None, str]]:
    """Each Python file or notebook of `code` ((module, kind)) read into its module, with its digest and text."""
    out = []
    for module, kind in code:
        read, text = _read(module.full)
        read_module(module, kind, text)
        out.append((module, read, text))
    return out


def read_module(module: Module, kind: str, text: str) -> None:
    """What the model reads of one Python file or notebook of `text`, into `module`."""
    shown = module.path
    if kind == "notebook":
        code, prose = _notebook_text(text, module)
        module.entry = True
    else:
        code, prose = [text], _comments(text)
    for part in code:
        _read_code(module, part)
        if "sys.path" in part:
            module.paths += [p for p in _sys_path_additions(part, module.full) if p not in module.paths]
    if any("entry_point" in part or "entrypoint" in part for part in code):
        # an estimator (SageMaker's `entry_point=`, Metaflow's `current.torch.run(entrypoint=...)`): its keywords
        # are read from Python's tree
        trees = []
        for part in code:
            try:
                trees.append(ast.parse(part))
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
        names = _string_constants(trees)
        dicts = _dict_keys(trees)
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and node.keywords:
                    _estimator(module, node, names, dicts)
    # the file's own text: prose (comments, docstrings, markdown) naming the hardware, code setting PJRT_DEVICE
    joined = "\n".join(code)
    # ... or a notebook activates a DLAMI venv (`!source /opt/aws_neuronx_venv_.../bin/activate`, a `%%bash` cell)
    module.sets_environment = (any(word in joined for word in _ENVIRONMENT_WORDS)
                               and _SETS_ENVIRONMENT.search(joined) is not None) or (
        kind == "notebook" and "aws_neuronx_venv" in text and LEGACY_VENV.search(text) is not None)
    if "PJRT_DEVICE" in joined and PJRT_TPU.search(joined) and not PJRT_NEURON.search(joined):
        module.evidence.append(Evidence(TPU, TEXT, shown, "sets `PJRT_DEVICE=TPU`"))
    tpu_only = next((f"imports `{name}`, {why}" for name, _ in module.imports
                     for prefix, why in TPU_ONLY_MODULES if name == prefix or name.startswith(prefix + ".")), None)
    if tpu_only is None and "TPU" in joined:
        tpu_only = _tpu_gate(code)
    if tpu_only is not None:
        module.evidence.append(Evidence(TPU, TEXT, shown, tpu_only, feature=True))
    m = TPU_PROSE.search(prose) if "TPU" in prose or "tpu" in prose else None
    if m:
        module.evidence.append(Evidence(TPU, TEXT, shown, f"names `{m.group(0).strip()}`"))
    named: dict[str, str] = {}
    for m in _PROSE_INSTANCE.finditer(prose) if _HARDWARE_LETTERS.search(prose) else ():
        target, words = _prose_target(m)
        if target is not None:
            named.setdefault(target, words)
    module.evidence += [Evidence(target, TEXT, shown, f"names `{kind}`") for target, kind in named.items()]


def _estimator(module: Module, node: ast.Call, names: dict[str, str], dicts: dict[str, set[str]]) -> None:
    """A SageMaker estimator (or any call) with `entry_point="x.py"` (Metaflow: `entrypoint=`), and its
    `instance_type="ml.inf2..."` when it spells one, or names a variable the file sets to one once
    (`instance_type = "ml.trn1.32xlarge"`) (the program it runs is an entry point either way; the instance is
    evidence of its target). The names of the arguments it passes the program (`hyperparameters=` /
    `entrypoint_args=`, a dict literal or a name the file sets to one) are kept for `_launched`."""
    words = {k.arg: k.value.value if isinstance(k.value, ast.Constant) else names.get(k.value.id)
             for k in node.keywords if k.arg and (isinstance(k.value, ast.Constant) and isinstance(
                 k.value.value, str) or isinstance(k.value, ast.Name) and k.value.id in names)}
    kind = words.get("instance_type", "")
    entry = words.get("entry_point") or words.get("entrypoint")
    if entry:
        source = words.get("source_dir")
        entry = os.path.join(source, entry) if source else entry
        module.estimators.append((entry, kind if INSTANCE_TYPE.search(kind) else ""))
        for k in node.keywords:
            if k.arg in _ARGUMENT_KEYWORDS:
                value = k.value
                keys = _literal_keys(value) if isinstance(value, ast.Dict) else \
                    dicts.get(value.id, set()) if isinstance(value, ast.Name) else set()
                module.estimator_flags.setdefault(entry, set()).update(keys)


def _installed(text: str, kind: str, notebook: bool) -> list[str]:
    """The requirement texts a requirements file lists, or the `pip install` lines of a script or notebook name
    (options and their values are skipped; what is not a requirement does not parse as one)."""
    if notebook:
        try:
            cells = json.loads(text).get("cells") or []
            text = "\n".join("".join(c.get("source") or ()) if isinstance(c.get("source"), list)
                             else str(c.get("source") or "") for c in cells if c.get("cell_type") == "code")
        except (ValueError, AttributeError, TypeError):
            return []
    out: list[str] = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if kind == "requirements":
            if line and not line.startswith(("#", "-")):
                out.append(line)
            continue
        m = _PIP_INSTALL.search(line)
        if m is None:
            continue
        words = m.group(1).split()
        skip = False
        for word in words:
            if skip or word.startswith("-"):
                skip = word in _OPTIONS_WITH_VALUE
                continue
            out.append(word.strip("\"'"))
    return out


def _string_constants(trees: list[ast.Module]) -> dict[str, str]:
    """The module-level names a file (a notebook's cells in turn) sets to one string literal, and never to another
    value."""
    found: dict[str, str | None] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
                text = value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
                found[name] = text if found.get(name, text) == text else None
    return {name: text for name, text in found.items() if text is not None}


def _decide(evidence: list[Evidence]) -> tuple[str | None, list[Evidence], list[Evidence]]:
    """The target the strongest level of evidence names; two targets named by a configuration, a path or a launch
    are a conflict (prose or folder files naming several tell none: the next level decides). GPU evidence never
    decides against Neuron's: a GPU project that names Trn1 in its docs has no legacy code to move. A torch-neuronx
    install names no instance: beside an Inf2 or Trn1 one, it is that instance's XLA stack; prose naming Inf1 beside
    a newer instance speaks of the older product."""
    for level in range(FOLDER + 1):
        here = [e for e in evidence if e.level == level and e.target != GPU]
        if any(e.target in (INF2, TRN1) for e in here):  # a torch-neuronx install beside an Inf2 / Trn1 instance
            here = [e for e in here if not e.package]
        if level == TEXT and any(e.target in (INF2, TRN1, NEURON) for e in here):
            # prose that names Inf1 beside a newer instance tells its history ("Trainium, the successor of
            # Inferentia (inf1)"): Inf1 is another product (torch-neuron), not where this code runs
            here = [e for e in here if e.target != INF1]
        if not here:
            continue
        targets = {e.target for e in here}
        if len(targets) == 1 or targets <= {INF2, TRN1}:  # Inf2 and Trn1 both keep the maintained XLA path
            target = INF2 if INF2 in targets else targets.pop()
            return target, [e for e in here], []
        if level in (TEXT, FOLDER):
            continue  # prose that names several targets ("runs on Inf2 and Trn2") tells none of them
        return None, [], here
    return None, [], []


def _of_the_sample(evidence: Evidence) -> bool:
    """Evidence that tells where a sample runs, not what one script of it is (`Project._families`)."""
    return not evidence.feature and evidence.level != NAME


def _tpu_gate(code: list[str]) -> str | None:
    """A program that stops unless torch_xla's device is a TPU: it prints "Only TPU supported ...", or an
    `if <x> == 'TPU':` whose other branch (`!=`: whose body) ends by raising or exiting, in a file that asks
    `xla_device_hw`."""
    for part in code:
        m = _TPU_ONLY_MESSAGE.search(part)
        if m:
            return f"stops unless it runs on TPU ({m.group(0)})"
        if "xla_device_hw" not in part:
            continue
        try:
            tree = ast.parse(part)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1):
                continue
            test = node.test
            sides = (test.left, *test.comparators)
            if not any(isinstance(side, ast.Constant) and side.value == "TPU" for side in sides):
                continue
            other = node.orelse if isinstance(test.ops[0], ast.Eq) else node.body if isinstance(
                test.ops[0], ast.NotEq) else []
            if other and _stops(other[-1]):
                return f"stops unless it runs on TPU (line {node.lineno}: `{ast.unparse(test)}`)"
    return None


def _stops(statement: ast.stmt) -> bool:
    """`raise ...`, `sys.exit(1)`, `exit()`, `os._exit(1)`."""
    if isinstance(statement, ast.Raise):
        return True
    if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)):
        return False
    func = statement.value.func
    return (func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "") in _EXITS


# `sys.path.insert(0, ...)`, `sys.path.append(...)`, `site.addsitedir(...)`: one statement of one line
_SYS_PATH = re.compile(r"^[ \t]*(?:sys\.path\.(?:insert|append)|site\.addsitedir)\([^\n]*", re.M)


def _sys_path_additions(code: str, full: str) -> list[str]:
    """The folders a file adds to `sys.path` by a literal (relative to the file's folder: scripts are run from
    there) or from `__file__` (`os.path.join(os.path.dirname(__file__), "..")`, `Path(__file__).parent.parent`)."""
    out = []
    for m in _SYS_PATH.finditer(code):
        try:
            call = ast.parse(m.group(0).strip()).body[0].value
        except (SyntaxError, ValueError, IndexError, AttributeError, RecursionError):
            continue
        if not isinstance(call, ast.Call) or not call.args:
            continue
        folder = _path_value(call.args[-1], full)
        if folder is not None:
            out.append(os.path.normpath(os.path.join(os.path.dirname(full), folder)))
    return out


def _path_value(node: ast.expr, full: str) -> str | None:
    """The path an expression of `os.path` / `pathlib` calls on literals and `__file__` names; None when it
    depends on anything else (the working folder, a variable)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return full if node.id == "__file__" else None
    if isinstance(node, ast.Attribute) and node.attr == "parent":  # Path(...).parent
        inner = _path_value(node.value, full)
        return os.path.dirname(os.path.normpath(inner)) if inner is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # Path(...) / "lib"
        left, right = _path_value(node.left, full), _path_value(node.right, full)
        return os.path.join(left, right) if left is not None and right is not None else None
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name in ("resolve", "absolute") and isinstance(func, ast.Attribute) and not node.args:  # Path(...).resolve()
        return _path_value(func.value, full)
    values = [_path_value(a, full) for a in node.args]
    if not values or None in values or node.keywords:
        return None
    if name == "join":
        return os.path.join(*values)
    if name == "dirname" and len(values) == 1:
        return os.path.dirname(os.path.normpath(values[0]))
    if name in ("abspath", "realpath", "normpath", "Path", "PurePath", "str", "expanduser") and len(values) == 1:
        return values[0]
    return None


def _read_code(module: Module, code: str) -> None:
    """The imports, `__main__` block and legacy imports of some Python code, from its lines: a
    statement-level reading that costs a fraction of a parse (the model reads every file of the project before any
    is processed; `bench/` measures it)."""
    headers: tuple[list[int], list[bool]] | None = None
    for m in _IMPORT.finditer(code):
        if m.group(3) is not None:
            names, level = _names(m.group(3)), 0
        else:
            spec = m.group(1)
            names, level = [spec.lstrip(".")], len(spec) - len(spec.lstrip("."))
        if level == 0 and any(name.split(".")[0] in LEGACY_ROOTS for name in names):
            module.legacy = True
            if not module.legacy_top:
                if code[m.start()] not in " \t":
                    module.legacy_top = True
                else:
                    headers = headers or _headers(code)
                    module.legacy_top = not _in_definition(headers, m.start())
        if m.group(3) is not None:
            module.imports += [(name, 0) for name in names]
            continue
        name = names[0]
        module.imports.append((name, level))
        for alias in _names(m.group(2)):  # `from pkg import mod`: a submodule, where one exists
            module.imports.append((f"{name}.{alias}" if name else alias, level))
    if not module.entry and MAIN_BLOCK.search(code):
        module.entry = True
    if "torch.cuda." in code:
        module.cuda_patches.update(m.group(1) for m in _CUDA_PATCH.finditer(code))
    if module.legacy and ".compile(" in code:
        module.compiled_steps.update(_compiled_steps(code))


# `self.<attr> = <torch_xla or its alias>.compile(self.<method>`, over lines
_COMPILED_STEP = re.compile(r"\bself\.(\w+)[ \t]*=[ \t]*(\w+)\.compile\(\s*self\.(\w+)")
_XLA_ALIAS = re.compile(r"^[ \t]*import[ \t]+torch_xla[ \t]+as[ \t]+(\w+)", re.M)
_STEP_CALLS = re.compile(r"\.(backward|zero_grad|step)\s*\(")


def _compiled_steps(code: str) -> set[str]:
    """The attributes assigned a compiled training step: a method of the file that runs backward() or steps an
    optimizer, compiled with torch_xla.compile (NM110 compiles the model it calls instead)."""
    names = {"torch_xla", *_XLA_ALIAS.findall(code)}
    out = set()
    for m in _COMPILED_STEP.finditer(code):
        if m.group(2) not in names:
            continue
        start = re.search(rf"^([ \t]*)def[ \t]+{re.escape(m.group(3))}[ \t]*\(", code, re.M)
        if start is None:
            continue
        indent = start.group(1)
        end = re.compile(rf"^{re.escape(indent)}(?:def|class|@)\b|^\S", re.M).search(code, start.end())
        if _STEP_CALLS.search(code[start.end():end.start() if end else len(code)]):
            out.add(m.group(1))
    return out


# the files that list what a folder ships, and would leave a module they do not name behind
_SHIPPING = ("Dockerfile", "setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in")
# a module's own RateTracker class (NM244's, at its top), and torch_xla's `xm.RateTracker()` with its line's rest
_RATE_TRACKER_CLASS = re.compile(r"^class[ \t]+RateTracker\b", re.M)
_RATE_TRACKER_CALL = re.compile(r"(?<![\w.])\w+\.RateTracker\(\)([^\n]*)")
_HEADER = re.compile(r"^(?:((?:async[ \t]+)?def[ \t]|class[ \t]|@)|[^\s#)\]}])", re.M)


def _headers(code: str) -> tuple[list[int], list[bool]]:
    """The offsets of the statements that start at column 0 (not comments, nor the closing bracket of a signature
    written over several lines), and whether each opens a function or class."""
    offsets, definitions = [], []
    for m in _HEADER.finditer(code):
        offsets.append(m.start())
        definitions.append(m.group(1) is not None)
    return offsets, definitions


def _in_definition(headers: tuple[list[int], list[bool]], position: int) -> bool:
    """Whether the indented line at `position` is in a function or class body: the last column-0 statement before
    it opens one (a column-0 line of a multi-line string inside a function reads as module level)."""
    offsets, definitions = headers
    i = bisect.bisect_right(offsets, position) - 1
    return i >= 0 and definitions[i]


def _names(text: str) -> list[str]:
    out = []
    for part in text.strip().strip("()").replace("\\", " ").split(","):
        words = part.split()
        if words and words[0] != "*":
            out.append(words[0])
    return out


def _comments(text: str) -> str:
    """The comment lines and docstring-like text of a Python file: the prose that names hardware."""
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("#"):
            out.append(stripped)
        elif "#" in line and not ('"' in line or "'" in line):
            out.append(line[line.index("#"):])
    docstrings = re.findall(r'"""(.*?)"""', text[:20000], re.S)
    return "\n".join(out + docstrings[:3])


# a string literal of a notebook's code: a command it runs (`subprocess.run(RUN_CMD, shell=True)`, `!{RUN_CMD}`)
_STRING = re.compile(r"""("{3}|'{3})(.*?)\1|["']([^"'\n]*)["']""", re.S)
_SHELL_CELLS = frozenset({"%%bash", "%%sh", "%%script"})
_CONTINUED = re.compile(r"\\\r?\n")  # a shell line continued on the next one


def _notebook_text(text: str, module: Module) -> tuple[list[str], str]:
    """The code cells (shell and magic lines taken out, the programs they run kept) and the markdown of a notebook."""
    try:
        notebook = json.loads(text)
    except ValueError:
        return [], ""
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        return [], ""
    code, prose = [], []
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if cell.get("cell_type") == "markdown":
            prose.append(source)
            continue
        if cell.get("cell_type") != "code":
            continue
        kept = []
        first = source.lstrip().split("\n", 1)[0].split()
        if first and first[0] in _SHELL_CELLS:  # a `%%bash` cell: its lines are a launch script's
            module.runs += [p for p in LAUNCHER.findall(_CONTINUED.sub(" ", source)) if p not in module.runs]
            _record_flags(module, _CONTINUED.sub(" ", source))
            code.append("\n" * source.count("\n"))
            continue
        for line in _CONTINUED.sub(" ", source).splitlines():  # `!torchrun \` continued on the next lines
            stripped = line.lstrip()
            if stripped.startswith(("!", "%")):
                m = _RUN_MAGIC.match(stripped)
                if m:
                    module.runs.append(m.group(1))
                module.runs += [p for p in LAUNCHER.findall(stripped) if p not in module.runs]
                _record_flags(module, stripped)
                kept.append("")
            else:
                kept.append(line)
                if stripped.startswith("#"):
                    prose.append(stripped)
        if "torchrun" in source or "python" in source:  # `RUN_CMD = f"""torchrun ... run_clip.py"""`, then run
            for m in _STRING.finditer(source):
                command = " " + " ".join((m.group(2) or m.group(3) or "").replace("\\\n", " ").split())
                module.runs += [p for p in LAUNCHER.findall(command) if p not in module.runs]
                _record_flags(module, command)
        code.append("\n".join(kept))
    return code, "\n".join(prose)


# the options of a launch line: `--tensor_parallel_size 8`, `--zero-1`
_LAUNCH_FLAG = re.compile(r"(?<!\S)--([A-Za-z_][\w-]*)")
# the keywords of an estimator's call whose dict holds the program's arguments (SageMaker, Metaflow)
_ARGUMENT_KEYWORDS = frozenset({"hyperparameters", "entrypoint_args"})


@functools.lru_cache(maxsize=1)
def _neuron_only_arguments() -> frozenset[str]:
    """optimum-neuron's training arguments that transformers' `TrainingArguments` does not have (NM509's list)."""
    from neuron_migrate.catalogue import load_data

    return frozenset(load_data("huggingface.toml")["neuron_only_arguments"])


def _launch_flags(text: str) -> dict[str, set[str]]:
    """The options each launch line of a text (continued lines joined) passes the program it runs, after its name
    and up to the end of the command (`;`, `&`, `|`): `--tensor-parallel-size` reads as `tensor_parallel_size`."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        if "--" not in line:
            continue
        for m in LAUNCHER.finditer(line):
            rest = re.split(r"[;&|]", line[m.end():], maxsplit=1)[0]
            out.setdefault(m.group(1), set()).update(f.replace("-", "_") for f in _LAUNCH_FLAG.findall(rest))
    return out


def _record_flags(module: Module, text: str) -> None:
    if "--" in text:
        for program, flags in _launch_flags(text).items():
            module.run_flags.setdefault(program, set()).update(flags)


def _literal_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _dict_keys(trees: list[ast.Module]) -> dict[str, set[str]]:
    """The string keys of the dicts a file binds to a name, in any scope (`args = {"tensor_parallel_size": 8}`,
    `args["zero_1"] = True`): what an estimator's `hyperparameters=args` passes. Every binding of a name counts."""
    found: dict[str, set[str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
                    found.setdefault(target.id, set()).update(_literal_keys(node.value))
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and isinstance(
                        target.slice, ast.Constant) and isinstance(target.slice.value, str):
                    found.setdefault(target.value.id, set()).add(target.slice.value)
    return found


def _launch_evidence(text: str, shown: str) -> list[Evidence]:
    out = []
    if PJRT_TPU.search(text) and not PJRT_NEURON.search(text):
        out.append(Evidence(TPU, LAUNCH, shown, "sets `PJRT_DEVICE=TPU`"))
    m = INSTANCE_TYPE.search(text) or re.search(r"--instance[-_]?(?:type)?[= ](?:ml\.)?(inf1|inf2|trn1n?|trn2|trn3)\b",
                                                text)
    if m:
        out.append(Evidence(_INSTANCE_TARGET[m.group(1).lower()], LAUNCH, shown, f"names `{m.group(0).strip()}`"))
    return out


def _requirements_evidence(text: str, shown: str) -> list[Evidence]:
    if _REQ_NEURON.search(text):
        return [Evidence(NEURON, FOLDER, shown, "installs torch-neuronx", package=True)]
    if _REQ_INF1.search(text):
        return [Evidence(INF1, FOLDER, shown, "installs torch-neuron (Inf1)")]
    m = _REQ_TPU.search(text)
    if m:
        return [Evidence(TPU, FOLDER, shown, f"installs `{m.group(0)}`")]
    return []


def _pyproject_evidence(text: str, shown: str) -> list[Evidence]:
    return [Evidence(NEURON, FOLDER, shown, "depends on torch-neuronx", package=True)] \
        if _INSTALLS_NEURON.search(text) else []


def _dockerfile_evidence(text: str, shown: str) -> list[Evidence]:
    out = [Evidence(NEURON, FOLDER, shown, "installs torch-neuronx", package=True)] \
        if _INSTALLS_NEURON.search(text) else []
    for image in _FROM.findall(text):
        low = image.lower()
        if "tpu" in low:
            out.append(Evidence(TPU, FOLDER, shown, f"FROM `{image}`"))
        elif re.search(r"inference-neuron(?!x)", low):
            out.append(Evidence(INF1, FOLDER, shown, f"FROM `{image}` (Inf1)"))
        elif "inference-neuronx" in low:
            out.append(Evidence(INF2, FOLDER, shown, f"FROM `{image}` (XLA inference: Inf2 / Trn1)"))
    return out


def _prose_target(m: re.Match) -> tuple[str | None, str]:
    """The target a `_PROSE_INSTANCE` match names (None: a product generation that does not exist, `Inferentia3`,
    or one its sentence names beside a family of any generation: "traced for Inferentia2 / Trainium"), and the
    words that name it."""
    if m.group(1):
        return _INSTANCE_TARGET[m.group(1).lower()], m.group(0)
    if _beside_any_generation(m.string, m.start(2), m.end(2)):
        return None, m.group(2)
    return _FAMILY_TARGET.get(m.group(3).lower() + m.group(4)), m.group(2)


_ANY_GENERATION = re.compile(r"\b(?:Trainium|Inferentia)\b(?![ \t]?\d)", re.I)  # "Trainium", not "Trainium 1"


def _beside_any_generation(text: str, start: int, end: int) -> bool:
    """Whether the sentence around text[start:end] (to the nearest `.` or line end, 100 characters at most each
    way) also names Trainium or Inferentia without a generation: then it names no one generation."""
    left = max(text.rfind(".", max(0, start - 100), start), text.rfind("\n", max(0, start - 100), start), start - 100)
    stops = [i for i in (text.find(".", end, end + 100), text.find("\n", end, end + 100)) if i >= 0]
    right = min(stops) if stops else end + 100
    return bool(_ANY_GENERATION.search(text, max(left, 0), start) or _ANY_GENERATION.search(text, end, right))


def _trains(text: str) -> bool:
    return any(word in text for word in _TRAIN_WORDS) and _TRAINS.search(text) is not None


def _readme_evidence(text: str, shown: str) -> tuple[bool, list[Evidence]]:
    """Whether a README names hardware, and the evidence it gives: exactly one target the native backend does not
    run on (TPU as `TPU v4` / `TPU VM`, or an Inf1 / Inf2 / Trn1 instance; Inf2 and Trn1 together, both the
    maintained XLA stack's), and neither Trn2 nor Trn3 (explicit Trn2 / Trn3 evidence beats Trn1's)."""
    lowered = text.lower()  # what _README_NATIVE needs first (`tra`: no other letter folds to these three)
    if ("trn" in lowered or "tra" in lowered) and _README_NATIVE.search(text):
        return True, []
    found: dict[str, tuple[str, int]] = {}
    for m in _README_WORD.finditer(text):
        if m.group(3) and _beside_any_generation(text, m.start(3), m.end(3)):
            continue  # "for Inferentia2 / Trainium": no one generation
        word = (m.group(1) or m.group(2) or m.group(3)).lower().replace(" ", "").replace("\t", "")
        found.setdefault(_README_TARGETS[word], (m.group(3) or m.group(0), text.count("\n", 0, m.start()) + 1))
    if not found:
        return False, []
    if len(found) != 1 and set(found) != {INF2, TRN1}:
        return True, []
    return True, [Evidence(target, FOLDER, f"{shown}:{line}", f"names `{word}`")
                  for target, (word, line) in found.items()]
