"""Decide what happens to a list of requirements: which to keep, re-pin, remove, and what to add.

Every file format (requirements files, pyproject, setup files, pip commands in scripts and Dockerfiles)
turns its entries into requirement texts, asks `plan` and renders the outcome its own way, so the
version logic exists once. Versions are compared with `packaging`; texts are edited in place, so
extras, markers, local labels and spacing survive.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from neuron_migrate.pin import canonical_name
from neuron_migrate.engine.stack import XLA_STACK, Spec, specs
from neuron_migrate.pin.matrix import Family, Matrix, matrix

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REQUIREMENT = re.compile(rf"\s*(?P<name>{_NAME})\s*(?P<extras>\[[^\]]*\])?(?P<rest>.*)", re.S)
_TEMPLATE = re.compile(r"\$|\{\{|\{%|%\(|@[A-Z_]+@")


@dataclass(frozen=True)
class Requirement:
    """A requirement text split into the parts `pin` reads and edits."""

    text: str
    name: str  # canonical
    spec_start: int  # the specifier is text[spec_start:spec_end] (empty when unpinned)
    spec_end: int
    marker: str
    url: bool
    templated: bool

    @property
    def spec(self) -> str:
        return self.text[self.spec_start:self.spec_end]

    def with_spec(self, spec: str) -> str:
        return self.text[:self.spec_start] + spec + self.text[self.spec_end:]


def parse(text: str) -> Requirement | None:
    if _BARE_URL.match(text):  # `git+https://github.com/huggingface/optimum-neuron.git`: no name before it
        name = url_library(text)
        end = len(text.rstrip())
        return Requirement(text, name, end, end, "", url=True, templated=False) if name else None
    m = _REQUIREMENT.fullmatch(text)
    if not m:
        return None
    rest = m.group("rest")
    url = rest.lstrip().startswith("@")  # `name @ https://...` (PEP 508 direct reference)
    semicolon = re.search(r"\s;" if url else ";", rest)
    marker = rest[semicolon.end():].strip() if semicolon else ""
    cut = len(rest) - len(rest.lstrip()) if url else (semicolon.start() if semicolon else len(rest))
    spec = rest[:cut]
    start = m.start("rest") + len(spec) - len(spec.lstrip())
    end = m.start("rest") + len(spec.rstrip())
    return Requirement(text, canonical_name(m.group("name")), start, max(start, end), marker, url=url,
                       templated=bool(_TEMPLATE.search(spec)))


# a requirement that is a URL alone (a VCS checkout, an archive, a wheel): `git+https://...`, `https://.../x.whl`
_BARE_URL = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")
_CODE_HOSTS = frozenset({"github.com", "gitlab.com", "bitbucket.org", "huggingface.co"})


def url_library(text: str) -> str | None:
    """The library built on torch_xla a bare URL installs, by its `#egg=` name, the repository a code host's URL
    names (`git+https://github.com/huggingface/optimum-neuron.git@v0.4.5`) or a wheel's file name; None for any
    other URL (it is not read as a requirement: nothing else is pinned from a URL)."""
    url = text.strip()
    egg = re.search(r"[#&]egg=([A-Za-z0-9._-]+)", url)
    if egg:
        name = egg.group(1)
    else:
        parts = urlsplit(url.partition("+")[2] if "+" in url.partition("://")[0] else url)
        path = [p for p in parts.path.split("/") if p]
        if parts.hostname in _CODE_HOSTS and len(path) >= 2:
            name = path[1].partition("@")[0].removesuffix(".git")
        elif path and path[-1].endswith(".whl"):
            name = path[-1].partition("-")[0]
        else:
            return None
    name = canonical_name(name)
    return name if name in xla_libraries() else None


def applies_to_target(marker: str, mx: Matrix | None = None) -> bool:
    """Whether an environment marker can hold on a supported Neuron host (Linux x86_64, a supported Python)."""
    if not marker:
        return True
    # imported here: it is most of this module's import, and the project model imports the module at every run
    from packaging.markers import InvalidMarker, Marker

    mx = mx or matrix()
    try:
        parsed = Marker(marker)
    except InvalidMarker:
        return True
    for version in mx.python:
        env = {"sys_platform": "linux", "platform_system": mx.system, "platform_machine": mx.machine,
               "os_name": "posix", "python_version": version, "python_full_version": f"{version}.0",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}
        try:
            if parsed.evaluate(env):
                return True
        except Exception:  # undefined names in the marker: not ours to judge
            return True
    return False


def _without_local(specifiers: SpecifierSet) -> SpecifierSet:
    return SpecifierSet(",".join(str(s).split("+")[0] for s in specifiers))


def _local_label(spec: str) -> str:
    m = re.search(r"==[^,+=]+(\+[A-Za-z0-9.]+)", spec)
    return m.group(1) if m else ""


@dataclass
class Outcome:
    """What becomes of one entry."""

    replacement: str | None = None  # new text of the same requirement
    remove: bool = False
    extra: list[str] = field(default_factory=list)  # requirements to add right after this entry


@dataclass
class Issue:
    """A finding about one entry (for NM603, the first entry the missing packages go after; its `adds` field
    lists each package with the entry it goes after)."""

    index: int
    code: str
    fields: dict


@dataclass
class Plan:
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)
    added: set[str] = field(default_factory=set)
    held: bool = False  # the changes wait for the removal of a legacy package this run holds back (unsafe)

    def outcome(self, index: int) -> Outcome:
        return self.outcomes.setdefault(index, Outcome())


LITE = "libtorch-neuronx-lite"
TORCHAO, TORCHAO_NEURON = "torchao", "torchao-neuron"


INF1, TPU = "inf1", "tpu"
# What `names_of` gives for the TPU build of torch-xla (`torch_xla[tpu]`) and for a requirement or option that names
# a libtpu index, a libtpu wheel or a TPU VM wheel (`-f https://storage.googleapis.com/libtpu-releases/index.html`).
TPU_BUILD = "torch-xla[tpu]"
TPU_LINKS = re.compile(r"libtpu|/tpuvm/", re.I)
# A shell script or Dockerfile that drives a TPU names a TPU device, install or index; one for Neuron names Neuron's.
_TPU_TEXT = re.compile(r"""\bPJRT_DEVICE(?:\s*=\s*|\s+)["']?TPU\b|\bXRT_TPU_CONFIG\b|libtpu|/tpuvm/|torch[-_]xla\[tpu\]""",
                       re.I)
