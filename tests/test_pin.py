"""The pin plan, the requirements and shell formats, the notebook entry point, and the `pin` command."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet

from neuron_migrate.findings import FileResult
from neuron_migrate.pin import plan as planning
from neuron_migrate.pin.matrix import matrix
from neuron_migrate.pin.requirements import process_requirements
from neuron_migrate.pin.shell import commands, pin_install_command, pip_install, process_shell
from neuron_migrate.settings import Settings
from tests.helpers import cli

F214 = matrix().select("2.34", "2.14")  # the newest row: Neuron 2.34.0 has the torch 2.14 family only
F233 = matrix().select("2.33", "2.14")  # Neuron 2.33.1: torch 2.13 and 2.14 families
INDEX = "--extra-index-url https://pip.repos.neuron.amazonaws.com"


@pytest.mark.parametrize("name, spec, reason", [
    ("torch-neuronx", "==2.8.0.2.10.16998", "is the legacy XLA build (the native backend starts at 2.13.3)"),
    ("torch-neuronx", "==2.9.*", "is the legacy XLA build (the native backend starts at 2.13.3)"),
    ("torch-neuronx", "~=2.1.2", "is the legacy XLA build (the native backend starts at 2.13.3)"),
    ("torch-neuronx", "==2.13.*", "belongs to the torch 2.13 family"),
    ("torch-neuronx", "==2.15.3.0.*", "does not admit 2.14.3.0"),
    ("torch-neuronx", ">=2.13", "also admits 2.13.3.0 of the torch 2.13 family"),
    ("torch-neuronx", "", "is not pinned"),
    ("torch", ">=2.1", "also admits 2.13.0 of the torch 2.13 family"),
    ("torch", "==2.13.0+cpu", "belongs to the torch 2.13 family"),
    ("torch", "==2.1.2", "does not admit 2.14.0"),
    ("torchvision", ">=0.16", "also admits 0.28.0 of the torch 2.13 family"),
    ("torchaudio", ">=2.0", "also admits the legacy release 2.9.0"),
    ("neuronx-cc", "==2.12.68.0", "does not admit 2.28.7631.0"),
])
def test_misfits_in_a_release_with_two_families(name, spec, reason):
    assert planning.misfit(name, SpecifierSet(spec), F233, matrix()) == reason


@pytest.mark.parametrize("name, spec, reason", [
    ("torch-neuronx", "==2.14.3.0.*", "does not admit 2.14.3.1"),  # the 2.33 family excludes the 2.34 build
    ("torch-neuronx", "==2.14.3.0.4021", "does not admit 2.14.3.1"),
    ("torch-neuronx", "==2.13.*", "does not admit 2.14.3.1"),
    ("torch-neuronx", "==2.9.*", "is the legacy XLA build (the native backend starts at 2.13.3)"),
    ("torch", "==2.13.0", "does not admit 2.14.0"),
    ("torch", ">=2.1", "also admits the legacy release 2.9.0"),
    ("torchvision", ">=0.16", "also admits the legacy release 0.24.0"),
])
def test_misfits_in_neuron_234(name, spec, reason):
    assert planning.misfit(name, SpecifierSet(spec), F214, matrix()) == reason


@pytest.mark.parametrize("name, spec", [
    ("torch-neuronx", "==2.14.*"), ("torch-neuronx", "==2.14.3.0.*"), ("torch-neuronx", "==2.14.3.0.4021"),
    ("torch", "==2.14.0"), ("torch", "==2.14.0+cpu"), ("torch", ">=2.14,<2.15"), ("neuronx-cc", "==2.*"),
    ("neuronx-cc", ">=2.28,<3"), ("nki", ""), ("nki", ">=0.7"), ("torchvision", "==0.29.0"),
])
def test_fits_in_neuron_233(name, spec):
    assert planning.misfit(name, SpecifierSet(spec), F233, matrix()) is None


@pytest.mark.parametrize("name, spec", [
    ("torch-neuronx", "==2.14.*"), ("torch-neuronx", "==2.14.3.1.*"), ("torch-neuronx", "==2.14.3.1.4021"),
    ("torch-neuronx", ">=2.14.3.1,<2.15"), ("torch", "==2.14.0"), ("torch", "==2.14.0+cpu"), ("neuronx-cc", "==2.*"),
    ("nki", ""), ("torchvision", "==0.29.0"), ("torchao-neuron", "==0.18.0+neuron.1"),
])
def test_fits_in_neuron_234(name, spec):
    assert planning.misfit(name, SpecifierSet(spec), F214, matrix()) is None


@pytest.mark.parametrize("sdk, old, new", [
    ("2.34", "torch-neuronx==2.14.3.0.*", "torch-neuronx==2.14.*"),  # the family spelling of the docs
    ("2.34", "torch-neuronx==2.9.0.2.15.32035", "torch-neuronx==2.14.3.1.*"),  # pinned exactly: the release
    ("2.34", "torch-neuronx>=2.9", "torch-neuronx==2.14.*"),
    ("2.33", "torch-neuronx==2.9.0.2.15.32035", "torch-neuronx==2.14.3.0.*"),
    ("2.33", "torch-neuronx==2.13.*", "torch-neuronx==2.14.3.0.*"),
    ("2.33.0", "torch-neuronx==2.14.3.1.*", "torch-neuronx==2.14.3.0.*"),
])
def test_torch_neuronx_pins_per_release(sdk, old, new):
    text = f"{INDEX}\ntorch==2.14.0\n{old}\nneuronx-cc==2.*\nnki\n"
    assert new_text(text, neuron_sdk=sdk) == text.replace(old, new)


def test_torch_is_pinned_wherever_torch_neuronx_is():
    text = f"{INDEX}\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n"
    assert new_text(text) == f"{INDEX}\ntorch-neuronx==2.14.*\ntorch==2.14.0\nneuronx-cc==2.*\nnki\n"
    result = pin_text(text, rewrite=False)
    assert [(f.line, f.code) for f in result.findings] == [(2, "NM603")]
    assert "`torch==2.14.0`" in result.findings[0].message and "Neuron 2.34.0" in result.findings[0].message
    assert pin_text("numpy\ntorch==2.1.0\n", rewrite=False).findings == []  # torch alone is not a Neuron project


def test_a_comment_that_describes_the_old_pin_goes_with_it():
    text = (f"{INDEX}\ntorch==2.9.0  # matches the XLA build\ntorch-neuronx==2.9.0.2.15.32035  # legacy XLA build\n"
            "neuronx-cc==2.*   # compiler, keep\nnki\ntorchvision==0.24.0  # our own comment\n")
    assert new_text(text) == (f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==2.14.3.1.*\nneuronx-cc==2.*   # compiler, keep\n"
                              "nki\ntorchvision==0.29.0  # our own comment\n")


def test_a_comment_that_describes_the_old_pin_goes_with_it_in_a_setup_py_list_too():
    from neuron_migrate.pin.setup_py import process_setup_py

    text = ('from setuptools import setup\n\nREQUIRED = [\n    "torch-neuronx==2.1.2.2.0",  # the XLA build\n'
            '    "torch==2.1.2"  # tested with 2.1.2\n    , "neuronx-cc==2.*",  # compiler, keep\n'
            '    "nki", "torchvision==0.16.0",  # our own comment\n]\nsetup(name="x", install_requires=REQUIRED)\n')
    result = process_setup_py("setup.py", text.encode(), Settings(unsafe_fixes=True), True)
    out = result.new_bytes.decode()
    assert out == text.replace('"torch-neuronx==2.1.2.2.0",  # the XLA build', '"torch-neuronx==2.14.3.1.*",').replace(
        '"torch==2.1.2"  # tested with 2.1.2', '"torch==2.14.0"').replace('0.16.0', '0.29.0')
    assert process_setup_py("setup.py", out.encode(), Settings(unsafe_fixes=True), True).new_bytes is None


def test_check_and_rewrite_report_the_same_for_a_pyproject_with_project_and_poetry_dependencies():
    """[project] gets torch and nki; Poetry's table beside it is then complete in both commands (check makes no
    edit, but must not report an addition that rewrite will not make)."""
    from neuron_migrate.pin.pyproject import process_pyproject

    text = ('[project]\nname = "x"\nversion = "0"\ndependencies = ["torch-neuronx==2.1.2.*", "neuronx-cc>=2.12",'
            ' "torch-xla>=2.1"]\n\n[tool.poetry.dependencies]\npython = "^3.12"\n'
            'torch-neuronx = { version = "2.1.2.2.0", source = "neuron" }\ntorch-xla = "^2.1"\n\n'
            '[[tool.poetry.source]]\nname = "neuron"\nurl = "https://pip.repos.neuron.amazonaws.com"\n'
            'priority = "supplemental"\n')

    def found(rewrite: bool) -> list[tuple[int, str, str]]:
        result = process_pyproject("pyproject.toml", text.encode(), Settings(unsafe_fixes=True), rewrite)
        return [(f.line, f.code, f.message) for f in result.findings]

    assert found(False) == found(True)
    assert [(line, code) for line, code, _ in found(False)] == [
        (4, "NM602"), (4, "NM603"), (4, "NM601"), (8, "NM602"), (9, "NM601")]  # one NM603 for the list


def test_a_release_without_the_chosen_torch_is_an_error_that_names_the_alternative():
    with pytest.raises(ValueError, match=r"Neuron 2.34.0 has no torch-neuronx family for torch 2.13.*2.33.1"):
        matrix().select("2.34", "2.13")
    assert matrix().select(None, "2.13").sdk == "2.33.1"  # torch alone: the newest release that has it
    assert matrix().select().sdk == "2.34.0"


@pytest.mark.parametrize("spec, new", [
    ("accelerate>=0.25", "accelerate>=1.13.0"),
    ("accelerate>=0.25,<2", "accelerate>=1.13.0,<2"),
    ("accelerate==0.34.2", "accelerate>=1.13.0"),
    ("accelerate<1.0", "accelerate>=1.13.0"),
    ("transformers[torch]>=4.36,<5 ; python_version >= '3.9'", "transformers[torch]>=5.4.0 ; python_version >= '3.9'"),
    ("transformers!=5.0.0,>=4.40", "transformers>=5.4.0,!=5.0.0"),
])
def test_hugging_face_floors(spec, new):
    text = f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n{spec}\n"
    assert new_text(text) == text.replace(spec, new)
    assert [f.code for f in pin_text(text, rewrite=False).findings] == ["NM610"]


@pytest.mark.parametrize("spec", ["accelerate", "accelerate>=1.13", "accelerate==1.15.0", "transformers>=5.4,<6",
                                  "transformers~=5.18"])
def test_hugging_face_entries_at_the_floor_are_left_alone(spec):
    text = f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n{spec}\n"
    assert pin_text(text, rewrite=False).findings == []
    assert pin_text("accelerate>=0.25\n", rewrite=False).findings == []  # not a Neuron project: not ours


NATIVE = f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n"


def test_upstream_torchao_becomes_torchao_neuron_on_trn3_with_234():
    text = NATIVE + "torchao>=0.15  # quantization\n"
    assert new_text(text, instance="trn3") == NATIVE + "torchao-neuron==0.18.0+neuron.1  # quantization\n"
    both = NATIVE + "torchao-neuron\ntorchao==0.18.0\n"
    assert new_text(both, instance="trn3") == NATIVE + "torchao-neuron==0.18.0+neuron.1\n"
    assert new_text(text, instance="trn3", unsafe_fixes=False) == text  # a package swap is an unsafe fix


@pytest.mark.parametrize("settings, where", [
    ({}, "on trn2 with Neuron 2.34.0"),
    ({"instance": "trn2"}, "on trn2 with Neuron 2.34.0"),
    ({"instance": "trn3", "neuron_sdk": "2.33"}, "on trn3 with Neuron 2.33.1"),
], ids=["default target", "trn2", "trn3 before TorchAO Neuron"])
def test_upstream_torchao_without_torchao_neuron_is_marked_not_changed(settings, where):
    text = NATIVE + "torchao==0.9.0  # quantization\n"
    found = pin_text(text, rewrite=False, **settings).findings
    assert [(f.line, f.code, f.fixable) for f in found] == [(6, "NM614", False)]
    assert where in found[0].message and "torchao-neuron" in found[0].message and "--instance trn3" in found[0].message
    out = new_text(text, **settings)
    marker = f"# TODO(neuron-migrate NM614): no TorchAO on {settings.get('instance', 'trn2')}: target trn3"
    assert out.splitlines()[5] == marker + "; neuron-migrate explain NM614"
    assert out.splitlines()[6] == "torchao==0.9.0  # quantization" and new_text(out, **settings) == out


@pytest.mark.parametrize("text", [
    "torch==2.14.0\ntorchao==0.9.0\n",  # a GPU project: not a Neuron install
    NATIVE + "torchao-neuron==0.18.0+neuron.1\n",  # the Neuron build, by its own name
    NATIVE + "torchaudio==2.14.0\n",  # a name that starts the same
], ids=["gpu list", "torchao-neuron", "torchaudio"])
def test_torchao_look_alikes_are_not_marked(text):
    assert [f.code for f in pin_text(text, rewrite=False).findings if f.code == "NM614"] == []


PYPROJECT_NEURON = '[project]\nname = "trainer"\nrequires-python = "{spec}"\n' \
    'dependencies = ["torch==2.14.0", "torch-neuronx==2.14.*", "neuronx-cc==2.*", "nki"]\n'


@pytest.mark.parametrize("spec, below", [(">=3.10", "3.10"), (">=3.8,<4", "3.8"), ("~=3.11", "3.11"),
                                         (">3.10", "3.10")])
def test_a_python_floor_below_the_family_is_reported(spec, below):
    text = PYPROJECT_NEURON.format(spec=spec)
    found = pin_text(text, rewrite=False, path="pyproject.toml").findings
    assert [(f.line, f.code) for f in found] == [(3, "NM615")]
    assert f"admits Python {below}," in found[0].message and "raise the floor to `>=3.12`" in found[0].message
    out = new_text(text, path="pyproject.toml")
    assert out.splitlines()[2].startswith("# TODO(neuron-migrate NM615): raise the Python floor to >=3.12;")
    assert new_text(out, path="pyproject.toml") == out


@pytest.mark.parametrize("text, path", [
    (PYPROJECT_NEURON.format(spec=">=3.12"), "pyproject.toml"),
    (PYPROJECT_NEURON.format(spec=">=3.12,<3.15"), "pyproject.toml"),
    ('[project]\nname = "gpu"\nrequires-python = ">=3.10"\ndependencies = ["torch==2.14.0"]\n', "pyproject.toml"),
    ('[project]\nname = "tool"\nrequires-python = ">=3.10"\ndependencies = ["requests"]\n', "pyproject.toml"),
], ids=["at the floor", "bounded", "gpu project", "no torch"])
def test_a_python_floor_is_left_alone_where_it_fits_or_the_project_is_not_neuron(text, path):
    assert [f.code for f in pin_text(text, rewrite=False, path=path).findings if f.code in ("NM607", "NM615")] == []


@pytest.mark.parametrize("path, text, line", [
    ("setup.py", 'from setuptools import setup\n\nsetup(\n    name="trainer",\n    python_requires=">=3.10",\n'
                 '    install_requires=["torch-neuronx==2.14.*", "torch==2.14.0"],\n)\n', 5),
    ("setup.cfg", "[metadata]\nname = trainer\n\n[options]\npython_requires = >=3.9\ninstall_requires =\n"
                  "    torch-neuronx==2.14.*\n    torch==2.14.0\n", 5),
    ("environment.yml", "name: trainer\ndependencies:\n  - python>=3.10\n  - pip\n  - pip:\n"
                        "    - --extra-index-url https://pip.repos.neuron.amazonaws.com\n"
                        "    - torch-neuronx==2.14.*\n    - torch==2.14.0\n", 3),
    ("pyproject.toml", '[tool.poetry]\nname = "trainer"\n\n[tool.poetry.dependencies]\npython = "^3.10"\n'
                       'torch-neuronx = "2.14.*"\ntorch = "2.14.0"\n', 5),
], ids=["setup.py", "setup.cfg", "conda", "poetry"])
def test_a_python_floor_below_the_family_in_every_project_file(path, text, line):
    found = [f for f in pin_text(text, rewrite=False, path=path).findings if f.code in ("NM607", "NM615")]
    assert [(f.line, f.code) for f in found] == [(line, "NM615")]


def test_libtorch_neuronx_lite_is_flagged_in_its_last_release():
    text = NATIVE + "libtorch-neuronx-lite==2.14.*\n"
    found = pin_text(text, rewrite=False).findings
    assert [(f.line, f.code) for f in found] == [(6, "NM611")]
    assert "Neuron 2.34.0 is the last release that includes libtorch-neuronx-lite" in found[0].message
    assert pin_text(text, rewrite=False, neuron_sdk="2.33").findings == []
    out = new_text(text)
    assert out.splitlines()[5].startswith("# TODO(neuron-migrate NM611)") and new_text(out) == out


@pytest.mark.parametrize("entry, library", [
    ("neuronx-distributed==0.15.*", "neuronx-distributed"),
    ("optimum-neuron[neuronx]>=0.0.28  # training", "optimum-neuron"),
    ("transformers-neuronx", "transformers-neuronx"),
    ("neuronx_distributed_training==1.6.0", "neuronx-distributed-training"),
])
def test_a_library_built_on_torch_xla_is_marked_not_removed(entry, library):
    text = NATIVE + entry + "\n"
    found = pin_text(text, rewrite=False).findings
    assert [(f.line, f.code) for f in found] == [(6, "NM613")]
    assert f"installs {library}, which is built on torch_xla" in found[0].message
    out = new_text(text)
    assert out == NATIVE + "# TODO(neuron-migrate NM613): replace this torch_xla-based library; neuron-migrate " \
        "explain NM613\n" + entry + "\n"
    assert new_text(out) == out


@pytest.mark.parametrize("entry, advice", [
    ("optimum-neuron[vllm]==0.3.0", "serve large language models with vLLM Neuron"),
    ("optimum-neuron[neuronx]==0.0.24", "use `transformers.Trainer`"),
    ("optimum-neuron", "use `transformers.Trainer`"),
])
def test_optimum_neuron_installed_to_serve_gets_the_serving_advice(entry, advice):
    found = pin_text(NATIVE + entry + "\n", rewrite=False).findings
    assert [f.code for f in found] == ["NM613"]
    assert advice in found[0].message
    assert ("Trainer" in found[0].message) == (advice != "serve large language models with vLLM Neuron")


@pytest.mark.parametrize("library", ["optimum-neuron[neuronx]==0.0.24", "optimum-neuron[vllm]==0.3.0",
                                     "neuronx_distributed"])
def test_a_list_that_keeps_such_a_library_is_marked_and_its_versions_left(library):
    # the library requires torch-xla or an older torch: native pins beside it could not be installed together
    text = f"torch-neuronx==2.1.2\n{library}\ndatasets\n"
    result = pin_text(text, rewrite=False)
    assert sorted(f.code for f in result.findings) == ["NM604", "NM613"]
    out = new_text(text)
    assert out.splitlines() == [
        INDEX, "torch-neuronx==2.1.2",
        "# TODO(neuron-migrate NM613): replace this torch_xla-based library; neuron-migrate explain NM613",
        library, "datasets"]
    assert new_text(out) == out  # the index is not left for a second run
    assert {f.code for f in pin_text(out, rewrite=False).findings} == {"NM900"}  # the marker stays until resolved
    # once the library is gone (the marker resolved with it), the list is pinned
    gone = "".join(line + "\n" for line in out.splitlines() if "NM613" not in line and line != library)
    assert {f.code for f in pin_text(gone, rewrite=False).findings} >= {"NM602", "NM603"}


def test_a_library_in_a_dockerfile_install_is_marked_and_the_command_completed():
    text = 'FROM ubuntu:24.04\nRUN pip install "neuronx-distributed==0.15.*" torch==2.14.0 \\\n' \
        f'    "torch-neuronx==2.14.*" "neuronx-cc==2.*" nki {INDEX}\n'
    from neuron_migrate.pin.dockerfile import process_dockerfile

    result = process_dockerfile("Dockerfile", text.encode(), Settings(unsafe_fixes=True), True)
    assert [f.code for f in result.findings] == ["NM613"]
    out = result.new_bytes.decode()
    assert out.splitlines()[1] == \
        "# TODO(neuron-migrate NM613): replace this torch_xla-based library; neuron-migrate explain NM613"
    assert out.replace(out.splitlines()[1] + "\n", "") == text
    assert process_dockerfile("Dockerfile", out.encode(), Settings(unsafe_fixes=True), True).changed is False


@pytest.mark.parametrize("path, text", [
    ("requirements.txt", f"{INDEX}\ntorch-xla==2.1.0\ntorch-neuronx==2.1.2.2.0.0\ntorch==2.1.2\n"),
    ("setup.py", "from setuptools import setup\n\nsetup(name='x', install_requires=['torch-xla==2.1.0', "
                 "'torch-neuronx==2.1.2.2.0.0', 'torch==2.1.2'])\n"),
    ("pyproject.toml", '[project]\nname = "x"\ndependencies = ["torch-xla==2.1.0", "torch-neuronx==2.1.2.2.0.0", '
                       '"torch==2.1.2"]\n'),
], ids=["requirements", "setup.py", "pyproject"])
def test_a_plain_pin_that_keeps_torch_xla_changes_nothing_beside_it(path, text):
    """torch-xla requires its own torch: a safe run that keeps it (its removal is unsafe) adds no native pin
    beside it, and holds back every change it waits for, as many as `pin --unsafe-fixes` makes."""
    plain = pin_text(text, path=path, unsafe_fixes=False)
    assert not plain.changed or "torch-xla==2.1.0" in plain.new_bytes.decode() and \
        "2.14" not in plain.new_bytes.decode()
    held = sorted(f.code for f in plain.findings if f.held_back)
    assert "NM601" in held and "NM602" in held
    assert not any(f.fixable for f in plain.findings if f.code in planning.CHANGE_CODES)
    checked = pin_text(text, rewrite=False, path=path, unsafe_fixes=False)
    assert sorted(f.code for f in checked.findings if f.held_back) == held
    unsafe = pin_text(text, path=path)
    out = unsafe.new_bytes.decode()
    assert "torch-xla" not in out and "torch==2.14.0" in out
    assert sorted(code for code, n in unsafe.applied.items() if code in planning.CHANGE_CODES
                  for _ in range(n)) == held


def pin_text(text: str, rewrite: bool = True, path: str = "requirements.txt", **settings) -> FileResult:
    """As `pin --unsafe-fixes` does it (torch-xla removed too); `unsafe_fixes=False`: plain `pin`."""
    from neuron_migrate.pin.conda import process_conda_env
    from neuron_migrate.pin.pyproject import process_pyproject
    from neuron_migrate.pin.setup_cfg import process_setup_cfg
    from neuron_migrate.pin.setup_py import process_setup_py

    settings.setdefault("unsafe_fixes", True)
    process = {"pyproject.toml": process_pyproject, "setup.py": process_setup_py, "setup.cfg": process_setup_cfg,
               "environment.yml": process_conda_env}.get(path, process_requirements)
    return process(path, text.encode(), Settings(**settings), rewrite)


def new_text(text: str, **settings) -> str:
    result = pin_text(text, **settings)
    return result.new_bytes.decode() if result.changed else text


def test_entries_for_other_platforms_and_pythons_are_left_alone():
    text = (f"{INDEX}\ntorch==2.1.0 ; sys_platform == 'darwin'\ntorch==2.1.0 ; python_version < '3.0'\n"
            "torch==2.14.0\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n")
    assert pin_text(text).changed is False


def test_markers_extras_and_local_labels_are_kept():
    text = f"{INDEX}\ntorch[opt]==2.1.2+cpu ; platform_machine == 'x86_64'  # cpu\ntorch-neuronx==2.1.*\n"
    assert new_text(text) == (f"{INDEX}\ntorch[opt]==2.14.0+cpu ; platform_machine == 'x86_64'  # cpu\n"
                              "torch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n")


def test_family_213_is_chosen_by_the_setting():
    text = f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\ntorchvision==0.29.0\n"
    assert new_text(text, torch="2.13") == (f"{INDEX}\ntorch==2.13.0\ntorch-neuronx==2.13.3.0.*\nneuronx-cc==2.*\n"
                                            "nki\ntorchvision==0.28.0\n")


def test_crlf_and_missing_final_newline_are_kept():
    text = "torch-xla==2.1.0\r\nnumpy\r\ntorch-neuronx==2.1.*"
    assert new_text(text) == (f"{INDEX}\r\nnumpy\r\ntorch-neuronx==2.14.*\r\ntorch==2.14.0\r\nneuronx-cc==2.*\r\nnki")


def test_templated_versions_get_a_marker_and_are_not_guessed():
    text = f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==${{NEURONX_VERSION}}\nneuronx-cc==2.*\nnki\n"
    result = pin_text(text, rewrite=False)
    assert [(f.line, f.code) for f in result.findings] == [(3, "NM606")]
    assert "takes its version from a template" in result.findings[0].message
    out = new_text(text)
    assert out.splitlines()[3] == "torch-neuronx==${NEURONX_VERSION}"
    assert out.splitlines()[2] == "# TODO(neuron-migrate NM606): pin this requirement by hand; neuron-migrate explain NM606"
    assert new_text(out) == out


def test_included_files_count_for_packages_and_index(tmp_path):
    (tmp_path / "requirements.txt").write_text(f"{INDEX}\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n")
    dev = tmp_path / "requirements-dev.txt"
    dev.write_text("-r requirements.txt\npytest\ntorchvision\n")
    result = process_requirements(str(dev), dev.read_bytes(), Settings(unsafe_fixes=True), True)
    assert result.new_bytes.decode() == "-r requirements.txt\npytest\ntorchvision==0.29.0\n"


def test_an_included_file_of_any_name_is_pinned_with_its_includer(tmp_path):
    # requirements.txt names the Neuron packages; `-r requirements/base.txt` (a name no pattern matches) holds
    # torch: both are one pip install, so base.txt's torch joins the family (and gets nothing added)
    (tmp_path / "requirements").mkdir()
    base = tmp_path / "requirements" / "base.txt"
    base.write_text("numpy<2\ntorch==2.1.2  # CPU wheels are fine\n")
    (tmp_path / "requirements.txt").write_text(f"{INDEX}\n-r requirements/base.txt\ntorch-neuronx==2.14.*\n"
                                                 "neuronx-cc==2.*\nnki\n")
    lookalike = tmp_path / "requirements" / "notes.txt"  # not included: not a requirements file
    lookalike.write_text("torch==2.1.2\n")
    check = cli("check", "--no-cache", "--format", "concise", str(tmp_path))
    assert check.stdout.splitlines()[:1] == [
        f"{base}:2:1: NM602 [*] `torch==2.1.2` does not admit 2.14.0; the torch 2.14 family of Neuron 2.34.0 "
        "needs `torch==2.14.0`"]
    assert "notes.txt" not in check.stdout and "requirements.txt" not in check.stdout
    assert cli("pin", str(tmp_path)).returncode == 0
    assert base.read_text() == "numpy<2\ntorch==2.14.0  # CPU wheels are fine\n"
    assert lookalike.read_text() == "torch==2.1.2\n"
    assert cli("pin", "--diff", str(tmp_path)).stdout == ""
    # alone (nothing includes it), base.txt is a CPU requirements file: out of scope
    (tmp_path / "requirements.txt").unlink()
    alone = tmp_path / "requirements-cpu.txt"
    alone.write_text("torch==2.1.2\n")
    assert process_requirements(str(alone), alone.read_bytes(), Settings(unsafe_fixes=True), True).findings == []


def test_two_findings_of_one_hashed_line_share_one_marker():
    text = (f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\n"
            "torch-xla==2.1.2 --hash=sha256:" + "a" * 64 + "\n")
    result = pin_text(text)
    assert [(f.line, f.code) for f in result.findings] == [(5, "NM605"), (5, "NM605")]  # add nki, remove torch-xla
    out = result.new_bytes.decode()
    marker = "# TODO(neuron-migrate NM605): hash-pinned file: regenerate it; neuron-migrate explain NM605\n"
    assert out == text.replace("torch-xla==", marker + "torch-xla==")
    assert new_text(out) == out


def test_a_file_without_neuron_packages_is_out_of_scope():
    assert pin_text("torch==2.1.0\ntorchvision\n", rewrite=False).findings == []
    # names near the libraries built on torch_xla: optimum (without -neuron), distributed, neuronx-cc alone is in
    # scope through the native packages, but these are not
    for text in ("torch==2.1.0\noptimum[onnxruntime]\n", "torch==2.1.0\ntorch-distributed-tools\n",
                 "transformers==4.40\nneuronx\n"):
        assert pin_text(text, rewrite=False).findings == [], text
        assert pin_text(text).new_bytes is None, text


def test_codes_can_be_turned_off_and_unsafe_removal_needs_unsafe_fixes():
    text = f"{INDEX}\ntorch==2.1.0\ntorch-xla==2.1.0\ntorch-neuronx==2.14.*\nneuronx-cc==2.*\nnki\n"
    assert new_text(text, ignore=frozenset({"NM602"})) == text.replace("torch-xla==2.1.0\n", "")
    # without --unsafe-fixes torch-xla stays, and torch 2.14 could not be installed beside it: nothing changes
    assert new_text(text, unsafe_fixes=False) == text


# -- shell ------------------------------------------------------------------------------------------------

def test_lexer_keeps_quoted_words_and_continuations():
    text = 'FOO=1 sudo -H pip3 install "a b" c\\\n  \'d==1.*\' # comment\necho x; pip install e'
    assert [[w.value for w in c] for c in commands(text)] == [
        ["FOO=1", "sudo", "-H", "pip3", "install", "a b", "c", "d==1.*"], ["echo", "x"], ["pip", "install", "e"]]


@pytest.mark.parametrize("line, requirements", [
    ("pip install -U torch-neuronx", ["torch-neuronx"]),
    ("python3 -m pip install --no-cache-dir -r req.txt torchvision", ["torchvision"]),
    ("uv pip install --index-url https://x torch", ["torch"]),
    ("/opt/venv/bin/pip install -c constraints.txt nki", ["nki"]),
    ("!pip install -q torch-xla", ["torch-xla"]),
    ("%pip install torch-neuronx", ["torch-neuronx"]),
    ("pip install torch-neuronx 2>/dev/null > install.log 2>&1", ["torch-neuronx"]),
    ("pip install nki > /tmp/log", ["nki"]),
    ('pip install "torch-neuronx==2.14.*" ">=2"', ["torch-neuronx==2.14.*", ">=2"]),
    ("pip uninstall -y torch-xla", None),
    ("pip download torch-xla", None),
    ("python train.py --pip install", None),
    ('pip install "torch-neuronx==', None),  # a quote never closed (a truncated file): not read
    ("pip install 'torch-neuronx==2.14.*' torch-xla 'x", None),
])
def test_pip_install_commands(line, requirements):
    command = pip_install(commands(line)[0])
    assert (command and command.texts()) == requirements


def test_a_truncated_install_line_is_left_as_it_is():
    """A quote opened and never closed: nothing is appended (an append there landed inside the quote, and every
    later run appended again)."""
    text = '#!/bin/bash\npip install "torch-neuronx=='
    assert process_shell("s.sh", text.encode(), Settings(unsafe_fixes=True), True).new_bytes is None
    assert [w.closed for w in commands(text)[0]] == [True, True, False]


def test_notebook_install_line_is_pinned():
    pinned = pin_install_command('!pip install "torch-neuronx==2.9.*" torch-xla', Settings(unsafe_fixes=True))
    assert pinned.text == f'!pip install "torch-neuronx==2.14.*" torch==2.14.0 "neuronx-cc==2.*" nki {INDEX}'
    assert [(f.line, f.col, f.code) for f in pinned.findings] == [
        (1, 1, "NM604"), (1, 14, "NM602"), (1, 14, "NM603"), (1, 37, "NM601")]  # one NM603 for the line
    assert pinned.findings[2].message.startswith("`torch`, `neuronx-cc`, `nki` are missing: the native backend")
    assert pinned.findings[2].message.endswith("needs `torch==2.14.0`, `neuronx-cc==2.*`, `nki`")
    assert pinned.installs >= {"torch-neuronx", "neuronx-cc", "nki"}
    assert pin_install_command(pinned.text, Settings(unsafe_fixes=True)).findings == []


def test_notebook_install_line_knows_earlier_cells():
    pinned = pin_install_command("%pip install torchvision", Settings(unsafe_fixes=True),
                                 present=frozenset({"torch-neuronx", "neuronx-cc", "nki"}))
    assert pinned.text == "%pip install torchvision==0.29.0"
    checked = pin_install_command("%pip install torchvision", Settings(unsafe_fixes=True), rewrite=False,
                                  present=frozenset({"torch-neuronx"}))
    assert checked.text == "%pip install torchvision" and [f.code for f in checked.findings] == ["NM602"]


def test_a_command_installing_only_legacy_packages_is_left_for_a_person():
    text = "pip install torch-neuronx==2.14.* neuronx-cc==2.* nki\npip install libneuronxla\n"
    result = process_shell("s.sh", text.encode(), Settings(unsafe_fixes=True), True)
    assert result.new_bytes.decode().splitlines()[1].startswith("# TODO(neuron-migrate NM606): pin this requirement")
    assert "`libneuronxla` is all this command installs" in [f for f in result.findings if f.code == "NM606"][0].message
    assert result.new_bytes.decode().splitlines()[2] == "pip install libneuronxla"


def test_removing_the_last_continued_argument_keeps_the_command_whole():
    text = "pip install \\\n    torch-neuronx==2.14.* \\\n    torch-xla\necho done\n"
    result = process_shell("s.sh", text.encode(), Settings(unsafe_fixes=True), True)
    assert result.new_bytes.decode() == ("pip install \\\n    torch-neuronx==2.14.* \\\n    torch==2.14.0 \\\n"
                                         "    \"neuronx-cc==2.*\" \\\n"
                                         f"    nki \\\n    {INDEX}\necho done\n")


# -- the command ------------------------------------------------------------------------------------------

LEGACY = "torch==2.1.0\ntorch-neuronx==2.1.*\n"


def test_pin_diff_writes_nothing_and_pin_is_idempotent(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text(LEGACY)
    (tmp_path / "train.py").write_text("import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n")
    diff = cli("pin", "--diff", str(tmp_path))
    assert diff.returncode == 1
    assert "+torch==2.14.0" in diff.stdout and "train.py" not in diff.stdout
    assert req.read_text() == LEGACY
    assert cli("pin", str(tmp_path), "--torch", "2.13").returncode == 0
    assert req.read_text() == f"{INDEX}\ntorch==2.13.0\ntorch-neuronx==2.13.3.0.*\nneuronx-cc==2.*\nnki\n"
    assert "xm.xla_device()" in (tmp_path / "train.py").read_text()
    again = cli("pin", "--diff", "--torch", "2.13", str(tmp_path))
    assert again.returncode == 0 and again.stdout == ""


def test_pin_takes_the_family_from_the_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.neuron-migrate]\ntorch = "2.13"\n')
    req = tmp_path / "requirements.txt"
    req.write_text(LEGACY)
    assert cli("pin", str(tmp_path)).returncode == 0
    assert "torch==2.13.0\n" in req.read_text()
    assert "+torch==2.14.0" in cli("pin", "--diff", "--torch", "2.14", str(tmp_path)).stdout


def test_check_and_rewrite_run_the_pin_handlers(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text(LEGACY)
    check = cli("check", str(tmp_path))
    assert check.returncode == 1
    assert "requirements.txt:2:1: NM602 [*] `torch-neuronx==2.1.*` is the legacy XLA build" in check.stdout
    assert cli("rewrite", str(tmp_path)).returncode == 0
    assert "torch-neuronx==2.14.*" in req.read_text()


def test_bad_toml_is_an_error_and_the_file_is_kept(tmp_path):
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\ndependencies = ["torch-xla"\n')
    proc = cli("pin", str(tmp_path))
    assert proc.returncode == 2
    assert "pyproject.toml: not valid TOML" in proc.stderr
    assert bad.read_text() == '[project]\ndependencies = ["torch-xla"\n'


def test_rewrite_on_the_bundled_example_updates_its_requirements(tmp_path):
    import shutil

    from tests.helpers import ROOT

    example = tmp_path / "xla_mnist"
    shutil.copytree(ROOT / "examples" / "xla_mnist", example)
    assert cli("rewrite", "--unsafe-fixes", str(example)).returncode == 1  # the NM405 note in run.sh is left
    # the heading that named the XLA stack goes with it
    assert (example / "requirements.txt").read_text() == (
        f"{INDEX}\ntorch==2.14.0\ntorch-neuronx==2.14.3.1.*\nneuronx-cc==2.*\nnki\n")
    again = cli("pin", "--diff", "--unsafe-fixes", str(example))
    assert again.returncode == 0 and again.stdout == ""


def test_invalid_utf8_is_an_error_that_names_the_line(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_bytes(b"torch-xla==2.1\n# caf\xe9\n")
    proc = cli("pin", str(tmp_path))
    assert proc.returncode == 2
    assert "requirements.txt:2: error: bytes are not valid UTF-8 (byte 0xe9)" in proc.stderr
    assert req.read_bytes() == b"torch-xla==2.1\n# caf\xe9\n"


def test_poetry_legacy_package_from_git_is_removed_and_python_checked():
    from neuron_migrate.pin.pyproject import process_pyproject

    text = ('[tool.poetry.dependencies]\npython = "~3.10"\ntorch-neuronx = "2.14.*"\nneuronx-cc = "2.*"\nnki = "*"\n'
            'torch-xla = { git = "https://github.com/pytorch/xla.git", tag = "v2.1.0" }  # legacy\n\n'
            '[[tool.poetry.source]]\nname = "neuron"\nurl = "https://pip.repos.neuron.amazonaws.com"\n')
    checked = process_pyproject("pyproject.toml", text.encode(), Settings(unsafe_fixes=True), False)
    assert [(f.line, f.code) for f in checked.findings] == [(2, "NM607"), (3, "NM603"), (6, "NM601")]
    out = process_pyproject("pyproject.toml", text.encode(), Settings(unsafe_fixes=True), True).new_bytes.decode()
    assert "torch-xla" not in out and 'torch-neuronx = "2.14.*"' in out
    assert out.splitlines()[1].startswith("# TODO(neuron-migrate NM607): widen it to include 3.12")


@pytest.mark.parametrize("image, problem", [
    ("ubuntu:22.04", "is Ubuntu 22.04"),
    ("ubuntu:jammy", "is Ubuntu 22.04"),
    ("python:3.10-slim-bookworm", "has Python 3.10"),
    ("nvidia/cuda:12.1.0-cudnn8-runtime-ubuntu22.04", "is Ubuntu 22.04"),
    ("public.ecr.aws/neuron/pytorch-inference-neuronx:2.5.1-neuronx-py310-sdk2.21.0-ubuntu22.04",
     "is Ubuntu 22.04 and has Python 3.10 and is a legacy XLA torch-neuronx image (PyTorch 2.5)"),
    ("ubuntu:24.04", None), ("python:3.12-slim", None), ("python:3.14", None), ("debian:bookworm", None),
    ("registry.local:5000/base", None), ("${BASE}", None),
])
def test_base_images(image, problem):
    from neuron_migrate.pin.dockerfile import image_problems

    assert " and ".join(image_problems(image)) == (problem or "")


def test_from_uses_the_default_of_a_global_arg():
    from neuron_migrate.pin.dockerfile import process_dockerfile

    text = ("ARG BASE=ubuntu:22.04\nFROM ${BASE} AS build\nARG BASE=ignored\nFROM python:3.12\n"
            "ENV NEURON_RT_LOG_LEVEL=INFO\n")
    result = process_dockerfile("Dockerfile", text.encode(), Settings(unsafe_fixes=True), False)
    assert [(f.line, f.message.split(";")[0]) for f in result.findings] == [
        (2, "`FROM ${BASE}` (`ubuntu:22.04`) is Ubuntu 22.04")]


def test_versions_from_dockerfile_args_are_pinned_where_the_arg_is_set():
    from neuron_migrate.pin.dockerfile import process_dockerfile

    text = ('ARG NEURONX_VERSION=2.1.2.2.0.0\nARG CC_VERSION="2.12.68.0"\nARG TV=0.16.0\nARG TV=0.17.0\n'
            f'RUN pip install "torch-neuronx==${{NEURONX_VERSION}}" neuronx-cc==$CC_VERSION nki torchvision==$TV \\\n'
            f'    {INDEX}\n')
    checked = process_dockerfile("Dockerfile", text.encode(), Settings(unsafe_fixes=True), False)
    assert [f.message.split(";")[0] for f in checked.findings] == [
        "`torch-neuronx==${NEURONX_VERSION}` with `NEURONX_VERSION=2.1.2.2.0.0` is the legacy XLA build "
        "(the native backend starts at 2.13.3)",
        "`torch` is missing: the native backend (torch 2.14 family of Neuron 2.34.0) needs `torch==2.14.0`",
        "`neuronx-cc==$CC_VERSION` with `CC_VERSION=2.12.68.0` does not admit 2.28.7631.0",
        "`torchvision==$TV` takes its version from a template, so `neuron-migrate` leaves it alone",  # TV is set twice
    ]
    out = process_dockerfile("Dockerfile", text.encode(), Settings(unsafe_fixes=True), True).new_bytes.decode()
    assert out.startswith('ARG NEURONX_VERSION=2.14.3.1.*\nARG CC_VERSION="2.*"\nARG TV=0.16.0\nARG TV=0.17.0\n# TODO')
    assert process_dockerfile("Dockerfile", out.encode(), Settings(unsafe_fixes=True), True).changed is False


def test_versions_from_shell_variables_are_pinned_where_the_variable_is_set():
    text = ('export NEURONX_VERSION="2.9.0.2.15.32035"\nTORCH=2.9.0\n'
            f'pip install torch==$TORCH "torch-neuronx==${{NEURONX_VERSION}}" "neuronx-cc==2.*" nki {INDEX}\n')
    out = process_shell("s.sh", text.encode(), Settings(unsafe_fixes=True), True).new_bytes.decode()
    assert out == text.replace("2.9.0.2.15.32035", "2.14.3.1.*").replace("TORCH=2.9.0", "TORCH=2.14.0")


@pytest.mark.parametrize("name, text", [
    ("pyproject.toml", '[project]\nrequires-python = ">=3.8,<3.11"\ndependencies = ["requests"]\n'),
    ("setup.cfg", "[options]\npython_requires = >=3.8,<3.11\ninstall_requires =\n    requests\n"),
    ("environment.yml", "dependencies:\n  - python=3.10\n  - postgresql\n"),
    ("Dockerfile", "FROM ubuntu:22.04\nRUN apt-get update && apt-get install -y postgresql\n"),
])
def test_python_and_images_are_judged_only_for_torch_or_neuron_projects(name, text):
    from neuron_migrate.engine.handlers import process
    from neuron_migrate.engine.discover import kind_of

    assert process(name, text.encode(), kind_of(name), Settings(unsafe_fixes=True), False).findings == []
    with_torch = {"pyproject.toml": text.replace('"requests"', '"torch"'),
                  "setup.cfg": text.replace("requests", "torch"),
                  "environment.yml": text.replace("postgresql", "pytorch=2.1.2"),
                  "Dockerfile": text.replace("postgresql", "postgresql\nENV NEURON_RT_VISIBLE_CORES=0")}[name]
    assert [f.code for f in process(name, with_torch.encode(), kind_of(name), Settings(), False).findings] == [
        "NM608" if name == "Dockerfile" else "NM607"]


@pytest.mark.parametrize("text, name", [
    ("git+https://github.com/huggingface/optimum-neuron.git", "optimum-neuron"),
    ("git+https://github.com/huggingface/optimum-neuron.git@v0.4.5", "optimum-neuron"),
    ("git+ssh://git@github.com/aws-neuron/neuronx-distributed.git", "neuronx-distributed"),
    ("git+https://example.com/mirror.git#egg=neuronx-distributed-training", "neuronx-distributed-training"),
    ("https://example.com/wheels/neuronx_distributed-0.11.0-py3-none-any.whl", "neuronx-distributed"),
    # URLs of anything else are not read as requirements (they were once read as a package named `git` / `https`)
    ("git+https://github.com/huggingface/transformers.git", None),
    ("git+https://github.com/myorg/optimum-neuron-dashboards.git", None),
    ("https://github.com/myorg/tools/archive/main.zip", None),
])
def test_a_url_alone_names_the_xla_stack_library_it_installs(text, name):
    req = planning.parse(text)
    assert (req.name if req is not None else None) == name
    if req is not None:
        assert req.url and req.spec == ""  # never pinned: a URL install is reported, not edited
        issues = planning.plan([text], matrix().family(None), set()).issues
        assert [i.code for i in issues] == ["NM613"]


def test_a_heading_that_names_the_xla_stack_goes_with_its_packages():
    """A whole-line comment in the paragraph of the removed torch-xla that names the XLA stack goes; one that does
    not (`(XLA era)` names no package), and one in another paragraph, stay. Nothing is dropped where no XLA package
    goes (plain `pin` keeps torch-xla)."""
    text = ("# Training stack: PyTorch/XLA on Trainium\n# pinned for the course (XLA era)\ntorch==2.8.0\n"
            "# torch-xla must match torch\ntorch-xla==2.8.1\n\n# XLA metrics dashboards\ntensorboard\n")
    out = pin_text(text).new_bytes.decode()
    assert "PyTorch/XLA" not in out and "torch-xla must match" not in out and "torch-xla==" not in out
    assert out.startswith("# pinned for the course (XLA era)\n--extra-index-url ") and "\ntorch==2.14.0\n" in out
    assert out.endswith("\n\n# XLA metrics dashboards\ntensorboard\n")
    kept = pin_text(text, unsafe_fixes=False)
    assert kept.new_bytes is None or b"# Training stack: PyTorch/XLA on Trainium" in kept.new_bytes

