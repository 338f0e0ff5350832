"""One home per idiom: every code has fixtures, check expectations are snapshots beside them, accelerator-style
output never names the neuron device module, and only the Target spells the device modules.

Check snapshots: `fixtures/<topic>/<case>.findings.txt` beside `<case>.py` holds what `check` reports on the
case, one finding a line (`line:col CODE message`); an empty file means "no findings". Regenerate every snapshot
after a deliberate change with

    NEURON_MIGRATE_UPDATE_SNAPSHOTS=1 python -m pytest -q tests/test_idioms.py

(to add one, create the empty `<case>.findings.txt` first) and review the diff.

Accelerator style: every rewrite case (a `<case>.expected.py` exists) is also rewritten with
`--device-style accelerator`; the output must not contain `torch.neuron.`, unless the topic's `neuron-only.txt`
lists the case with the reason (`<case>: <reason>`, one a line).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from neuron_migrate import catalogue
from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, ROOT, rewrite_bytes

UPDATE = os.environ.get("NEURON_MIGRATE_UPDATE_SNAPSHOTS") == "1"
SNAPSHOTS = sorted(FIXTURES.glob("*/*.findings.txt"))
# Codes whose fixtures are not a fixtures/NMxxx-* folder of Python cases, and where they are tested instead.
COVERED_ELSEWHERE = {
    "NM6": "packaging: fixtures/pin/ (tests/test_pin_fixtures.py)",
    "NM900": "the marker itself: every manual fixture's expected output carries one (tests/test_fixtures.py)",
    "NM901": "unused suppressions: tests/test_suppress.py",
    "NM240": "launch scripts: fixtures/NM241-launch-process-count and tests/test_launch.py",
    "NM256": "a launch script and the options of the programs it starts: fixtures/projects/bf16_option",
    "NM510": "the inf2/trn1 note: fixtures/NM5xx-inference/serve_inf2.py with instance inf2 (test below)",
    "NM511": "accelerate config files: fixtures/accelerate_config/ (tests/test_huggingface.py)",
    "NM512": "accelerate config files: fixtures/accelerate_config/ (tests/test_huggingface.py)",
    "NM521": "a program for another platform: fixtures/projects/ (tests/test_project.py)",
    "NM522": "conflicting target evidence: fixtures/projects/shared_helper (tests/test_project.py)",
    "NM523": "Ray's TorchXLAConfig: fixtures/projects/launch_environment, a project class of that name beside it "
             "(tests/test_project.py)",
}


# Codes reported by the same rule as another code, tested in that code's folder: a case there must report them.
SHARED_FOLDERS = {
    "NM207": "NM204-xla-collective",  # REDUCE_* constants beside the collectives that take them
    "NM208": "NM204-xla-collective",  # replica groups of the same collectives
    "NM211": "NM210-device-loader",  # the device loader's manual case
    "NM222": "NM221-xla-serialization",  # the on-disk format note of the same calls
}


def _case(snapshot: Path) -> Path:
    return snapshot.with_name(snapshot.name[: -len(".findings.txt")] + ".py")


def findings_text(case: Path) -> str:
    result = process_python(case.name, case.read_bytes(), Settings(unsafe_fixes=True), False)  # beside the fixtures
    return "".join(f"{f.line}:{f.col} {f.code} {f.message}\n" for f in result.findings)


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_check_findings_match_the_snapshot(snapshot):
    case = _case(snapshot)
    assert case.exists(), f"{snapshot}: no case {case.name} beside it"
    got = findings_text(case)
    if UPDATE:
        snapshot.write_text(got)
    assert got == snapshot.read_text(), f"{snapshot.relative_to(ROOT)} is stale (NEURON_MIGRATE_UPDATE_SNAPSHOTS=1)"


def _folder_codes() -> dict[str, set[str]]:
    """{code: why it counts as covered}: a fixtures/<code>-* folder, or a group folder (NM3xx-, NM31x-) whose
    snapshots list the code."""
    covered: dict[str, set[str]] = {}
    for folder in FIXTURES.iterdir():
        head = folder.name.split("-", 1)[0]
        if not re.fullmatch(r"NM[0-9x]{3}", head) or not any(folder.glob("*.py")):
            continue
        if "x" not in head:
            covered.setdefault(head, set()).add(folder.name)
            continue
        group = re.compile(head.replace("x", "[0-9]"))
        for snapshot in folder.glob("*.findings.txt"):
            for line in snapshot.read_text().splitlines():
                code = line.split(" ", 2)[1]
                if group.fullmatch(code):
                    covered.setdefault(code, set()).add(f"{folder.name}/{snapshot.name}")
    return covered


def test_every_catalogue_code_has_fixtures():
    covered = _folder_codes()
    missing = [code for code in catalogue.catalogue() if code not in covered and code not in SHARED_FOLDERS
               and not any(code.startswith(p) for p in COVERED_ELSEWHERE)]
    assert not missing, (f"codes without fixtures: {', '.join(missing)}: add fixtures/<code>-<name>/ with a case, "
                         f"its expected output (or findings snapshot) and a look-alike")


@pytest.mark.parametrize("code, folder", sorted(SHARED_FOLDERS.items()))
def test_a_shared_folder_exercises_its_codes(code, folder):
    cases = [p for p in (FIXTURES / folder).glob("*.py") if not p.name.endswith(".expected.py")]
    assert any(f" {code} " in findings_text(case) for case in cases), f"no case in fixtures/{folder} reports {code}"


def _rewrite_cases():
    for expected in sorted(FIXTURES.glob("*/*.expected.py")):
        if expected.name.endswith(".accelerator.expected.py"):
            continue
        case = expected.with_name(expected.name[: -len(".expected.py")] + ".py")
        if case.exists():
            yield case


def _neuron_only(case: Path) -> str | None:
    listed = case.with_name("neuron-only.txt")
    if not listed.exists():
        return None
    for line in listed.read_text().splitlines():
        name, _, reason = line.partition(":")
        if name.strip() == case.stem:
            assert reason.strip(), f"{listed}: {case.stem} opts out without a reason"
            return reason.strip()
    return None


@pytest.mark.parametrize("case", list(_rewrite_cases()), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_accelerator_style_output_does_not_name_the_neuron_module(case):
    data = case.read_bytes()
    settings = {}
    m = re.search(rb"^# fixture-settings: (.*)$", data, re.M)
    if m:
        settings = eval(f"dict({m.group(1).decode()})", {})  # test-only, our own files
    out = rewrite_bytes(data, path=str(case), **{**settings, "device_style": "accelerator"}) or data
    if _neuron_only(case) is not None:
        return
    before = data.decode("latin-1")
    leaks = [line for line in out.decode("latin-1").splitlines()  # markers' prose may name it: code may not
             if "torch.neuron." in line and not line.lstrip().startswith("#") and line not in before]
    assert not leaks, f"{case.name} in accelerator style names torch.neuron: {leaks}"


def test_set_rng_state_in_accelerator_style_seeds_every_device():
    source = b"import torch_xla.core.xla_model as xm\n\nxm.set_rng_state(1234)\n"
    assert rewrite_bytes(source, device_style="accelerator") == b"import torch\n\ntorch.manual_seed(1234)\n"
    assert rewrite_bytes(source) == b"import torch\n\ntorch.neuron.manual_seed(1234)\n"


def test_a_saved_rng_state_round_trips_as_a_pair():
    source = b"import torch_xla.core.xla_model as xm\n\nstate = xm.get_rng_state()\nxm.set_rng_state(state)\n"
    out = rewrite_bytes(source).decode()
    assert "manual_seed" not in out and "TODO" not in out  # neither half alone: both calls, natively
    assert "state = torch.neuron.get_rng_state()\ntorch.neuron.set_rng_state(state)\n" in out
    portable = rewrite_bytes(source, device_style="accelerator").decode()
    assert "torch.neuron" not in portable and "get_rng_state()" in portable and "set_rng_state(state)" in portable
    # the saved value read elsewhere too (its type changes): both calls are left for a person, the read marked
    # with both native reads (NM253), the restore by NM199
    shared = source + b"print(state + 1)\n"
    out = rewrite_bytes(shared).decode()
    assert out.count("TODO(neuron-migrate NM253)") == 1 and out.count("TODO(neuron-migrate NM199)") == 1
    assert "state = xm.get_rng_state()" in out and "xm.set_rng_state(state)" in out
    assert rewrite_bytes(out.encode()) is None


def test_a_seed_only_shown_becomes_the_seed_last_set_and_only_with_unsafe_fixes():
    source = (b"import torch_xla.core.xla_model as xm\n\ndef seed(s, device):\n"
              b"    xm.set_rng_state(s, device=device)\n    print(f'seed {xm.get_rng_state(device=device)}')\n")
    out = rewrite_bytes(source, unsafe_fixes=True).decode()
    assert "torch.neuron.manual_seed(s)\n" in out and "print(f'seed {torch.neuron.initial_seed()}')" in out
    assert "torch_xla" not in out and rewrite_bytes(out.encode(), unsafe_fixes=True) is None
    held = rewrite_bytes(source, unsafe_fixes=False).decode()  # unsafe: held back, listed, not marked
    assert "xm.get_rng_state(device=device)" in held and "TODO" not in held
    assert "torch.neuron.manual_seed(s)\n" in held and rewrite_bytes(held.encode(), unsafe_fixes=False) is None


SPELLING = re.compile(r"""\}\.(neuron|accelerator)\.|['"]torch\.(neuron|accelerator)\.""")
# Outside the Target: code that runs torch (doctor, verify) and the catalogue's documentation of its rows.
NOT_GENERATED = ("neuron_migrate/rules/target.py", "neuron_migrate/verify/", "neuron_migrate/cli/doctor.py",
                 "neuron_migrate/catalogue.py")


def test_only_the_target_spells_the_device_modules():
    found = []
    for path in sorted((ROOT / "neuron_migrate").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(NOT_GENERATED):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SPELLING.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "device-module spellings outside rules/target.py (use the Target):\n" + "\n".join(found)


def test_a_rename_row_without_a_portable_spelling_is_refused():
    with pytest.raises(catalogue.CatalogueError, match="runs on Trainium only"):
        catalogue._rename("x.toml", "NM999", {"names": ["torch_xla.f"], "neuron": "torch.neuron.f",
                                             "accelerator": "torch.neuron.f", "import": "torch"})


def test_on_inf2_the_xla_inference_path_is_kept_with_a_note():
    from neuron_migrate.engine.python import process_python
    from neuron_migrate.settings import Settings

    # torch_neuronx.trace, and optimum-neuron's inference classes (NM524 on a Trn2 / Trn3 target)
    for name, moved in (("serve_inf2.py", "NM501"), ("optimum_serving_inf2.py", "NM524")):
        case = FIXTURES / "NM5xx-inference" / name
        for rewrite in (False, True):
            result = process_python(str(case), case.read_bytes(), Settings(instance="inf2"), rewrite)
            codes = {f.code for f in result.findings}
            assert "NM510" in codes and moved not in codes and "NM506" not in codes, (name, codes)
        assert not result.changed, name
        trn2 = {f.code for f in process_python(str(case), case.read_bytes(), Settings(), False).findings}
        assert moved in trn2 and "NM510" not in trn2, (name, trn2)