_NEURON_TEXT = re.compile(r"""\bPJRT_DEVICE(?:\s*=\s*|\s+)["']?NEURON\b|torch[-_]neuronx|neuronx[-_]cc""", re.I)


def drives_tpu(text: str) -> bool:
    """Whether a script or Dockerfile is for TPU (`export PJRT_DEVICE=TPU`, `pip install torch_xla[tpu] -f <libtpu
    index>`) and names nothing of Neuron: its environment, launches and installs are left as written."""
    return bool(_TPU_TEXT.search(text)) and not _NEURON_TEXT.search(text)


def product(names: set[str], mx: Matrix | None = None) -> str | None:
    """The other product a set of requirements installs, whose pins are not Neuron's: INF1 (torch-neuron,
    neuron-cc: Inferentia 1), TPU (the TPU build of torch-xla, libtpu); None for the rest, and for a list that
    also names torch-neuronx or another package of Neuron's own (a Neuron project with a stray TPU extra)."""
    mx = mx or matrix()
    if names & (mx.neuron_packages - mx.inf1_packages - {"torch-xla"}):
        return None
    if names & mx.inf1_packages:
        return INF1
    if TPU_BUILD in names or names & mx.tpu_packages:
        return TPU
    return None


def in_scope(names: set[str], mx: Matrix | None = None) -> bool:
    """A set of requirements is about Neuron when it names a Neuron or legacy XLA package, or a library built on
    the XLA stack (`optimum-neuron[neuronx]` brings the XLA torch-neuronx), and is not a TPU install (Inferentia 1
    lists are in scope: `plan` reports them with NM513 and changes nothing)."""
    return product(names, mx) != TPU and (LITE in names or bool(installs_neuron(names, mx)))


def installs_neuron(names: set[str], mx: Matrix | None = None) -> set[str]:
    """The names of a list that install Neuron: its packages (legacy ones too) and the libraries built on the XLA
    stack (the index is needed either way, now or once `pin` adds the native packages beside them)."""
    return names & ((mx or matrix()).neuron_packages | set(xla_libraries()))


