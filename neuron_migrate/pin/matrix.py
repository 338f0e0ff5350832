"""The Neuron release matrix (`rules/versions.toml`): releases, their torch-neuronx families, platforms, legacy
packages.

A `Release` is one Neuron SDK release (2.34.0, 2.33.1, ...); each has one `Family` per PyTorch version it ships
torch-neuronx for. `Matrix.select(sdk, torch)` picks the row `--neuron-sdk` / `--torch` (or the project's
`neuron-sdk` / `torch` settings) ask for.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from neuron_migrate.catalogue import load_data
from neuron_migrate.pin import canonical_name

if TYPE_CHECKING:
    from packaging.version import Version

# packaging is imported by the methods that compare versions, not here: `check` and `rewrite` build the matrix
# (config.py validates the settings against it) and compare none (5 ms of start-up)


@dataclass(frozen=True)
class Family:
    torch: str  # "2.14"
    pins: dict[str, str]  # canonical package name -> specifier text written by `pin`
    releases: dict[str, str]  # canonical package name -> one release the family installs
    sdk: str = ""  # the Neuron release this family belongs to ("2.34.0")
    source: str = ""
    carried: frozenset[str] = frozenset()  # releases the sources do not give for this row (judging only)
    carried_from: str = ""  # the release whose versions `carried` are

    @property
    def label(self) -> str:
        """`Neuron 2.34.0, torch 2.14` (for messages)."""
        return f"Neuron {self.sdk}, torch {self.torch}" if self.sdk else f"torch {self.torch}"

    def exact_pin(self, name: str) -> str:
        """The pin for a project that pins exactly: the family's release (any build of it)."""
        release = self.releases[name]
        if name == "torch-neuronx":
            return f"=={release}.*"  # the documented release; the build number is not documented
        return f"=={release}"


@dataclass(frozen=True)
class Release:
    sdk: str  # "2.34.0"
    date: str
    source: str
    python: tuple[str, ...]
    instances: tuple[str, ...]
    default_torch: str
    families: tuple[Family, ...]
    components: dict[str, str] = field(default_factory=dict)
    xla_inference_ended: tuple[str, ...] = ()
    torchao_instances: tuple[str, ...] = ()
    libtorch_lite_last: bool = False
    same_packages_as: str = ""

    @property
    def short(self) -> str:
        """`2.34` for `2.34.0` (what `--neuron-sdk` accepts besides the full version)."""
        return ".".join(self.sdk.split(".")[:2])

    def family(self, torch: str | None) -> Family | None:
        wanted = torch or self.default_torch
        return next((f for f in self.families if f.torch == wanted), None)

    def torchao_supported(self, instance: str) -> bool:
        return instance in self.torchao_instances

    def xla_inference_supported(self, instance: str) -> bool:
        return instance not in self.xla_inference_ended


