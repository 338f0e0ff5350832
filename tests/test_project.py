"""The project model (engine/project.py): programs, the files they reach and their targets, read once per run.

Cases are project trees under fixtures/projects/<case>/: `rewrite` (every rule) gives the files in the case's
`expected/` folder (a Python file as `<name>.expected.py`); every other file stays byte-identical (the look-alikes
of each case among them); a second run changes nothing. FINDINGS lists, per case, the codes each file reports.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from neuron_migrate.engine import handlers
from neuron_migrate.engine import project as project_module
from neuron_migrate.engine.discover import discover
from neuron_migrate.engine.project import Module, Project
from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, cli

CASES = sorted(p for p in (FIXTURES / "projects").iterdir() if p.is_dir())
UPDATE = os.environ.get("NEURON_MIGRATE_UPDATE_SNAPSHOTS") == "1"

# case -> {file: the codes `check` reports there}; files not listed report nothing
FINDINGS = {
    "tpu_only": {"flowers_tpu_kaggle.ipynb": {"NM521"}, "train_spawn.py": {"NM521"},
                 "outputs/train_outputs.py": {"NM101", "NM103", "NM107", "NM190"}},
    # one NM521 per program, at its entry: the notebook (compile.py, the helper it imports, keeps its NM510 note)
    # torch_xla features Neuron's XLA stack never ran (GSPMD, Pallas kernels) say TPU; plain data parallelism moves
    # a program that stops unless it runs on TPU, and a demo of torch_xla's scan, are TPU's too; a sibling that only
    # compares with a TPU baseline moves, and a TPU-only feature of one script is not told to the scripts beside it
    "tpu_features": {"train_gspmd.py": {"NM521"}, "train_flash.py": {"NM521"},
                     "train_dp.py": {"NM101", "NM105", "NM106", "NM190"},
                     "train_amp.py": {"NM521"}, "mnist_amp.py": {"NM521"}, "scan_demo.py": {"NM521"},
                     "train_amp_dtype.py": {"NM101", "NM103", "NM190"},
                     # scripts no program imports: the one whose prose says TPU is set aside, the other moves
                     "tutorials/bf16_demo.py": {"NM521"}, "tutorials/fp32_demo.py": {"NM101", "NM190"}},
    "inf2_project": {"hf_vit_inference_on_inf2.ipynb": {"NM521"}, "compile.py": {"NM510"}},
    "gpu_names_trn1": {},
    # one environment per folder: serve/'s requirements keep optimum-neuron[vllm] (XLA stack), so the notebook's
    # neuronx-cc upgrade and the launch script's install there are marked and left as written (NM613); train/, whose
    # requirements name the library only in a comment, is pinned
    "xla_environment": {"serve/requirements.txt": {"NM604", "NM613"}, "serve/serve.sh": {"NM604", "NM613"},
                        "serve/deploy_server.ipynb": {"NM613"}, "train/finetune.ipynb": {"NM602", "NM603"}},
    # bfloat16 switches: NM403 marks where the launch script sets one; a read of it in the program's files is no
    # finding, a read of one nothing in the program sets is a finding without a marker (a commented-out export in
    # another folder's script sets nothing)
    "bf16_reads": {"run_train.sh": {"NM403"}, "optim_utils.py": {"NM405"},
                   "train.py": {"NM101", "NM103", "NM107", "NM190"}},
    # a launch script turns XLA_USE_BF16 on for a program whose own options (in its arguments module) include
    # `--bf16`: the setting and its comment go, the launch line passes the option (NM256); the look-alike's program
    # reads the switch itself, so its setting stays, marked (NM403)
    "bf16_option": {"gpt/run_pretrain.sh": {"NM256"}, "gpt/pretrain.py": {"NM101", "NM103", "NM107", "NM190"},
                    "gpt_env/run_pretrain.sh": {"NM403"}, "gpt_env/pretrain.py": {"NM101", "NM107", "NM190"}},
    "neuron_accelerate": {"default_config.yaml": {"NM511"},
                          "requirements.txt": {"NM602", "NM603", "NM604"}},
    "device_crossing": {"train.py": {"NM103", "NM117", "NM190"}, "utils.py": {"NM101", "NM190"}},
    "lazy_helper": {"train.py": {"NM101", "NM103", "NM107", "NM190"}, "model_utils.py": {"NM301", "NM314", "NM401"},
                    "gpu_utils.py": {"NM301", "NM401"}},
    # a library whose functions import torch_xla on their XLA branch is not an XLA program: a GPU script that
    # imports it keeps its CUDA calls (the library's own XLA calls are marked where they stand)
    "xla_branch_library": {"kernels/interop.py": {"NM199"}},
    # the launch environment of a program moving to neuron: a DLAMI venv, a SageMaker container, Ray's XLA config
    # (the Inf2 server's venv, the GPU estimator, the native venv and the project's own `TorchXLAConfig` stay)
    "launch_environment": {"run_train.sh": {"NM616"}, "launch_sagemaker.py": {"NM617"}, "ray_launch.py": {"NM523"},
                           "Dockerfile": {"NM608"}, "train.py": {"NM101", "NM103", "NM107", "NM190"},
                           "serve/serve_inf2.py": {"NM510", "NM521"}},
    # relative imports and a `sys.path.insert` from `__file__`: the device name crosses into the package's and the
    # common folder's modules, kept on both sides (a GPU script's own `sys.path` addition and its "cuda" stay)
    "package_paths": {"trainer/train.py": {"NM103", "NM117", "NM190"},
                      "trainer/devices.py": {"NM101", "NM117", "NM190"},
                      "scripts/evaluate.py": {"NM103", "NM117", "NM190"},
                      "common/placement.py": {"NM101", "NM117", "NM190"}},
    # a Trn1 training job (its README names the instance) is set aside with its helper, requirements and launch
    # script, one NM521 at its entry; the same job launched on a trn2.48xlarge, whose README compares with Trn1
    # prices, moves with its requirements
    "trn1_training": {"phase1/pretrain.py": {"NM521"},
                      "phase2/pretrain.py": {"NM101", "NM105", "NM106", "NM107", "NM190", "NM210", "NM220"},
                      "phase2/modeling.py": {"NM190", "NM203"},
                      "phase2/requirements.txt": {"NM602", "NM603", "NM604", "NM610"}},
    # a notebook that activates the XLA stack's DLAMI venv by a `!source` line and in a `%%bash` cell that launches
    # a moving program (NM616 on each); the native venv's notebook and an Inf2 notebook's venv (set aside) stay
    "notebook_venv": {"finetune.ipynb": {"NM616"}, "train.py": {"NM101", "NM103", "NM107", "NM190"},
                      "serve/serve_vit_on_inf2.ipynb": {"NM510", "NM521"}},
    # where a sample runs, told by files no import links to it: the README one folder up, the instance types of the
    # job definition beside the container's folder; the scripts of one sample (`train_torchrun.py` beside
    # `train.py`, a loose `build.py`) follow the one that names Trn1. The look-alikes (a README that names Trn2
    # too, a job definition on trn2.48xlarge, a sample whose script names Trn2) move
    "sample_folders": {"samples/bert/pretrain.py": {"NM521"}, "batch/docker/allreduce.py": {"NM521"},
                       "mlp/train.py": {"NM521"}, "mlp/train_torchrun.py": {"NM521"}, "mlp/build.py": {"NM521"},
                       "samples_v2/bert/pretrain.py": {"NM101", "NM103", "NM107", "NM190"},
                       "batch_next/docker/allreduce.py": {"NM101", "NM103", "NM190", "NM201", "NM204", "NM205"},
                       "mlp_next/train.py": {"NM101", "NM103", "NM107", "NM190"},
                       "mlp_next/train_torchrun.py": {"NM101", "NM103", "NM105", "NM106", "NM107", "NM190",
                                                      "NM201"}},
    "shared_helper": {"train.py": {"NM101", "NM103", "NM190"}, "train_tpu.py": {"NM521"}, "common.py": {"NM522"}},
    # a script run.sh starts (no `__main__` block) imports torch_xla inside `main`: a program that moves, its CUDA
    # calls with it (in the first run, as a second would); its helper's GPU functions serve the GPU trainers
    # optimum-neuron's training classes: a launch script, a Metaflow flow's `entrypoint_args` and a notebook's
    # `!torchrun` line pass Neuron-only arguments, so those programs keep the classes (NM509 says what to port); the
    # program launched with transformers' own arguments only gets transformers' classes, and a server's own
    # `--tensor_parallel_size` is nobody's business
    "optimum_launchers": {"finetune/run_clm.py": {"NM509"}, "sft/train_sft.py": {"NM509"},
                          "notebook/scripts/train.py": {"NM509"}, "classify/train.py": {"NM508"}},
    # a subclass script imports the trainer module whose `xm.RateTracker()` gets NM244's class in the same run: it
    # imports the class from there; the other files of each folder (a module imported whole, a base whose tracker
    # takes arguments) import it from the folder's training_progress.py, which the run writes; an evaluation module
    # without torch_xla stays as it is
    "shared_rate_tracker": {"trainer_base.py": {"NM101", "NM103", "NM107", "NM190", "NM244"},
                            "train_bf16.py": {"NM102", "NM103", "NM190", "NM244"},
                            "train_plain.py": {"NM190", "NM244"}, "own_copy/base.py": {"NM190", "NM244"},
                            "own_copy/run.py": {"NM190", "NM244"}},
    # two scripts of one folder that use torch_xla's test helpers, and import a module of their folder by its bare
    # name, import the helpers from one module the run writes there (examples/training_progress.py: only the
    # helpers they import). Copies of their own for: a script alone in its folder (tools), the scripts of a package
    # (pkg), scripts beside a training_progress.py of the project's own (vendored), scripts that import no module
    # of their folder (loose: they may run as `python -m loose.train_a`), scripts a Dockerfile copies by name
    # (shipped), and scripts that import another training_progress through `sys.path` (elsewhere/exp). The module
    # whose RateTracker is no torch_xla one (metrics.py) is no source of the class
    "shared_progress_helpers": {
        **{f"{folder}/{name}": {"NM101", "NM107", "NM190", "NM244"}
           for folder in ("pkg", "vendored", "loose", "shipped", "elsewhere/exp") for name in ("train_a.py", "train_b.py")},
        "examples/train_mnist.py": {"NM101", "NM107", "NM190", "NM244"},
        "examples/train_cifar.py": {"NM101", "NM107", "NM190", "NM244"},
        "tools/train_alone.py": {"NM101", "NM107", "NM190", "NM244"}, "shipped/Dockerfile": {"NM608"}},
    "launched_xla_script": {"pretrain.py": {"NM101", "NM103", "NM107", "NM190", "NM322"},
                            "data_utils.py": {"NM211"}},
    # the trainer package redefines torch.cuda names at import time (a no-op set_device, FloatTensor on the XLA
    # device): its program's calls of them stay, those it does not redefine are fixed or marked; the evaluation
    # program, which does not import them, keeps its marker. The backend the launch script passes ("xla") becomes
    # "neuron" at the call, each process bound to its local rank; the GPU script (nccl) stays
    "patched_cuda": {"pretrain.py": {"NM322", "NM323"}, "evaluate.py": {"NM101", "NM190", "NM323"},
                     "trainer/loop.py": {"NM101", "NM103", "NM190"},
                     "trainer/setup.py": {"NM101", "NM190", "NM201"}},
    # the base class compiles its training step (NM110: the model is compiled instead); the subclass that runs the
    # step eagerly under eager mode keeps it eager with set_stance("force_eager") (NM259); the script that keeps
    # the compiled step only loses its eager-mode switch
    "eager_subclass": {"examples/trainer_base.py": {"NM101", "NM104", "NM107", "NM110", "NM190"},
                       "examples/eager/train_eager.py": {"NM103", "NM190", "NM259"},
                       "examples/eager/train_eager_compiled_step.py": {"NM103", "NM190"}},
}


def inputs(case):
    return sorted(p for p in case.rglob("*") if p.is_file() and "expected" not in p.relative_to(case).parts)


def copy_case(case, tmp_path):
    work = tmp_path / case.name
    shutil.copytree(case, work, ignore=shutil.ignore_patterns("expected"))
    return work


def test_every_case_is_listed():
    assert sorted(c.name for c in CASES) == sorted(FINDINGS)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_rewrite_gives_expected_files(case, tmp_path):
    work = copy_case(case, tmp_path)
    first = run([str(work)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert not first.errors
    write_results(first)
    for source in inputs(case):
        relative = source.relative_to(case)
        expected = case / "expected" / relative
        if relative.suffix == ".py":
            expected = expected.with_name(relative.stem + ".expected.py")
        if UPDATE and expected.exists():
            expected.write_bytes((work / relative).read_bytes())
        want = expected.read_bytes() if expected.exists() else source.read_bytes()
        assert (work / relative).read_bytes().decode() == want.decode(), f"{case.name}/{relative}"
        if relative.suffix == ".py":
            compile((work / relative).read_text(), str(relative), "exec")
    # the files the run creates (a module of shared helpers): `expected/` holds them, and no input of that name
    created = {e.relative_to(case / "expected").with_name(e.name.replace(".expected", ""))
               for e in (case / "expected").rglob("*") if e.is_file()} - {s.relative_to(case) for s in inputs(case)}
    for relative in sorted(created):
        expected = case / "expected" / relative.with_name(relative.stem + ".expected" + relative.suffix)
        if UPDATE:
            expected.write_bytes((work / relative).read_bytes())
        assert (work / relative).read_text() == expected.read_text(), f"{case.name}/{relative} (created)"
        compile((work / relative).read_text(), str(relative), "exec")
    made = {os.path.relpath(r.path, work) for r in first.changed} - {str(s.relative_to(case)) for s in inputs(case)}
    assert made == {str(r) for r in created}
    second = run([str(work)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert [r.path for r in second.changed] == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_reports_the_codes_of_each_file(case, tmp_path):
    work = copy_case(case, tmp_path)
    result = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    found: dict[str, set[str]] = {}
    for f in result.findings:
        found.setdefault(os.path.relpath(f.path, work).replace(os.sep, "/"), set()).add(f.code)
    assert found == FINDINGS[case.name]


def test_nm521_names_the_target_and_where_it_was_read(tmp_path):
    work = copy_case(FIXTURES / "projects" / "inf2_project", tmp_path)
    result = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    note = next(f for f in result.findings if f.code == "NM521")
    assert note.path.endswith("hf_vit_inference_on_inf2.ipynb")
    assert "Inferentia 2 (Inf2)" in note.message and "hf_vit_inference_on_inf2.ipynb: its path says `inf2`" in note.message
    assert "keep it on the XLA stack, whose inference stays in maintenance on Inf2" in note.message
    assert "move the job to Trn2" in note.message


def test_nm522_marker_names_both_programs_and_is_placed_once(tmp_path):
    work = copy_case(FIXTURES / "projects" / "shared_helper", tmp_path)
    result = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    note = next(f for f in result.findings if f.code == "NM522")
    assert "train_tpu.py runs on TPU" in note.message and "train.py moves to neuron" in note.message
    write_results(run([str(work)], Settings(unsafe_fixes=True), rewrite=True, jobs=1))
    text = (work / "common.py").read_text()
    assert text.count("TODO(neuron-migrate NM522)") == 1 and text.endswith((FIXTURES / "projects" / "shared_helper"
                                                                             / "common.py").read_text())


def test_the_targets_key_states_what_the_evidence_does_not_say(tmp_path):
    work = copy_case(FIXTURES / "projects" / "lazy_helper", tmp_path)
    (work / "pyproject.toml").write_text('[tool.neuron-migrate]\ntargets = { "train.py" = "tpu" }\n')
    out = cli("check", "--no-cache", "--show-project", "--format", "concise", str(work))
    assert "train.py: target TPU (set aside)" in out.stdout
    assert "evidence [config] [tool.neuron-migrate] targets" in out.stdout
    assert "NM314" not in out.stdout  # model_utils.py is reached from a TPU program now: it does not move


def test_the_targets_key_overrides_a_name(tmp_path):
    work = copy_case(FIXTURES / "projects" / "tpu_only", tmp_path)
    (work / "pyproject.toml").write_text('[tool.neuron-migrate]\ntargets = { "train_spawn.py" = "trn2" }\n')
    result = run([str(work)], Settings(targets=((str(work / "train_spawn.py"), "trn2"),)), rewrite=False, jobs=1)
    codes = {f.code for f in result.findings if f.path.endswith("train_spawn.py")}
    assert "NM521" not in codes and "NM101" in codes


def test_the_cache_key_holds_the_project_facts(tmp_path, monkeypatch):
    """A file's cached result depends on what the project told it: renaming a sibling notebook changes it."""
    monkeypatch.setenv("NEURON_MIGRATE_CACHE_DIR", str(tmp_path / "cache"))
    work = copy_case(FIXTURES / "projects" / "inf2_project", tmp_path)
    first = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1, use_cache=True)
    assert {f.code for f in first.findings if f.path.endswith("compile.py")} == {"NM510"}
    os.rename(work / "hf_vit_inference_on_inf2.ipynb", work / "hf_vit_inference.ipynb")
    (work / "README.md").write_text("# ViT\n")
    second = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1, use_cache=True)
    codes = {f.code for f in second.findings if f.path.endswith("compile.py")}
    assert "NM510" not in codes and codes & {"NM501", "NM502"}