@functools.lru_cache(maxsize=1)
def xla_libraries() -> dict[str, Spec]:
    """pip name -> the library built on torch_xla it installs (rules/libraries.toml: neuronx-distributed,
    optimum-neuron, transformers-neuronx, ...); torch-xla and libneuronxla are legacy packages (NM601)."""
    legacy = matrix().legacy_packages
    return {project: spec for spec in specs() if spec.kind == XLA_STACK
            for project in sorted(spec.projects) if project not in legacy}


def python_in_scope(names: set[str], mx: Matrix | None = None) -> bool:
    """The Python version of a project matters when it installs torch or a Neuron package (not Inf1 or TPU)."""
    return product(names, mx) is None and ("torch" in names or in_scope(names, mx))


def names_of(texts: list[str]) -> set[str]:
    out = set()
    for text in texts:
        req = parse(text)
        if req is not None and applies_to_target(req.marker):
            out.add(req.name)
            if req.name == "torch-xla" and "tpu" in _extras(text):
                out.add(TPU_BUILD)
        if TPU_LINKS.search(text):
            out.add(TPU_BUILD)
    return out


def _extras(text: str) -> set[str]:
    m = _REQUIREMENT.fullmatch(text)
    extras = (m.group("extras") or "[]")[1:-1] if m else ""
    return {canonical_name(e.strip()) for e in extras.split(",") if e.strip()}


def plan(texts: list[str | None], family: Family, present: set[str], may_add: bool = True,
         may_empty: bool = True, instance: str | None = None, unsafe_fixes: bool = True,
         beside: tuple[str, ...] = ()) -> Plan:
    """Decide over `texts` (None for entries that are not requirements).

    `present`: packages the whole file (or command line, with its includes) already installs; missing
    required packages (and torch, pinned wherever torch-neuronx is) are added after the last Neuron entry,
    once, unless `may_add` is False.
    `may_empty`: False when removing every entry would break the list (a `pip install` with no argument left).
    `instance`: the target instance (TorchAO Neuron replaces upstream torchao where the release supports it).
    `unsafe_fixes`: the run removes legacy packages (NM601 is unsafe). When it does not, a list that keeps
    torch-xla cannot take the native pins either (torch-xla requires its own torch): every change waits with
    the removal (`Plan.held`), so a safe run leaves the list installable as written and holds back as many
    fixes as `--unsafe-fixes` makes.
    `beside`: the installs of libraries built on torch_xla elsewhere in the list's environment (`environment`):
    the list is left as written while they stay, as it is beside one of its own.
    """
    mx = matrix()
    release = mx.release_of(family)
    instance = instance or mx.default_instance
    result = Plan()
    other = product(names_of([t for t in texts if t is not None]) | present, mx)
    if other == INF1:
        _inferentia1(texts, mx, result)
    if other is not None:
        return result  # another product's install: left as written
    if _xla_library_kept(texts, mx, result) or _xla_library_beside(texts, beside, mx, result):
        return result
    anchor = None
    for index, text in enumerate(texts):
        req = parse(text) if text is not None else None
        if req is None or not applies_to_target(req.marker, mx):
            continue
        if req.name in mx.neuron_packages or req.name in xla_libraries():
            anchor = index  # the native packages missing go after the last entry that installs Neuron
        if req.name in mx.legacy_packages:
            result.outcome(index).remove = True
            result.issues.append(Issue(index, "NM601", {"requirement": text.strip(), "name": req.name}))
        elif req.name == TORCHAO and release.torchao_supported(instance) and TORCHAO_NEURON in family.pins:
            _torchao(req, index, family, instance, present, result)
        elif req.name == TORCHAO:  # no TorchAO on this instance / release: a person decides (NM307 on the code)
            result.issues.append(Issue(index, "NM614", {"requirement": text.strip(), "instance": instance,
                                                        "release": release.sdk, "where": mx.torchao_where()}))
        elif req.name in family.pins:
            _repin(req, index, family, mx, result)
        elif req.name in mx.huggingface:
            _floor(req, index, mx.huggingface[req.name], result)
        elif req.name == LITE and release.libtorch_lite_last:
            result.issues.append(Issue(index, "NM611", {"requirement": text.strip(), "sdk": release.sdk}))
    missing = [n for n in mx.required_packages if n not in present]
    companions = [n for n in mx.companion_packages if n not in present] if anchor is not None and (
        missing or "torch-neuronx" in present) else []
    if may_add and (missing or companions) and anchor is not None:
        # torch goes next to torch-neuronx when the list has it, the other packages after the last Neuron entry
        neuronx = next((i for i, t in enumerate(texts) if t is not None and (r := parse(t)) is not None
                        and r.name == "torch-neuronx" and applies_to_target(r.marker, mx)), anchor)
        adds = [(at, name + family.pins[name]) for at, names in ((neuronx, companions), (anchor, missing))
                for name in names]
        for at, requirement in adds:
            result.outcome(at).extra.append(requirement)
        names = companions + missing
        result.added.update(names)
        # one finding for the list (an install line), at the first entry a package goes after
        result.issues.append(Issue(min(at for at, _ in adds), "NM603", {
            "name": "`, `".join(names), "verb": "is" if len(names) == 1 else "are",
            "requirement": "`, `".join(r for _, r in adds), "adds": adds,
            "family": family.torch, "release": family.sdk}))
    if not may_empty:
        _keep_last_entry(texts, result)
    result.held = not unsafe_fixes and any(i.code == "NM601" for i in result.issues)
    return result