@dataclass(frozen=True)
class Matrix:
    releases: tuple[Release, ...]  # newest first
    ubuntu: tuple[str, ...]
    instances: tuple[str, ...]  # what --instance accepts
    default_instance: str
    native_instances: tuple[str, ...]  # where the native backend runs (the newest release's)
    system: str
    machine: str
    index_url: str
    native_since_text: str  # the first torch-neuronx of the native backend, as written ("2.13.3")
    legacy_packages: frozenset[str]
    inf1_packages: frozenset[str]
    tpu_packages: frozenset[str]
    required_packages: tuple[str, ...]
    companion_packages: tuple[str, ...]
    legacy_releases: dict[str, str]
    neuron_index_only: frozenset[str]
    huggingface: dict[str, dict[str, str]]

    # -- choosing a row ---------------------------------------------------------------------------------------
    @property
    def newest(self) -> Release:
        return self.releases[0]

    @property
    def default(self) -> str:
        return self.newest.default_torch

    @property
    def families(self) -> tuple[Family, ...]:
        """Every family of every release, newest release first."""
        return tuple(f for r in self.releases for f in r.families)

    @property
    def torch_versions(self) -> tuple[str, ...]:
        """The PyTorch versions some release has a family for ("2.14", "2.13")."""
        return tuple(_ascending({f.torch for f in self.families}))

    @property
    def sdk_names(self) -> tuple[str, ...]:
        """What --neuron-sdk accepts: each release in full and by its major.minor ("2.34.0", "2.34", ...)."""
        out: list[str] = []
        for r in self.releases:
            out += [r.sdk, r.short]
        return tuple(dict.fromkeys(out))

    def release(self, sdk: str | None) -> Release:
        """The release `sdk` names ("2.34" is the newest 2.34.x); None: the newest."""
        if sdk is None:
            return self.newest
        for r in self.releases:
            if sdk in (r.sdk, r.short):
                return r
        known = ", ".join(r.sdk for r in self.releases)
        raise ValueError(f"unknown Neuron release {sdk!r}; the release matrix (rules/versions.toml) has {known}")

    def select(self, sdk: str | None = None, torch: str | None = None) -> Family:
        """The family for a Neuron release and a PyTorch version.

        With no release given, the newest release that has the PyTorch version; with neither, the newest
        release's default family.
        """
        if sdk is None and torch is not None:
            for r in self.releases:
                if (family := r.family(torch)) is not None:
                    return family
        release = self.release(sdk)
        family = release.family(torch)
        if family is None:
            have = ", ".join(f.torch for f in release.families)
            other = next((r.sdk for r in self.releases if r.family(torch)), None)
            hint = f"; choose --neuron-sdk {other} for torch {torch}" if other else ""
            raise ValueError(f"Neuron {release.sdk} has no torch-neuronx family for torch {torch} "
                             f"(it has torch {have}){hint}")
        return family

    def release_of(self, family: Family) -> Release:
        return next((r for r in self.releases if r.sdk == family.sdk), self.newest)

    def family(self, torch: str | None) -> Family:
        """The newest family for a PyTorch version (kept for callers that choose by torch only)."""
        return self.select(None, torch)

    def others(self, family: Family) -> list[Family]:
        """The other families of the same Neuron release."""
        return [f for f in self.release_of(family).families if f is not family]

    # -- facts ------------------------------------------------------------------------------------------------
    @property
    def python(self) -> tuple[str, ...]:
        return self.newest.python

    @property
    def neuron_packages(self) -> frozenset[str]:
        """Packages whose presence says a file is about Neuron (so pinning it is in scope)."""
        return self.legacy_packages | frozenset(self.required_packages)

    @functools.cached_property
    def native_since(self) -> Version:
        from packaging.version import Version

        return Version(self.native_since_text)

    def is_native_neuronx(self, version: str) -> bool:
        from packaging.version import InvalidVersion, Version

        try:
            return Version(version) >= self.native_since
        except InvalidVersion:
            return False

    def python_supported(self, version: str) -> bool:
        return ".".join(version.split(".")[:2]) in self.python

    @property
    def native_torch(self) -> frozenset[str]:
        """The PyTorch versions of the TorchNeuron families (`2.13`, `2.14`)."""
        return frozenset(f.torch for f in self.families)

    def torchao_where(self) -> str:
        """`trn3 with Neuron 2.34.0`: where TorchAO Neuron is supported (the newest release that has it)."""
        for r in self.releases:
            if r.torchao_instances:
                return f"{' / '.join(r.torchao_instances)} with Neuron {r.sdk}"
        return "no release of the matrix"

    def python_floor_below(self, spec: str) -> str | None:
        """The oldest Python below the first supported one that a `requires-python` style specifier admits, when
        it admits a supported one too (`>=3.10` -> "3.10"); None otherwise (NM607 reports one that admits none)."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            specifiers = SpecifierSet(spec)
        except InvalidSpecifier:
            return None
        if not self.python_spec_admits_any(spec):
            return None
        major, minor = (int(x) for x in self.python[0].split("."))
        for older in range(8, minor):
            if any(specifiers.contains(f"{major}.{older}.{patch}", prereleases=True) for patch in range(32)):
                return f"{major}.{older}"
        return None

    def python_spec_admits_any(self, spec: str) -> bool:
        """Whether a `requires-python` style specifier admits one of the supported Python versions."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        try:
            specifiers = SpecifierSet(spec)
        except InvalidSpecifier:
            return True  # not ours to judge
        return any(specifiers.contains(f"{v}.{patch}", prereleases=True) for v in self.python for patch in range(32))

    def family_of_neuronx(self, version: str) -> Family | None:
        """The family a torch-neuronx version belongs to: the newest release whose release of it matches,
        else the newest family whose pin admits it."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            public = Version(version).public
        except InvalidVersion:
            return None
        for family in self.families:
            release = family.releases.get("torch-neuronx", "")
            if release and SpecifierSet(f"=={release}.*").contains(public, prereleases=True):
                return family
        for family in self.families:
            if SpecifierSet(family.pins["torch-neuronx"]).contains(public, prereleases=True):
                return family
        return None

    def releases_of_neuronx(self, version: str) -> list[Release]:
        """Every release whose torch-neuronx build `version` is (2.14.3.0 is in 2.33.0 and 2.33.1)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            public = Version(version).public
        except InvalidVersion:
            return []
        out = []
        for r in self.releases:
            for f in r.families:
                release = f.releases.get("torch-neuronx", "")
                if release and SpecifierSet(f"=={release}.*").contains(public, prereleases=True):
                    out.append(r)
        return out