def test_show_project_prints_programs_files_and_evidence(tmp_path):
    work = copy_case(FIXTURES / "projects" / "tpu_only", tmp_path)
    out = cli("check", "--no-cache", "--show-project", "--format", "concise", ".", cwd=work)
    assert out.stdout.splitlines()[:3] == ["flowers_tpu_kaggle.ipynb: target TPU (set aside)",
                                           "    evidence [path] flowers_tpu_kaggle.ipynb: its path says `tpu`",
                                           "    reaches flowers_data.py"]
    assert "train_spawn.py: target TPU (set aside)" in out.stdout
    assert "outputs/train_outputs.py: target unknown (moves to neuron)" in out.stdout


def test_evidence_places(tmp_path):
    """Each kind of place a target is read from: launch script, estimator, Dockerfile, requirements, README."""
    files = {
        "launch/run.sh": "export PJRT_DEVICE=TPU\npython3 train.py --epochs 1\n",
        "launch/train.py": "import torch_xla\n",
        "sm/start.py": 'from sagemaker.pytorch import PyTorch\nPyTorch(entry_point="serve.py", source_dir="code",\n'
                       '        instance_type="ml.inf2.xlarge").fit()\n',
        "sm/code/serve.py": "import torch_neuronx\n",
        "docker/Dockerfile": "FROM us-central1-docker.pkg.dev/tpu-pytorch-releases/docker/xla:r2.5.0_3.10_tpuvm\n",
        "docker/app.py": "import torch_xla\nif __name__ == '__main__':\n    pass\n",
        "classic/requirements.txt": "torch-neuron==1.13.1.*\nneuron-cc[tensorflow]\n",
        "classic/run.py": "import torch_neuronx\nif __name__ == '__main__':\n    pass\n",
        "readme/README.md": "Runs on a TPU v4 pod slice.\n",
        "readme/main.py": "import torch_xla\nif __name__ == '__main__':\n    pass\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    project = Project([str(tmp_path)], targets, Settings(unsafe_fixes=True))
    got = {os.path.relpath(p.entry.full, tmp_path): (p.target, [e.what for e in p.evidence])
           for p in project.programs}
    assert got["launch/train.py"] == ("tpu", ["sets `PJRT_DEVICE=TPU`"])
    assert got["sm/code/serve.py"] == ("inf2", ["an estimator runs it on `ml.inf2.xlarge`"])
    assert got["docker/app.py"][0] == "tpu" and got["docker/app.py"][1][0].startswith("FROM `us-central1")
    assert got["classic/run.py"] == ("inf1", ["installs torch-neuron (Inf1)"])
    assert got["readme/main.py"] == ("tpu", ["names `TPU v4`"])


TRN1_TRAIN = ("import torch_xla.core.xla_model as xm\n\nif __name__ == '__main__':\n"
              "    loss = xm.xla_device()\n    loss.backward()\n")


def _notebook(*cells) -> str:
    return json.dumps({"cells": [{"cell_type": kind, "source": text} for kind, text in cells], "metadata": {},
                       "nbformat": 4, "nbformat_minor": 5})


def test_evidence_read_where_the_tutorials_put_it(tmp_path):
    """An estimator's instance in a variable, a `%%bash` cell's continued launch line, the family named in a
    comment; and a notebook whose prose names several targets passes none to what it runs (no conflict)."""
    files = {
        "sm/launch.ipynb": _notebook(("code", 'instance_type = "ml.trn1.32xlarge"\nest = PyTorch(\n'
                                              '    entry_point="pretrain.py", source_dir="code", '
                                              'instance_type=instance_type)\n')),
        "sm/code/pretrain.py": XLA_TRAIN,
        "nb/tune.ipynb": _notebook(("markdown", "This tutorial was created on a trn1.32xlarge."),
                                   ("code", "%%bash\ntorchrun --nproc_per_node=32 \\\n    ../scripts/run_sft.py \\\n"
                                            "    --epochs 3\n")),
        "scripts/run_sft.py": XLA_TRAIN,
        "mnist/train.py": "import torch_xla.core.xla_model as xm\n\n# a NeuronCore on a Trn1 instance\n"
                          "device = xm.xla_device()\nif __name__ == '__main__':\n    pass\n",
        "clip/CLIPBase.ipynb": _notebook(("markdown", "Tested on trn1 instances."),
                                         ("code", 'RUN_CMD = f"""{env} torchrun --nproc_per_node={n} \\\n'
                                                  '    run_clip.py \\\n    --output_dir out"""\n'
                                                  'subprocess.run(RUN_CMD, shell=True)\nprint("python train.py")\n')),
        "clip/run_clip.py": XLA_TRAIN,
        "succ/tune.ipynb": _notebook(("markdown", "Trainium is the successor of [Inferentia](https://aws.amazon.com/"
                                                  "ec2/instance-types/inf1/). We use a trn1.32xlarge."),
                                     ("code", "!torchrun --nproc_per_node=32 ../scripts/sft.py\n")),
        "scripts/sft.py": XLA_TRAIN,
        "chess/Trainium2_Deploy.ipynb": _notebook(("markdown", "You should see 2 cores on a trn1.2xlarge."),
                                                  ("code", "import torch_neuronx\n")),
        "both/compare.ipynb": _notebook(("markdown", "Runs on inf2.xlarge and on trn2.48xlarge."),
                                        ("code", "!python bench.py\n")),
        "both/bench.py": XLA_TRAIN,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    project = Project([str(tmp_path)], targets, Settings())
    got = {os.path.relpath(p.entry.full, tmp_path): (p.target, [e.what.replace(str(tmp_path) + os.sep, "")
                                                                for e in p.evidence], bool(p.conflict))
           for p in project.programs}
    assert got["sm/code/pretrain.py"] == ("trn1", ["an estimator runs it on `ml.trn1.32xlarge`"], False)
    assert got["scripts/run_sft.py"] == ("trn1", ["nb/tune.ipynb runs it (names `trn1.32xlarge`)"], False)
    assert got["mnist/train.py"] == ("trn1", ["names `Trn1`"], False)
    assert got["clip/run_clip.py"] == ("trn1", ["clip/CLIPBase.ipynb runs it (names `trn1`)"], False)
    assert got["scripts/sft.py"] == ("trn1", ["succ/tune.ipynb runs it (names `trn1.32xlarge`)"], False)
    assert got["both/bench.py"] == (None, [], False)
    assert got["chess/Trainium2_Deploy.ipynb"] == ("neuron", ["its path says `Trainium2`"], False)


def test_a_trn1_program_is_set_aside_whether_it_trains_or_infers(tmp_path):
    """The native backend runs on Trn2 / Trn3 only: on Trn1 the XLA stack stays, for training as for inference."""
    (tmp_path / "README.md").write_text("Launch on a trn1.32xlarge.\n")
    (tmp_path / "requirements.txt").write_text("torch-neuronx==2.1.2.*\n")  # Trn1's XLA stack: no Trn2 evidence
    (tmp_path / "pretrained_train.py").write_text(TRN1_TRAIN)
    (tmp_path / "infer.py").write_text("import torch_neuronx\n\nif __name__ == '__main__':\n"
                                       "    traced = torch_neuronx.trace(model, example)\n")
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    project = Project([str(tmp_path)], targets, Settings(unsafe_fixes=True))
    for name in ("pretrained_train.py", "infer.py"):
        facts = project.of(str(tmp_path / name), "python")
        assert facts.target == "trn1" and [e.split(os.sep)[-1] for e in facts.evidence] == [
            "README.md:1: names `trn1.32xlarge`"]
    result = run([str(tmp_path)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert not result.changed
    notes = {os.path.basename(f.path): f.message for f in result.findings if f.code == "NM521"}
    assert sorted(notes) == ["infer.py", "pretrained_train.py"]
    assert "Trainium 1 (Trn1)" in notes["pretrained_train.py"] and "README.md:1: names `trn1.32xlarge`" in notes["infer.py"]
    # the user says the job goes to Trn2: both move
    project = Project([str(tmp_path)], targets, Settings(unsafe_fixes=True, instance="trn2"))
    assert project.of(str(tmp_path / "pretrained_train.py"), "python").target is None


def test_a_program_set_aside_without_xla_imports_is_told_when_it_would_change(tmp_path):
    """An Inf2 notebook with nothing to migrate is held silently; one that installs optimum-neuron (which the
    rewrite would otherwise pin) gets its NM521, and nothing is written either way."""
    (tmp_path / "quiet_on_inf2.ipynb").write_text(_notebook(("code", "import torch\nprint(torch.ones(2))\n")))
    (tmp_path / "tune_on_inf2.ipynb").write_text(_notebook(("code", "%pip install optimum-neuron==0.0.24\n"),
                                                          ("code", "import torch\nprint(torch.ones(2))\n")))
    result = run([str(tmp_path)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert not result.changed
    assert {(os.path.basename(f.path), f.code) for f in result.findings} == {("tune_on_inf2.ipynb", "NM521")}


def test_a_notebooks_install_line_answers_whether_it_would_change_before_its_code_is_read(tmp_path, monkeypatch):
    """The pass that asks whether a held notebook reports more than its platform's notes stops at its first other
    finding: a pinned install line answers before the Python cells are decided, unless Python refuses them."""
    from neuron_migrate.engine.context import PROBE
    from neuron_migrate.files import notebook

    (tmp_path / "quiet_on_inf2.ipynb").write_text(_notebook(("code", "import torch\nprint(torch.ones(2))\n")))
    (tmp_path / "tune_on_inf2.ipynb").write_text(_notebook(("code", "%pip install optimum-neuron==0.0.24\n"),
                                                          ("code", "import torch\nprint(torch.ones(2))\n")))
    probed: list[str] = []
    process_python = notebook.process_python

    def counted(path, data, settings, rewrite):
        if PROBE.get() is not None:
            probed.append(os.path.basename(path))
        return process_python(path, data, settings, rewrite)

    (tmp_path / "broken_on_inf2.ipynb").write_text(_notebook(("code", "%pip install optimum-neuron==0.0.24\n"),
                                                            ("code", "return torch.ones(2)\n")))
    monkeypatch.setattr(notebook, "process_python", counted)

    def outcome(settings: Settings) -> tuple:
        result = run([str(tmp_path)], settings, rewrite=False, jobs=1)
        return sorted((os.path.basename(f.path), f.code) for f in result.findings), result.errors

    findings, errors = outcome(Settings())
    assert findings == [("tune_on_inf2.ipynb", "NM521")] and [os.path.basename(p) for p, _ in errors] == [
        "broken_on_inf2.ipynb"]
    assert probed == ["quiet_on_inf2.ipynb"]  # the notes pass found the broken cell's error first: no probe
    # without the platform's notes the probe is the first pass over the notebooks: a module Python refuses is decided
    no_notes = Settings(ignore=frozenset({"NM510", "NM513", "NM520"}))
    probed.clear()
    early = outcome(no_notes)
    assert sorted(probed) == ["broken_on_inf2.ipynb", "quiet_on_inf2.ipynb"] and early[1]
    monkeypatch.setattr(notebook, "_compiles", lambda module: False)  # every probe decides the Python cells
    assert outcome(no_notes) == early


class Unshared:
    """In place of `python.SHARED_TREES`: no pass over a file shares anything with another."""

    def get(self):
        return None

    def set(self, _value):
        return None

    def reset(self, _token):
        pass


INF2_SERVE = ("from optimum.neuron import NeuronModelForCausalLM\n\n"
              "if __name__ == '__main__':\n    model = NeuronModelForCausalLM.from_pretrained('gpt2', export=True)\n")


def test_a_set_aside_files_two_passes_read_one_tree(tmp_path, monkeypatch):
    """A set-aside entry is decided for its platform's notes, then for whether it would report more: LibCST
    parses each text once for both (python.SHARED_TREES), and the findings are those of two separate parses."""
    from neuron_migrate.engine import python

    (tmp_path / "README.md").write_text("Compile the model for inf2.xlarge.\n")
    # a device string compared: the notes are not decided on Python's tree (engine/notes.py), LibCST parses (the
    # rules engine/treecheck.py decides on Python's tree are left to LibCST too: this is about LibCST's trees)
    (tmp_path / "serve.py").write_text(INF2_SERVE + "    if args.device == 'cpu':\n        model = model.float()\n")
    parsed: list[str] = []
    parse_module = python.parse_module
    monkeypatch.setattr(python, "parse_module", lambda text: parsed.append(text) or parse_module(text))

    def findings():
        return sorted((f.line, f.col, f.code, f.message) for f in run([str(tmp_path)], Settings(), rewrite=False,
                                                                      jobs=1).findings)

    on_tree = findings()
    monkeypatch.setattr(python, "decide_on_tree", lambda *args: None)
    parsed.clear()
    shared = findings()
    assert shared == on_tree
    assert {code for _, _, code, _ in shared} == {"NM510"}  # the note, and nothing would change: no NM521
    assert parsed and len(parsed) == len(set(parsed))
    once = len(parsed)

    monkeypatch.setattr(python, "SHARED_TREES", Unshared())  # every pass parses for itself
    parsed.clear()
    assert findings() == shared
    assert len(parsed) > once


def test_a_set_aside_notebook_s_passes_read_its_json_and_its_cells_once(tmp_path, monkeypatch):
    """A held notebook's notes pass, the first cell its NM521 is placed in and the pass that asks whether it would
    report more share its JSON and what Python says of each cell, a cell Python refuses too (python.Shared); the
    findings are those of passes that each read the notebook for themselves."""
    from neuron_migrate.engine import python
    from neuron_migrate.files import notebook

    (tmp_path / "quiet_on_inf2.ipynb").write_text(_notebook(
        ("code", "import torch\n"), ("code", "print(torch.ones(2)\n"), ("markdown", "# Inf2"),
        ("code", "  x = torch.zeros(3)\n  print(x)\n")))
    (tmp_path / "tune_on_inf2.ipynb").write_text(_notebook(("code", "%pip install optimum-neuron==0.0.24\n"),
                                                          ("code", "import torch\nprint(torch.ones(2)\n")))
    compiled: list[str] = []
    read: list[str] = []
    compiled_cell, loads = notebook._compiled_cell, notebook.json.loads
    monkeypatch.setattr(notebook, "_compiled_cell", lambda cell: compiled.append(cell.source) or compiled_cell(cell))

    def counted(text, **kwargs):
        if kwargs.get("object_pairs_hook") is notebook._unique_keys:
            read.append(text)
        return loads(text, **kwargs)

    monkeypatch.setattr(notebook.json, "loads", counted)

    def outcome() -> list[tuple]:
        result = run([str(tmp_path)], Settings(), rewrite=False, jobs=1)
        return sorted((os.path.basename(f.path), f.line, f.col, f.cell, f.code, f.message) for f in result.findings)

    shared = outcome()
    assert [(name, code) for name, *_, code, _ in shared] == [("tune_on_inf2.ipynb", "NM521")]
    assert len(read) == len(set(read)) == 2 and len(compiled) == len(set(compiled)) == 5  # each code cell once

    monkeypatch.setattr(python, "SHARED_TREES", Unshared())  # every pass reads for itself
    monkeypatch.setattr(notebook, "SHARED_TREES", Unshared())
    read.clear()
    compiled.clear()
    assert outcome() == shared
    assert len(read) > 2 and len(compiled) > 5


@pytest.mark.parametrize("files, target, conflict", [
    # a Trn2 project whose README compares with Trn1 prices: the launch script's instance decides
    ({"README.md": "About 30% cheaper than on trn1.32xlarge.\n", "run.sh": "python train.py --instance trn2\n"},
     None, False),
    # the README alone names Trn1 and the project installs torch-neuronx: Trn1's XLA stack
    ({"README.md": "Tested on trn1.2xlarge.\n", "requirements.txt": "torch-neuronx\n"}, "trn1", False),
    # a README that names Trn1 and Trn2 tells none
    ({"README.md": "Runs on trn1.32xlarge and trn2.48xlarge.\n"}, None, False),
    # two launch scripts start the program on Trn1 and on Trn2: not guessed
    ({"run_trn1.sh": "python train.py --instance trn1\n", "run_trn2.sh": "python train.py --instance trn2\n"},
     None, True),
], ids=["trn2 project naming trn1 prices", "trn1 readme", "readme names both", "two launches"])
def test_trn1_evidence_beside_trn2_evidence(tmp_path, files, target, conflict):
    (tmp_path / "train.py").write_text(TRN1_TRAIN)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    facts = Project([str(tmp_path)], targets, Settings()).of(str(tmp_path / "train.py"), "python")
    assert (facts.target if facts else None) == target
    assert bool(facts and facts.conflict) is conflict
    codes = _codes(tmp_path)["train.py"]
    assert ("NM101" in codes) is (target is None and not conflict)
    assert ("NM522" in codes) is conflict and ("NM521" in codes) is (target is not None)


def test_the_model_reads_json_of_a_broken_notebook_and_bad_python_without_failing(tmp_path):
    (tmp_path / "broken.ipynb").write_text("{not json")
    (tmp_path / "bad.py").write_text("def (:\n  import torch_xla\n")
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    project = Project([str(tmp_path)], targets, Settings(unsafe_fixes=True))
    assert json.dumps(project.report())


def test_the_model_costs_little_beside_the_run(tmp_path):
    """The model reads lines, not trees: a few hundred files take well under a second."""
    for i in range(300):
        (tmp_path / f"mod{i}.py").write_text(f"import mod{(i + 1) % 300}\nimport torch_xla\n" + "x = 1\n" * 200)
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    start = time.perf_counter()
    project = Project([str(tmp_path)], targets, Settings(unsafe_fixes=True))
    assert time.perf_counter() - start < 2.0
    assert len(project.modules["" + str(tmp_path / "mod0.py")].edges) == 1


@pytest.mark.parametrize(("code", "top"), [
    ("import torch_xla.core.xla_model as xm\n", True),
    ("try:\n    import torch_xla\nexcept ImportError:\n    torch_xla = None\n", True),
    ("if USE_XLA:\n    from torch_xla.core import xla_model as xm\n", True),
    ("def device():\n    import torch_xla.core.xla_model as xm\n    return xm.xla_device()\n", False),
    ("async def device():\n    if True:\n        import torch_neuronx\n", False),
    ("class Exporter:\n    def export(self, t):\n        from torch_xla.utils.dlpack import to_dlpack\n", False),
    ("@cache\ndef device():\n    import torch_xla\n", False),
    ("def to_hlo(\n    graph,\n) -> None:\n    from torch_xla.stablehlo import save_torch_model_as_stablehlo\n", False),
    ("default = 1\nif default:\n    import torch_xla\n", True),
])
def test_an_xla_import_counts_for_importers_only_outside_functions(code, top):
    module = Module("m.py", "/p/m.py", "/p")
    project_module._read_code(module, code)
    assert module.legacy and module.legacy_top == top


LEGACY_VENV_SCRIPT = "source /opt/aws_neuronx_venv_pytorch_2_8/bin/activate\ntorchrun --nproc_per_node=2 train.py\n"
XLA_TRAIN = "import torch_xla.core.xla_model as xm\n\nif __name__ == '__main__':\n    print(xm.xla_device())\n"
GPU_TRAIN = "import torch\n\nif __name__ == '__main__':\n    print(torch.device('cuda'))\n"


def _codes(work, **settings) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for f in run([str(work)], Settings(**settings), rewrite=False, jobs=1).findings:
        found.setdefault(os.path.relpath(f.path, work).replace(os.sep, "/"), set()).add(f.code)
    return found


@pytest.mark.parametrize("files, reported", [
    ({"train.py": XLA_TRAIN, "run.sh": LEGACY_VENV_SCRIPT}, True),
    ({"train.py": GPU_TRAIN, "run.sh": LEGACY_VENV_SCRIPT}, False),  # nothing moves: the venv is not ours to judge
    ({"run.sh": 'export NEURON_CC_FLAGS="--model-type transformer"\n' + LEGACY_VENV_SCRIPT}, True),  # legacy itself
    ({"run.sh": "export PJRT_DEVICE=TPU\n" + LEGACY_VENV_SCRIPT, "train.py": XLA_TRAIN}, False),  # a TPU script
    ({"train.py": XLA_TRAIN, "run.sh": LEGACY_VENV_SCRIPT.replace("pytorch_2_8", "pytorch_2_14")}, False),
], ids=["moving program", "gpu project", "xla variables", "tpu script", "a native family's version"])
def test_a_legacy_dlami_venv_is_reported_for_a_program_that_moves(tmp_path, files, reported):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert ("NM616" in _codes(tmp_path).get("run.sh", set())) is reported


@pytest.mark.parametrize("call, reported", [
    ('PyTorch(entry_point="train.py", framework_version="2.1.2", instance_type="ml.trn2.48xlarge")', "2.1.2"),
    # on Trn1 the program is set aside (NM521): its container is the XLA stack it keeps
    ('PyTorch(entry_point="train.py", framework_version="2.1.2", instance_type="ml.trn1.32xlarge")', None),
    ('HuggingFace(entry_point="train.py", pytorch_version="1.13.1", transformers_version="4.36")', "1.13.1"),
    ('PyTorch(entry_point="train.py", image_uri="763104351884.dkr.ecr.us-west-2.amazonaws.com/'
     'pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.2-ubuntu20.04", instance_type="ml.trn2.48xlarge")',
     "legacy XLA torch-neuronx image"),
    ('PyTorch(entry_point="train.py", framework_version="2.14.0", instance_type="ml.trn2.48xlarge")', None),
    ('PyTorch(entry_point="train.py", framework_version="1.13.1", instance_type="ml.g5.2xlarge")', None),
    ('Other(entry_point="train.py", framework_version="1.13.1")', None),  # not SageMaker's
], ids=["trn2 framework_version", "trn1 program set aside", "hf pytorch_version", "legacy image_uri", "native version", "gpu", "not sagemaker"])
def test_a_sagemaker_estimator_of_a_moving_program_names_its_container(tmp_path, call, reported):
    (tmp_path / "train.py").write_text(XLA_TRAIN)
    (tmp_path / "launch.py").write_text("from sagemaker.huggingface import HuggingFace\nfrom sagemaker.pytorch import "
                                        "PyTorch\nfrom jobs import Other\n\nestimator = " + call + "\n")
    result = run([str(tmp_path)], Settings(), rewrite=False, jobs=1)
    found = [f for f in result.findings if f.code == "NM617"]
    assert bool(found) is bool(reported)
    if reported:
        assert reported in found[0].message and "`train.py` needs TorchNeuron" in found[0].message
    (tmp_path / "train.py").write_text(GPU_TRAIN)  # the program it runs stays on the GPU: not reported
    assert "NM617" not in _codes(tmp_path).get("launch.py", set())


@pytest.mark.parametrize("line, folder", [
    ('sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "common"))', "proj/common"),
    ("sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))", "proj"),
    ('sys.path.append(str(Path(__file__).resolve().parent.parent / "lib"))', "proj/lib"),
    ('sys.path.insert(0, "../shared")  # run from scripts/', "proj/shared"),
    ('site.addsitedir(os.path.join(os.path.dirname(__file__), "vendor"))', "proj/scripts/vendor"),
    ("sys.path.append(os.getcwd())", None),  # the working folder: not known
    ("sys.path.append(LIB_DIR)", None),
    ('sys.path.insert(0, os.path.join(ROOT, "common"))', None),
], ids=["join dirname", "two dirnames", "pathlib", "literal", "addsitedir", "cwd", "variable", "unknown root"])
def test_sys_path_additions_are_read_from_literals_and_file(line, folder):
    full = os.path.join(os.sep, "proj", "scripts", "run.py")
    found = project_module._sys_path_additions(f"import os\nimport sys\n\n{line}\n", full)
    assert found == ([os.path.join(os.sep, *folder.split("/"))] if folder else [])


def test_launch_flags_are_read_per_program_up_to_the_end_of_the_command():
    text = ("MALLOC_ARENA_MAX=64 neuron_parallel_compile torchrun --nproc_per_node=32 run_clm.py "
            "--bf16 True --tensor-parallel-size 8; python eval.py --zero_1 && echo --skip_cache_push\n"
            "python plain.py --output_dir out\n")
    assert project_module._launch_flags(text) == {
        "run_clm.py": {"bf16", "tensor_parallel_size"}, "eval.py": {"zero_1"}, "plain.py": {"output_dir"}}


def test_neuron_flags_reach_only_files_that_import_optimum_neuron(tmp_path):
    (tmp_path / "run.sh").write_text("torchrun --nproc_per_node 2 train.py \\\n  --tensor_parallel_size 2 --bf16 True\n"
                                     "python other.py --tensor_parallel_size 2\n")
    (tmp_path / "train.py").write_text("from optimum.neuron import NeuronTrainer\n\nif __name__ == '__main__':\n"
                                       "    NeuronTrainer(model=None)\n")
    (tmp_path / "other.py").write_text("import argparse\n\nif __name__ == '__main__':\n    argparse.ArgumentParser()\n")
    targets, _ = discover([str(tmp_path)])
    project = Project([str(tmp_path)], targets, Settings())
    facts = {os.path.basename(p): f for p, f in project.facts.items()}
    assert facts["train.py"].neuron_flags == (f"tensor_parallel_size:{project._shown(str(tmp_path / 'run.sh'))}",)
    assert facts["other.py"].neuron_flags == ()


def test_the_bf16_switches_the_model_reads_are_the_tables(tmp_path):
    """The model's bfloat16 switches (a read of one set elsewhere in the program is no finding) are the `bf16`
    entries of rules/environment.toml, and it reads them where they are turned on, not where set to 0 or named."""
    from neuron_migrate.rules.environment import env_table

    assert set(project_module.BF16_SWITCHES) == {name for name, e in env_table().items() if e.get("bf16")}
    on = ['export XLA_USE_BF16=1', 'ENV XLA_DOWNCAST_BF16=true', 'os.environ["XLA_USE_BF16"] = "1"',
          '"    os.environ[\\"XLA_USE_BF16\\"] = \\"1\\"\\n",']
    off = ['export XLA_USE_BF16=0', 'os.environ["XLA_USE_BF16"] = "0"', 'x = os.environ.get("XLA_USE_BF16", "1")',
           'print("XLA_USE_BF16 is deprecated")']
    assert [bool(project_module._SETS_BF16.search(t)) and project_module._SETS_BF16.search(t).group(2) not in
            project_module._OFF for t in on + off] == [True] * len(on) + [False] * len(off)


def test_an_install_list_named_alone_is_held_by_its_folders_xla_library(tmp_path):
    """`pin deploy.ipynb` reads the environment from the notebook's folder, named in the run or not: its
    requirements.txt keeps optimum-neuron, so the neuronx-cc upgrade keeps its version (NM613); without it, it is
    pinned."""
    case = FIXTURES / "projects" / "xla_environment" / "serve"
    work = tmp_path / "serve"
    shutil.copytree(case, work)
    notebook = work / "deploy_server.ipynb"
    held = cli("pin", "--diff", str(notebook))
    assert "NM613" in held.stdout and "neuronx-cc==2.*" not in held.stdout
    (work / "requirements.txt").write_text("openai>=1.0.0\n")
    pinned = cli("pin", "--diff", str(notebook))
    assert "NM613" not in pinned.stdout and "neuronx-cc==2.*" in pinned.stdout
    assert "Upgrade to neuronx-cc 2.21.x" in notebook.read_text()  # --diff writes nothing


LEGACY_MAIN = "import torch_xla.core.xla_model as xm\n\nif __name__ == '__main__':\n    print(xm.xla_device())\n"


def _targets_of(tmp_path, *names):
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    project = Project([str(tmp_path)], targets, Settings())
    out = {}
    for name in names:
        facts = project.of(str(tmp_path / name), "python")
        out[name] = (facts.target, [e.replace(str(tmp_path) + os.sep, "") for e in facts.evidence]) if facts else None
    return out


def test_the_nearest_readme_that_names_hardware_decides_within_one_folder_up(tmp_path):
    """The README of the program's folder beats the one above; a README naming Trn2 ends the search; a README two
    folders up speaks of the whole repository and is not read."""
    for folder, text in (("", "Samples for trn1.32xlarge.\n"), ("inf", "Serve it on an inf2.xlarge.\n"),
                         ("both", "Written on trn1.32xlarge, run on trn2.48xlarge.\n")):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "README.md").write_text(text)
    for name in ("inf/serve/app.py", "inf/app.py", "both/train/app.py", "deep/er/app.py", "top/app.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(LEGACY_MAIN)
    got = _targets_of(tmp_path, "inf/serve/app.py", "inf/app.py", "both/train/app.py", "deep/er/app.py",
                      "top/app.py")
    assert got["inf/serve/app.py"] == ("inf2", ["inf/README.md:1: names `inf2.xlarge`"])
    assert got["inf/app.py"] == ("inf2", ["inf/README.md:1: names `inf2.xlarge`"])
    assert got["both/train/app.py"] == (None, [])  # moves: its README names Trn2 too
    assert got["deep/er/app.py"] == (None, [])  # the README two folders up is not read
    assert got["top/app.py"] == ("trn1", ["README.md:1: names `trn1.32xlarge`"])


def test_a_readme_one_folder_up_names_tpu_for_no_script(tmp_path):
    """torch_xla's own README ("connects PyTorch and Cloud TPUs", a TPU VM) one folder above examples written for
    every XLA device: they move. The same words in the examples' own folder set them aside."""
    (tmp_path / "README.md").write_text("PyTorch/XLA connects PyTorch and Cloud TPUs: try it on a TPU VM.\n")
    for name in ("examples/train.py", "cloud/train.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(LEGACY_MAIN)
    (tmp_path / "cloud" / "README.md").write_text("Run it on a TPU VM.\n")
    got = _targets_of(tmp_path, "examples/train.py", "cloud/train.py")
    assert got["examples/train.py"] == (None, [])
    assert got["cloud/train.py"] == ("tpu", ["cloud/README.md:1: names `TPU VM`"])


@pytest.mark.parametrize("prose, expected", [
    ("Sentence embeddings on AWS Inferentia2 with the XLA stack.", ("inf2", "names `Inferentia2`")),
    ("Fine-tune it on Trainium 1.", ("trn1", "names `Trainium 1`")),
    ("Run it on AWS Inferentia 1 (inf1.xlarge).", ("inf1", "names `Inferentia 1`")),
    # the family without its generation, or a generation the native backend runs on, sets nothing aside
    ("Embeddings on AWS Inferentia.", None),
    ("Fine-tune it on Trainium2.", None),
    ("An Inferentia3 is not a product.", None),
    # a generation beside a family of any generation names none: a model traced for either
    ("A model traced ahead of time for Inferentia2 / Trainium.", None),
    ("Compile it for AWS Trainium and AWS Inferentia2 instances.", None),
    # a sentence about the hardware, not about where this notebook runs
    ("Trainium1 chips feature two NeuronCore-v2 units; Trainium1 offers 32 GiB of device memory.", None),
])
def test_a_notebook_naming_a_product_generation_is_set_aside_with_it(tmp_path, prose, expected):
    """"AWS Inferentia2" in a notebook's markdown says where it runs, as `inf2` would; "Inferentia" alone names no
    generation, and Trainium2 is where the native backend runs."""
    cells = [{"cell_type": "markdown", "metadata": {}, "source": [prose]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": ["import torch_xla.core.xla_model as xm\n", "device = xm.xla_device()\n"]}]
    (tmp_path / "embed.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                      "nbformat_minor": 5}))
    targets, _ = discover([str(tmp_path)], frozenset(handlers.HANDLERS))
    facts = Project([str(tmp_path)], targets, Settings()).of(str(tmp_path / "embed.ipynb"), "notebook")
    if expected is None:
        assert facts is None or facts.target is None, facts
    else:
        shown = [e.replace(str(tmp_path) + os.sep, "") for e in facts.evidence]
        assert (facts.target, shown) == (expected[0], [f"embed.ipynb: {expected[1]}"])


def test_a_readme_naming_inferentia2_sets_the_folder_aside(tmp_path):
    """A samples folder's README that says "AWS Inferentia2" (not `inf2`) tells its scripts' target."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text("# Serving\n\nThese scripts compile models for AWS Inferentia2.\n")
    (tmp_path / "serve.py").write_text(LEGACY_MAIN)
    assert _targets_of(tmp_path, "serve.py")["serve.py"] == ("inf2", ["README.md:3: names `Inferentia2`"])


def test_a_converter_beside_a_trn1_notebook_is_one_sample_with_it(tmp_path):
    """A script beside a notebook whose prose names Trn1 is set aside with it; beside a notebook that only its name
    ties to Trn1 (`_trn1` says that notebook is the Trn1 variant), it moves."""
    cell = {"cell_type": "markdown", "metadata": {}, "source": ["Run this notebook on a Trn1 instance."]}
    code = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["import torch_xla.core.xla_model as xm\n", "device = xm.xla_device()\n"]}
    for folder, cells, name in (("told", [cell, code], "finetune.ipynb"), ("named", [code], "finetune_trn1.ipynb")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                                          "nbformat_minor": 5}))
        (tmp_path / folder / "convert.py").write_text(LEGACY_MAIN)
    got = _targets_of(tmp_path, "told/convert.py", "named/convert.py")
    assert got["told/convert.py"] == ("trn1", [
        "told/finetune.ipynb: names `Trn1` (a script of the same sample)"])
    assert got["named/convert.py"] == (None, [])


def test_infrastructure_beside_the_container_folder_names_the_instance(tmp_path):
    """A CloudFormation template one folder up names the instance type; a commented-out one, or one in a folder
    two up, does not."""
    (tmp_path / "job" / "docker").mkdir(parents=True)
    (tmp_path / "job" / "stack.yaml").write_text("Resources:\n  Compute:\n    Properties:\n"
                                                  "      InstanceTypes: [trn1.32xlarge]\n")
    (tmp_path / "job" / "docker" / "run.py").write_text(LEGACY_MAIN)
    (tmp_path / "old" / "docker").mkdir(parents=True)
    (tmp_path / "old" / "userdata.sh").write_text("#!/bin/bash\n# was: trn1.32xlarge\necho ready\n")
    (tmp_path / "old" / "docker" / "run.py").write_text(LEGACY_MAIN)
    (tmp_path / "main.tf").write_text('resource "aws_instance" "x" {\n  instance_type = "inf2.xlarge"\n}\n')
    got = _targets_of(tmp_path, "job/docker/run.py", "old/docker/run.py")
    assert got["job/docker/run.py"] == ("trn1", ["job/stack.yaml:4: its infrastructure names `trn1.32xlarge`"])
    assert got["old/docker/run.py"] == (None, [])


@pytest.mark.parametrize("name, text, expected", [
    ("batch.yaml", "ComputeResources:\n  InstanceTypes:\n    - trn1.32xlarge\n",
     ("trn1", "batch.yaml:3", "trn1.32xlarge")),
    ("launch.sh", "aws ec2 run-instances --image-id ami-1 \\\n  --instance-type inf2.xlarge\n",
     ("inf2", "launch.sh:2", "inf2.xlarge")),
    ("nodes.yaml", "nodeSelector:\n  node.kubernetes.io/instance-type: trn1.32xlarge\n",
     ("trn1", "nodes.yaml:2", "trn1.32xlarge")),
    ("job.json", '{"jobName": "x", "instanceType": "ml.inf2.xlarge"}\n', ("inf2", "job.json:1", "inf2.xlarge")),
    ("vars.tfvars", 'instance_type = "trn1.2xlarge"\n', ("trn1", "vars.tfvars:1", "trn1.2xlarge")),
    # running text names an instance, no key says the jobs go there: a report, a description, a comment
    ("report.json", json.dumps([{"path": "old/train.py", "line": 1, "code": "NM521",
                                 "message": "runs on Inf2 (README.md: names `inf2.xlarge`); instance_type="
                                            "'ml.inf2.xlarge'"}]), None),
    ("queue.yaml", "Description: a job queue for trn1.32xlarge instances\n", None),
    ("launch.sh", "# aws ec2 run-instances --instance-type trn1.32xlarge\necho ready\n", None),
    # one stack for every family tells none
    ("stacks.yaml", "Inference:\n  InstanceType: inf2.xlarge\nTraining:\n  InstanceType: trn1.32xlarge\n", None),
])
def test_only_an_instance_key_of_infrastructure_names_where_jobs_go(tmp_path, name, text, expected):
    """An infrastructure file beside the program tells its instance where a key names it (a YAML list under the key,
    an option of a command, a Kubernetes node selector, a JSON key, a Terraform variable), not where an instance
    type is only mentioned; a file that names several families tells none, as a README does."""
    (tmp_path / ".git").mkdir()
    (tmp_path / name).write_text(text)
    (tmp_path / "train.py").write_text(LEGACY_MAIN)
    got = _targets_of(tmp_path, "train.py")["train.py"]
    if expected is None:
        assert got == (None, [])
    else:
        target, place, value = expected
        assert got == (target, [f"{place}: its infrastructure names `{value}`"])


def test_a_file_given_alone_reads_no_folder_above_it_without_a_project_marker(tmp_path):
    """`neuron-migrate check /tmp/job/train.py` with no project marker up to `/` reads the file's own folder: the
    README and infrastructure of unrelated neighbours one folder up (`/tmp`) say nothing of it. Given with its
    folder above, they speak (the sample's folder and the one above)."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "train.py").write_text(LEGACY_MAIN)
    (tmp_path / "README.md").write_text("Run the samples on an inf2.xlarge.\n")
    (tmp_path / "stack.yaml").write_text("InstanceType: inf2.xlarge\n")
    program = str(tmp_path / "job" / "train.py")
    alone, _ = discover([program], frozenset(handlers.HANDLERS))
    facts = Project([program], alone, Settings()).of(program, "python")
    assert facts is None or facts.target is None, facts
    assert _targets_of(tmp_path, "job/train.py")["job/train.py"][0] == "inf2"


def test_a_new_infrastructure_file_is_read_again_with_the_cache_on(tmp_path, monkeypatch):
    """The model's cached facts hold the folders' infrastructure listings: a job definition added beside the
    container's folder sets its program aside on the next run."""
    monkeypatch.setenv("NEURON_MIGRATE_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "job"
    (work / "docker").mkdir(parents=True)
    (work / "docker" / "run.py").write_text(LEGACY_MAIN)
    first = run([str(work)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert "NM101" in {f.code for f in first.findings}
    (work / "job_definition.json").write_text('{"instanceTypes": ["trn1.32xlarge"]}\n')
    second = run([str(work)], Settings(), rewrite=False, jobs=1, use_cache=True)
    assert {f.code for f in second.findings} == {"NM521"}


def test_the_closest_set_aside_sibling_is_named(tmp_path):
    """`train_xmp.py` is told by `train.py`, whose name it extends, not by `eval.py`, with which it only shares the
    model module."""
    (tmp_path / "model.py").write_text("import torch\n\nMODEL = torch.nn.Linear(2, 2)\n")
    said = "# XLA: a NeuronCore of the Trn1 instance\n"
    for name, head_line in (("eval.py", said), ("train.py", said), ("train_xmp.py", "")):
        (tmp_path / name).write_text(head_line + "from model import MODEL\n" + LEGACY_MAIN)
    got = _targets_of(tmp_path, "train_xmp.py")
    assert got["train_xmp.py"] == ("trn1", ["train.py: names `Trn1` (a script of the same sample)"])


LOOSE_TRAIN = ("import torch\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n"
               "model = torch.nn.Linear(2, 2).to(device)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
               "model(torch.ones(2, device=device)).sum().backward()\nxm.optimizer_step(opt)\n")
LOOSE_SERVE = ("import torch\nimport torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n"
               "print(torch.nn.Linear(2, 2).to(device)(torch.ones(2, device=device)))\n")
USERDATA = '#!/bin/bash\npython -m pip install torch-neuronx=="1.13.1.*" "neuronx-cc==2.*" transformers\n'


@pytest.mark.parametrize("readme, moves", [
    ("Launch a Trn1 instance to train it; SageMaker serves `ml.inf2` models too.\n", False),
    ("Launch a trn2.48xlarge instance to train it (the Trn1 numbers are for comparison).\n", True),
])
def test_loose_scripts_follow_the_readme_above_and_their_instance_setup_follows_them(tmp_path, readme, moves):
    """Scripts with top-level torch_xla code and no `__main__` block are programs: the README one folder up tells
    their target. A README naming both Trn1 and Inf2 sets the training script aside as Trn1's and the one that only
    runs a model as Inf2's; the instance's setup script in a sibling folder (`infra/userdata.sh`) installs their XLA
    stack and is left as it is. Under a README naming Trn2 the scripts move and the setup script is pinned."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "train.py").write_text(LOOSE_TRAIN)
    (tmp_path / "examples" / "serve.py").write_text(LOOSE_SERVE)
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "userdata.sh").write_text(USERDATA)
    got = _targets_of(tmp_path, "examples/train.py", "examples/serve.py")
    result = run([str(tmp_path)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert not result.errors
    write_results(result)
    userdata = (tmp_path / "infra" / "userdata.sh").read_text()
    if moves:
        assert got["examples/train.py"][0] is None
        assert "torch_xla" not in (tmp_path / "examples" / "train.py").read_text()
        assert userdata != USERDATA and "torch-neuronx==2." in userdata
    else:
        assert got["examples/train.py"][0] == "trn1" and got["examples/serve.py"][0] == "inf2"
        assert {f.code for f in result.findings if f.path.startswith(str(tmp_path / "examples"))} == {"NM521"}
        assert userdata == USERDATA and (tmp_path / "examples" / "train.py").read_text() == LOOSE_TRAIN


BF16_TRAIN = ('import argparse\nimport os\n\nimport torch\nimport torch_xla.core.xla_model as xm\n\n'
              'parser = argparse.ArgumentParser()\n'
              'parser.add_argument("--bf16", action="store_true", help="bfloat16")\n'
              'args = parser.parse_args()\n\n\nif __name__ == "__main__":\n    device = xm.xla_device()\n'
              '    model = torch.nn.Linear(2, 2).to(device)\n    if args.bf16:\n        model = model.bfloat16()\n')
BF16_RUN = ("#!/bin/bash\nset -e\n\n# Cast training to BF16 and enable stochastic rounding\nexport XLA_USE_BF16=1\n\n"
            "torchrun --nproc_per_node 2 train.py \\\n    --epochs 2\n")


@pytest.mark.parametrize("program, also, named", [
    (BF16_TRAIN, "", True),
    # a look-alike: the program has no bfloat16 option of its own
    (BF16_TRAIN.replace('"--bf16"', '"--fp16"').replace("args.bf16", "args.fp16"), "", False),
    # the program reads the switch itself: it decides with it
    (BF16_TRAIN.replace("args.bf16", 'args.bf16 or os.environ.get("XLA_USE_BF16")'), "", False),
    # the script also runs a program without the option
    (BF16_TRAIN, "python eval.py\n", False),
])
def test_a_launch_scripts_bf16_switch_is_marked_with_its_programs_option(tmp_path, program, also, named):
    """`export XLA_USE_BF16=1` in a launch script whose programs all take `--bf16` (argparse) and all move: the
    marker names the option (NM256), not autocast (NM403); the setting stays for a person, who checks what the
    option requires. Otherwise NM403 marks it."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(program)
    (tmp_path / "eval.py").write_text('import torch_xla.core.xla_model as xm\n\nif __name__ == "__main__":\n'
                                      '    print(xm.xla_device())\n')
    (tmp_path / "run.sh").write_text(BF16_RUN + also)
    unsafe = True
    result = run([str(tmp_path)], Settings(unsafe_fixes=unsafe), rewrite=True, jobs=1)
    assert not result.errors
    write_results(result)
    script = (tmp_path / "run.sh").read_text()
    code = "NM256" if named else "NM403"
    assert script == BF16_RUN.replace("export XLA_USE_BF16=1", f"# TODO(neuron-migrate {code}): " + (
        "pass --bf16 to the program instead" if named else "use autocast, not `XLA_USE_BF16`")
        + f"; neuron-migrate explain {code}\nexport XLA_USE_BF16=1") + also
    again = run([str(tmp_path)], Settings(unsafe_fixes=unsafe), rewrite=True, jobs=1)
    assert not any(r.changed for r in again.results)


def test_a_spawned_program_that_makes_its_group_in_another_file_gets_none_before_the_call(tmp_path):
    """Megatron's shape: the spawned function calls into the project's `initialize.py`, which calls
    `init_process_group` itself (unconditionally): a group made before the call would be made twice under torchrun
    (`ValueError: trying to initialize the default process group twice`). The look-alike, whose program makes no
    group anywhere, gets one before the call."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "initialize.py").write_text(
        "import os\n\nimport torch.distributed as dist\n\n\ndef setup():\n"
        "    dist.init_process_group(backend='xla', rank=int(os.environ['RANK']),"
        " world_size=int(os.environ['WORLD_SIZE']))\n")
    spawned = ("import os\n\nimport torch_xla.core.xla_model as xm\nimport torch_xla.distributed.xla_multiprocessing"
               " as xmp\n{imp}\n\ndef run(rank, world_size):\n    os.environ['RANK'] = str(rank)\n{call}"
               "    xm.rendezvous('ending')\n\n\nif __name__ == '__main__':\n"
               "    xmp.spawn(run, args=(2,), nprocs=2, join=True)\n")
    (tmp_path / "pretrain.py").write_text(spawned.format(imp="from initialize import setup\n",
                                                         call="    setup()\n"))
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "pretrain.py").write_text(spawned.format(imp="", call=""))
    result = run([str(tmp_path)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert not result.errors
    write_results(result)
    made_elsewhere = (tmp_path / "pretrain.py").read_text()
    assert "xmp" not in made_elsewhere and "init_process_group" not in made_elsewhere
    assert "run(int(os.environ.get('LOCAL_RANK', '0')), 2)" in made_elsewhere
    assert "dist.init_process_group(backend='neuron'" in (tmp_path / "alone" / "pretrain.py").read_text()


def _models(monkeypatch=None, broken: str = "") -> tuple[Project, Project, list]:
    """The model of every fixture read here, and read with two worker processes (`runner.Workers.read_modules`);
    `broken`: "share", every worker's share fails; "pool", the pool is shut down before."""
    from neuron_migrate.engine import runner

    targets, _ = discover([str(FIXTURES)], frozenset(handlers.HANDLERS))
    here = Project([str(FIXTURES)], targets, Settings())
    if broken == "share":
        def fails(code):
            raise RuntimeError("a share that does not come back")
        fails.__qualname__ = "_read_share"  # pickled by name, found in the worker as the module's `_read_share`
        monkeypatch.setattr(runner, "_read_share", fails)  # before the fork: the workers have it
    workers = runner.Workers(2, ())
    try:
        if broken == "pool":
            workers.pool.shutdown()
        shared = Project([str(FIXTURES)], targets, Settings(), workers.read_modules)
    finally:
        workers.stop()
    return here, shared, targets


@pytest.mark.parametrize("broken", ["", "share", "pool"])
def test_the_model_read_with_the_workers_is_the_model_read_here(monkeypatch, broken):
    """The model's reads of the Python files and notebooks, shared with the workers of a run, give the same
    modules (every field), inputs and facts as the model that reads each file itself, over every fixture; so do
    shares that a worker cannot return and a pool that takes none."""
    here, shared, targets = _models(monkeypatch, broken)
    assert len(here.modules) > 200
    assert list(shared.modules) == list(here.modules)
    assert shared.modules == here.modules
    assert shared.inputs() == here.inputs()
    assert [shared.of(t.path, t.kind) for t in targets] == [here.of(t.path, t.kind) for t in targets]


def _find_every_folder(project: Project, name: str, bases) -> str | None:
    """`Project._find` without its fast exit: each base's stem looked up."""
    parts = name.split(".")
    for base in bases:
        stem = os.path.join(base, *parts)
        if stem in project._stems:
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                if candidate in project.modules:
                    return candidate
    return None


def test_the_import_graphs_fast_exit_finds_what_every_folder_finds():
    """`_find` leaves at once where no module of the project ends with the name's path; it finds what a look in
    every folder finds, for every import of every fixture project, and for the tails of their own modules' paths
    asked from each folder (which do exist, at some depth)."""
    targets, _ = discover([str(FIXTURES)], frozenset(handlers.HANDLERS))
    project = Project([str(FIXTURES)], targets, Settings())
    asked = found = 0
    for module in project.modules.values():
        bases = project._search_path(os.path.dirname(module.full), module.root)
        names = {name for name, level in module.imports if name and not level}
        parts = os.path.splitext(module.full)[0].split(os.sep)
        names |= {".".join(parts[i:]) for i in range(len(parts) - 3, len(parts))}
        for name in sorted(names):
            want = _find_every_folder(project, name, bases)
            assert project._find(name, bases) == want, (module.full, name)
            asked += 1
            found += want is not None
    assert asked > 1000 and found > 50