def _xla_library_kept(texts: list[str | None], mx: Matrix, result: Plan) -> bool:
    """NM613 on each library built on torch_xla the list installs (neuronx-distributed, optimum-neuron[vllm]):
    while one stays, the list cannot hold the native packages (the library requires torch-xla or an older
    torch), so nothing else is changed or added: the versions stay as written until the library is gone."""
    found = False
    for index, text in enumerate(texts):
        req = parse(text) if text is not None else None
        if req is not None and applies_to_target(req.marker, mx) and req.name in xla_libraries():
            library = xla_libraries()[req.name]
            extras = _extras(text)
            instead = next((advice for extra, advice in library.instead_extras if extra in extras), library.instead)
            result.issues.append(Issue(index, "NM613", {"requirement": text.strip(), "library": library.name,
                                                        "instead": instead, "where": "", "until": "",
                                                        "mark": "replace this torch_xla-based library"}))
            found = True
    return found


def environment(settings) -> tuple[str, ...]:
    """The installs of libraries built on torch_xla in the environment of the file `settings` are for (the
    requirements files, notebooks and shell scripts of its folder: `FileProject.xla_beside`)."""
    project = getattr(settings, "project", None)
    return project.xla_beside if project is not None else ()


def _xla_library_beside(texts: list[str | None], beside: tuple[str, ...], mx: Matrix, result: Plan) -> bool:
    """NM613 at the first Neuron entry of a list whose environment keeps a library built on torch_xla (a notebook's
    `pip install neuronx-cc==...` beside a requirements.txt with `optimum-neuron[vllm]`): the list is left as
    written, since the native packages it would get replace the torch and torch-neuronx that library runs on."""
    if not beside:
        return False
    first, _, place = beside[0].rpartition(" (")
    name = parse(first.strip("`"))
    library = xla_libraries().get(name.name) if name is not None else None
    if library is None:
        return False
    for index, text in enumerate(texts):
        req = parse(text) if text is not None else None
        if req is not None and applies_to_target(req.marker, mx) and (
                req.name in mx.neuron_packages or req.name in mx.legacy_packages or req.name == "torch"):
            more = f" and {len(beside) - 1} more" if len(beside) > 1 else ""
            result.issues.append(Issue(index, "NM613", {
                "requirement": first.strip("`"), "library": library.name, "instead": library.instead,
                "where": f" ({place.rstrip(')')}, the same environment as this install{more})",
                "until": "; until then this install is left as written: the native packages it would get replace "
                        "the torch and torch-neuronx that library runs on",
                "mark": _held_mark(library.name)}))
            return True
    return True


def _held_mark(library: str) -> str:
    """The marker of an install left as written beside a library built on torch_xla: it waits for the library."""
    from neuron_migrate.engine.edits import marker_room

    mark = f"held until {library} goes"
    return mark if len(mark) <= marker_room("NM613") else "held until its XLA-stack library goes"


def _inferentia1(texts: list[str | None], mx: Matrix, result: Plan) -> None:
    """NM513 on the list's first Inferentia 1 package (none when only another list of the file names one)."""
    for index, text in enumerate(texts):
        req = parse(text) if text is not None else None
        if req is not None and req.name in mx.inf1_packages:
            result.issues.append(Issue(index, "NM513", {"subject": text.strip(), "verb": "installs"}))
            return