@functools.lru_cache(maxsize=1)
def matrix() -> Matrix:
    data = load_data("versions.toml")
    platform = data["platform"]

    def names(table: dict[str, str]) -> dict[str, str]:
        return {canonical_name(k): v for k, v in table.items()}

    releases = []
    for row in data["release"]:
        sdk = str(row["sdk"])
        families = tuple(Family(str(f["torch"]), names(f["pins"]), names(f["releases"]), sdk, f.get("source", ""),
                                frozenset(canonical_name(n) for n in f.get("carried", ())),
                                str(f.get("carried_from", "")))
                         for f in row["family"])
        releases.append(Release(
            sdk=sdk, date=str(row["date"]), source=row["source"], python=tuple(row["python"]),
            instances=tuple(row["instances"]), default_torch=str(row["default_torch"]), families=families,
            components=names(row.get("components", {})), xla_inference_ended=tuple(row.get("xla_inference_ended", ())),
            torchao_instances=tuple(row.get("torchao_instances", ())),
            libtorch_lite_last=bool(row.get("libtorch_lite_last", False)),
            same_packages_as=str(row.get("same_packages_as", ""))))
    order = {sdk: i for i, sdk in enumerate(_ascending(r.sdk for r in releases))}
    releases.sort(key=lambda r: order[r.sdk], reverse=True)
    return Matrix(
        releases=tuple(releases),
        ubuntu=tuple(platform["ubuntu"]),
        instances=tuple(platform["instances"]),
        default_instance=platform["default_instance"],
        native_instances=releases[0].instances,
        system=platform["system"],
        machine=platform["machine"],
        index_url=platform["extra_index_url"].rstrip("/"),
        native_since_text=str(platform["native_neuronx_since"]),
        legacy_packages=frozenset(canonical_name(n) for n in platform["legacy_packages"]),
        inf1_packages=frozenset(canonical_name(n) for n in platform["inf1_packages"]),
        tpu_packages=frozenset(canonical_name(n) for n in platform["tpu_packages"]),
        required_packages=tuple(canonical_name(n) for n in platform["required_packages"]),
        companion_packages=tuple(canonical_name(n) for n in platform["companion_packages"]),
        legacy_releases=names(platform["legacy_releases"]),
        neuron_index_only=frozenset(canonical_name(n) for n in platform["neuron_index_only"]),
        huggingface={canonical_name(k): dict(v) for k, v in data.get("huggingface", {}).items()},
    )


def _ascending(versions: Iterable[str]) -> list[str]:
    """Versions sorted oldest first, as packaging's `Version` orders them: when every one is written in numbers
    only ("2.34.0"), by its numbers less trailing zeros (2.34 is 2.34.0), without packaging; else all by `Version`
    (packaging imported for it)."""
    versions = list(versions)
    numbers = {}
    for text in versions:
        parts = text.split(".")
        if not all(p.isascii() and p.isdigit() for p in parts):
            from packaging.version import Version

            return sorted(versions, key=Version)
        kept = [int(p) for p in parts]
        while len(kept) > 1 and kept[-1] == 0:
            kept.pop()
        numbers[text] = tuple(kept)
    return sorted(versions, key=numbers.__getitem__)


def python_fields() -> dict[str, str]:
    """Message fields of NM607 (unsupported Python)."""
    python = matrix().python
    return {"supported": ", ".join(python), "supported_first": python[0]}


def python_issue(spec: str, neuron: bool) -> tuple[str, dict[str, str]] | None:
    """NM607 when a Python constraint admits no supported version; NM615 when it admits one but a Neuron
    project's floor lies below the first (`>=3.10`)."""
    mx = matrix()
    if not mx.python_spec_admits_any(spec):
        return "NM607", python_fields()
    below = mx.python_floor_below(spec) if neuron else None
    return ("NM615", {**python_fields(), "below": below}) if below else None


def target(settings) -> Family:
    """The family `settings` choose (raises ValueError with a message for the user)."""
    return matrix().select(getattr(settings, "neuron_sdk", None), getattr(settings, "torch", None))
