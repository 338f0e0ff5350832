"""The release matrix (rules/versions.toml): every row's versions exist in the package metadata the project keeps
(tests/data/package-metadata.toml) or are Neuron-index-only with a source link; rows are consistent."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from neuron_migrate.pin.matrix import _ascending, matrix
from tests.helpers import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

METADATA = tomllib.loads((ROOT / "tests" / "data" / "package-metadata.toml").read_text())
PACKAGES = METADATA["package"]
MX = matrix()
ROWS = [(r, f) for r in MX.releases for f in r.families]
DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/"


def test_the_matrix_covers_the_releases_issue_17_names():
    assert [r.sdk for r in MX.releases] == ["2.34.0", "2.33.1", "2.33.0"]
    assert {r.sdk: [f.torch for f in r.families] for r in MX.releases} == {
        "2.34.0": ["2.14"], "2.33.1": ["2.14", "2.13"], "2.33.0": ["2.14", "2.13"]}
    assert MX.select().releases["torch-neuronx"] == "2.14.3.1"
    assert MX.select().pins["torch-neuronx"] == "==2.14.*"  # the family spelling of the install guidance


NUMBERS = st.lists(st.integers(0, 40), min_size=1, max_size=4).map(lambda parts: ".".join(map(str, parts)))


@given(st.lists(NUMBERS, max_size=6, unique_by=Version),
       st.lists(st.sampled_from(["2.34.0rc1", "2.33.0.post1", "2.35.0.dev2"]), max_size=1))
def test_versions_are_ordered_as_packaging_orders_them(names, spelled_otherwise):
    """Without packaging for versions in numbers only (2.34 and 2.34.0 are one release); with it for any other."""
    names = [*names, *(n for n in spelled_otherwise if all(Version(n) != Version(m) for m in names))]
    assert [Version(v) for v in _ascending(names)] == sorted(map(Version, names))


def test_the_releases_are_newest_first_and_the_torch_versions_oldest_first():
    assert [Version(r.sdk) for r in MX.releases] == sorted((Version(r.sdk) for r in MX.releases), reverse=True)
    assert list(MX.torch_versions) == sorted({f.torch for f in MX.families}, key=Version)


def test_the_native_backend_starts_at_the_version_the_matrix_names():
    assert MX.native_since == Version(MX.native_since_text) and MX.native_since is MX.native_since
    assert MX.is_native_neuronx("2.14.3.1") and not MX.is_native_neuronx("2.9.0") \
        and not MX.is_native_neuronx("not a version")


@pytest.mark.parametrize("release, family", ROWS, ids=[f.label for _, f in ROWS])
def test_every_version_of_a_row_exists_or_is_neuron_index_only(release, family):
    assert release.source.startswith(DOCS) and family.source.startswith(DOCS)
    for name, version in family.releases.items():
        if name in MX.neuron_index_only:
            assert name in METADATA["placeholder"] or name == "torchao-neuron", name  # PyPI has no real release
            continue
        assert name in PACKAGES, f"{family.label}: no metadata kept for {name}"
        assert version in PACKAGES[name]["versions"], f"{family.label}: {name} {version} is not in the metadata"


@pytest.mark.parametrize("release, family", ROWS, ids=[f.label for _, f in ROWS])
def test_companions_are_built_for_the_rows_torch(release, family):
    torch = family.releases["torch"]
    assert family.torch == ".".join(torch.split(".")[:2])
    for name in ("torchvision", "torchaudio"):
        requires = PACKAGES[name]["requires_torch"][family.releases[name]]
        assert SpecifierSet(requires).contains(torch), f"{name} {family.releases[name]} requires torch{requires}"


@pytest.mark.parametrize("release, family", ROWS, ids=[f.label for _, f in ROWS])
def test_pins_admit_the_rows_releases_and_carried_ones_come_from_the_named_row(release, family):
    for name, pin in family.pins.items():
        if pin:
            assert SpecifierSet(pin).contains(family.releases[name], prereleases=True), (family.label, name)
        assert not re.search(r"\d+\.\d+\.\d+\.\d+\.\d", pin), "no build number is documented"
    for name in family.carried:
        source = MX.select(family.carried_from, family.torch)
        assert source.releases[name] == family.releases[name] and name not in source.carried


def test_a_release_that_only_rebuilt_runtime_libraries_has_the_packages_of_its_base():
    rebuilt = MX.release("2.33.1")
    base = MX.release(rebuilt.same_packages_as)
    assert [(f.torch, f.pins, f.releases) for f in rebuilt.families] == [
        (f.torch, f.pins, f.releases) for f in base.families]


def test_hugging_face_floors_are_the_first_releases_that_know_neuron():
    for name, info in MX.huggingface.items():
        floor = info["floor"]
        assert floor in PACKAGES[name]["versions"] and info["source"].startswith("https://github.com/huggingface/")
        known = PACKAGES[name].get("neuron", {})
        assert all(flag == (Version(v) >= Version(floor)) for v, flag in known.items()), name


def _wheels(name: str) -> list[Path]:
    folders = [Path("/opt/pypi-more/files"), Path("/opt/pypi/files"), Path("/opt/wheels")]
    return sorted(p for folder in folders if folder.is_dir() for p in folder.glob(f"{name}-*.whl"))


def test_the_kept_metadata_agrees_with_the_wheels_on_this_machine():
    """Where the local package index holds a wheel the metadata file describes, its METADATA says the same."""
    checked = 0
    for name in ("torchvision", "torchaudio", "transformers"):
        for wheel in _wheels(name):
            version = wheel.name.split("-")[1]
            with zipfile.ZipFile(wheel) as zf:
                meta = zf.read(f"{name}-{version}.dist-info/METADATA").decode()
                if name == "transformers":
                    flag = PACKAGES[name]["neuron"].get(version)
                    if flag is not None:
                        assert ('torch.device("neuron:0")' in zf.read("transformers/training_args.py").decode()) \
                            is flag, wheel.name
                        checked += 1
                    continue
            requires = PACKAGES[name].get("requires_torch", {}).get(version)
            if requires is None:
                continue
            m = re.search(r"^Requires-Dist: torch ?\(?([^);\n]*)\)?", meta, re.M)
            assert m is not None and SpecifierSet(m.group(1)) == SpecifierSet(requires), wheel.name
            checked += 1
    if Path("/opt/pypi-more/files").is_dir():
        assert checked > 0