def _keep_last_entry(texts: list[str | None], result: Plan) -> None:
    """When every entry would go and nothing replaces them, the removals become findings for a person."""
    removed = [i for i, o in result.outcomes.items() if o.remove and not o.extra]
    kept = [i for i, t in enumerate(texts) if t is not None and i not in removed]
    if kept or not removed:
        return
    for index in removed:
        del result.outcomes[index]
    result.issues = [i for i in result.issues if not (i.code == "NM601" and i.index in removed)]
    for index in removed:
        name = parse(texts[index]).name
        result.issues.append(Issue(index, "NM606", {
            "requirement": texts[index].strip(), "why": "is all this command installs",
            "todo": f"delete the command (the native backend needs no {name})"}))


def _torchao(req: Requirement, index: int, family: Family, instance: str, present: set[str], result: Plan) -> None:
    """Upstream torchao on a target where TorchAO Neuron is the supported route: it becomes torchao-neuron (or
    goes, when torchao-neuron is already installed: the two wheels must not be installed together)."""
    fields = {"requirement": req.text.strip(), "instance": instance, "release": family.sdk}
    if req.templated or req.url:
        result.issues.append(Issue(index, "NM606", {
            **fields, "why": "takes its version from a template" if req.templated else "installs from a URL",
            "todo": f"install `{TORCHAO_NEURON}{family.pins[TORCHAO_NEURON]}` instead of upstream torchao"}))
        return
    if TORCHAO_NEURON in present or TORCHAO_NEURON in result.added:
        result.outcome(index).remove = True
        result.issues.append(Issue(index, "NM612", {**fields, "change": "remove it"}))
        return
    new = TORCHAO_NEURON + family.pins[TORCHAO_NEURON]
    head = req.text[:len(req.text) - len(req.text.lstrip())]
    result.outcome(index).replacement = head + new + req.text[req.spec_end:]
    result.added.add(TORCHAO_NEURON)
    result.issues.append(Issue(index, "NM612", {**fields, "change": f"replace it with `{new}`"}))


def _floor(req: Requirement, index: int, info: dict[str, str], result: Plan) -> None:
    """accelerate / transformers: the first release that knows the `neuron` device becomes the floor.

    Upper bounds and exclusions that admit the floor are kept; lower bounds below it and upper bounds that
    exclude it give way. An unpinned entry or one already at or past the floor is left alone.
    """
    floor = info["floor"]
    if req.templated or req.url or not req.spec:
        return
    try:
        specifiers = _without_local(SpecifierSet(req.spec))
        floor_version = Version(floor)
        lower = [s for s in specifiers if s.operator in (">=", ">", "~=", "==", "===")]
        below = [s for s in lower if Version(s.version.removesuffix(".*")) < floor_version]
    except (InvalidSpecifier, InvalidVersion):
        return
    if lower and not below:
        return  # already at or past the floor
    kept = [str(s) for s in specifiers if s not in lower and s.contains(floor, prereleases=True)]
    new_spec = ",".join([f">={floor}", *kept])
    reason = (f"admits releases before {floor}" if specifiers.contains(floor, prereleases=True)
              else f"excludes {floor} and later")
    result.outcome(index).replacement = req.with_spec(new_spec)
    result.issues.append(Issue(index, "NM610", {
        "requirement": req.text.strip(), "name": req.name, "floor": floor, "reason": reason,
        "pin": req.name + new_spec, "source": info.get("source", "")}))


def _repin(req: Requirement, index: int, family: Family, mx: Matrix, result: Plan) -> None:
    want = family.pins[req.name]
    fields = {"requirement": req.text.strip(), "name": req.name, "family": family.torch, "pin": req.name + want,
              "release": family.sdk,
              "todo": f"make sure it resolves to `{req.name + want}` ({family.label})"}
    if req.templated or req.url:
        why = "takes its version from a template" if req.templated else "installs from a URL"
        result.issues.append(Issue(index, "NM606", {**fields, "why": why}))
        return
    try:
        specifiers = SpecifierSet(req.spec)
    except InvalidSpecifier:
        result.issues.append(Issue(index, "NM606", {**fields, "why": "has a version specifier pip does not accept"}))
        return
    reason = misfit(req.name, specifiers, family, mx)
    if reason is None:
        return
    new_spec = want
    if req.name == "torch-neuronx" and _exact(specifiers) and "*" in want:
        new_spec = family.exact_pin(req.name)  # the project pins exactly: the release, not the whole family
    label = _local_label(req.spec)
    if label and want.startswith("==") and "*" not in want:
        new_spec = want + label
    result.outcome(index).replacement = req.with_spec(new_spec)
    result.issues.append(Issue(index, "NM602", {**fields, "reason": reason, "pin": req.name + new_spec}))


