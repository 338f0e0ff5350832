"""The TorchNeuron version matrix (`rules/versions.toml`): families, supported platforms, legacy packages."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from neuron_migrate.catalogue import load_data


@dataclass(frozen=True)
class Family:
    torch: str  # "2.14"
    pins: dict[str, str]  # canonical package name -> specifier text written by `pin`
    releases: dict[str, str]  # canonical package name -> one release the family installs


@dataclass(frozen=True)
class Matrix:
    families: tuple[Family, ...]
    default: str
    python: tuple[str, ...]
    ubuntu: tuple[str, ...]
    instances: tuple[str, ...]
    system: str
    machine: str
    index_url: str
    native_since: Version
    legacy_packages: frozenset[str]
    required_packages: tuple[str, ...]
    legacy_releases: dict[str, str]

    def family(self, torch: str | None) -> Family:
        wanted = torch or self.default
        for family in self.families:
            if family.torch == wanted:
                return family
        known = ", ".join(f.torch for f in self.families)
        raise ValueError(f"unknown torch family {wanted!r}; the supported families are {known}")

    def others(self, family: Family) -> list[Family]:
        return [f for f in self.families if f is not family]

    @property
    def neuron_packages(self) -> frozenset[str]:
        """Packages whose presence says a file is about Neuron (so pinning it is in scope)."""
        return self.legacy_packages | frozenset(self.required_packages)

    def is_native_neuronx(self, version: str) -> bool:
        try:
            return Version(version) >= self.native_since
        except InvalidVersion:
            return False

    def python_supported(self, version: str) -> bool:
        return ".".join(version.split(".")[:2]) in self.python

    def python_spec_admits_any(self, spec: str) -> bool:
        """Whether a `requires-python` style specifier admits one of the supported Python versions."""
        try:
            specifiers = SpecifierSet(spec)
        except InvalidSpecifier:
            return True  # not ours to judge
        return any(specifiers.contains(f"{v}.{patch}", prereleases=True) for v in self.python for patch in range(32))

    def family_of_neuronx(self, version: str) -> Family | None:
        for family in self.families:
            if SpecifierSet(family.pins["torch-neuronx"]).contains(version, prereleases=True):
                return family
        return None


@functools.lru_cache(maxsize=1)
def matrix() -> Matrix:
    data = load_data("versions.toml")
    platform = data["platform"]

    def names(table: dict[str, str]) -> dict[str, str]:
        return {canonicalize_name(k): v for k, v in table.items()}

    families = tuple(Family(str(f["torch"]), names(f["pins"]), names(f["releases"])) for f in data["family"])
    return Matrix(
        families=families,
        default=str(data["default"]),
        python=tuple(platform["python"]),
        ubuntu=tuple(platform["ubuntu"]),
        instances=tuple(platform["instances"]),
        system=platform["system"],
        machine=platform["machine"],
        index_url=platform["extra_index_url"].rstrip("/"),
        native_since=Version(platform["native_neuronx_since"]),
        legacy_packages=frozenset(canonicalize_name(n) for n in platform["legacy_packages"]),
        required_packages=tuple(canonicalize_name(n) for n in platform["required_packages"]),
        legacy_releases=names(platform["legacy_releases"]),
    )


def python_fields() -> dict[str, str]:
    """Message fields of NM607 (unsupported Python)."""
    python = matrix().python
    return {"supported": ", ".join(python), "supported_first": python[0]}