def misfit(name: str, specifiers: SpecifierSet, family: Family, mx: Matrix) -> str | None:
    """Why a specifier does not fit the family (None when it does); local labels (`+cpu`) do not count."""
    specifiers = _without_local(specifiers)
    release = family.releases[name]
    legacy = mx.legacy_releases.get(name)
    if not str(specifiers):
        return "is not pinned" if family.pins[name] else None
    if name == "torch-neuronx" and _pins_legacy(specifiers, mx):
        return f"is the legacy XLA build (the native backend starts at {mx.native_since})"
    if not specifiers.contains(release, prereleases=True) and not _exact_inside(specifiers, family.pins[name], release):
        for other in mx.others(family):
            if other.releases[name] != release and specifiers.contains(other.releases[name], prereleases=True):
                return f"belongs to the torch {other.torch} family"
        return f"does not admit {release}"
    for other in mx.others(family):
        version = other.releases[name]
        if version != release and specifiers.contains(version, prereleases=True):
            return f"also admits {version} of the torch {other.torch} family"
    if legacy and specifiers.contains(legacy, prereleases=True):
        return f"also admits the legacy release {legacy}"
    return None


def _exact(specifiers: SpecifierSet) -> bool:
    return any(s.operator in ("==", "===") and not s.version.endswith(".*") for s in specifiers)


def _exact_inside(specifiers: SpecifierSet, pin: str, release: str) -> bool:
    """An exact pin to a build inside the family's pin and not older than its release fits
    (`torch-neuronx==2.14.3.0.4021`, `neuronx-cc==2.29.1.0`; not `neuronx-cc==2.12.68.0`)."""
    exact = [s for s in specifiers if s.operator in ("==", "===") and not s.version.endswith(".*")]
    return bool(exact) and bool(pin) and all(
        SpecifierSet(pin).contains(s.version, prereleases=True) and Version(s.version) >= Version(release)
        for s in exact)


def _pins_legacy(specifiers: SpecifierSet, mx: Matrix) -> bool:
    """Whether an exact or compatible pin names a release line older than the native backend's."""
    native = mx.native_since.release[:2]
    for s in specifiers:
        if s.operator in ("==", "===", "~="):
            try:
                release = Version(s.version.removesuffix(".*")).release[:2]
            except InvalidVersion:
                continue
            if release < native:
                return True
    return False


CHANGE_CODES = ("NM601", "NM602", "NM603", "NM610", "NM612")


def change_text(issue: Issue) -> str:
    if issue.code == "NM601":
        return "it must be removed"
    if issue.code in ("NM602", "NM610"):
        return f"it must become `{issue.fields['pin']}`"
    if issue.code == "NM612":
        return f"you must {issue.fields['change']}"
    return f"`{issue.fields['requirement']}` must be added next to it"


def approve(result: Plan, texts: list[str | None], report: Callable[[int, str, dict], bool],
            frozen: bool = False) -> dict[int, Outcome]:
    """Report every issue through `report(index, code, fields)`; the outcomes the reports allow.

    `frozen`: the entries cannot change (hashed requirements), so each change becomes an NM605 finding.
    """
    approved: dict[int, Outcome] = {}
    for issue in result.issues:
        if frozen and issue.code in CHANGE_CODES:
            report(issue.index, "NM605", {"requirement": (texts[issue.index] or "").strip(),
                                          "change": change_text(issue)})
            continue
        fields = {**issue.fields, "held": True} if result.held and issue.code in CHANGE_CODES else issue.fields
        if not report(issue.index, issue.code, fields) or issue.code not in CHANGE_CODES:
            continue
        outcome = approved.setdefault(issue.index, Outcome())
        if issue.code == "NM601" or (issue.code == "NM612" and result.outcomes[issue.index].remove):
            outcome.remove = True
        elif issue.code in ("NM602", "NM610", "NM612"):
            outcome.replacement = result.outcomes[issue.index].replacement
        else:
            for at, requirement in issue.fields["adds"]:
                approved.setdefault(at, Outcome()).extra.append(requirement)
    return approved
