"""One decision per program: can it run as several processes? (rules/processes.py)

A program that cannot had one replica under torch_xla: `xm.optimizer_step` is `opt.step()`, `xm.save` is
`torch.save` of a CPU copy, `xm.master_print` is `print`. Anywhere else the rewritten code reads rank and
world size from names the module binds once.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings

PROGRAM = textwrap.dedent('''\
    """Train a small model on one NeuronCore."""

    import argparse

    import torch
    import torch_xla.core.xla_model as xm

    from model import Net


    def main(args):
        device = xm.xla_device()
        model = Net().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        for x, y in [(torch.randn(4, 8), torch.randn(4, 1))]:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            xm.optimizer_step(optimizer)
            xm.master_print("loss", loss.item())
        xm.save(model.state_dict(), args.out)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.1)
        parser.add_argument("--out", default="model.pt")
        main(parser.parse_args())
''')
MODEL = "import torch\n\n\nclass Net(torch.nn.Linear):\n    def __init__(self):\n        super().__init__(8, 1)\n"


def rewrite(folder, name="train.py", text=PROGRAM) -> tuple[str, dict]:
    path = folder / name
    path.write_text(text)
    result = process_python(str(path), text.encode(), Settings(unsafe_fixes=True), True)
    assert result.new_bytes is not None
    return result.new_bytes.decode(), result.files_read


def single_process_form(out: str) -> bool:
    ast.parse(out)
    return "optimizer.step()" in out and "WORLD_SIZE" not in out and "torch.distributed" not in out \
        and "_pytree" not in out and "RANK" not in out


def test_a_plain_program_gets_the_single_process_form(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "run.sh").write_text("#!/bin/bash\npython train.py --lr 0.2\n")
    out, files_read = rewrite(tmp_path)
    assert single_process_form(out), out
    assert "    print(\"loss\", loss.item())\n" in out  # master_print, every process is rank 0
    assert "torch.save({k: v.cpu() for k, v in model.state_dict().items()}, args.out)" in out
    # the decision read the local module and the launch script: the cache keys the result on them
    assert str(tmp_path / "model.py") in files_read and str(tmp_path / "run.sh") in files_read


@pytest.mark.parametrize("where, name, text", [
    ("beside", "run.sh", "#!/bin/bash\ntorchrun --nproc_per_node=2 train.py --lr 0.2\n"),
    ("beside", "launch.sh", "neuron_parallel_compile \\\n  torchrun --nproc_per_node 32 \\\n  train.py\n"),
    ("above", "README.md", "Run it:\n\n    torchrun --nproc_per_node=2 job/train.py\n"),
    ("beside", "model.py", MODEL + "\nsampler = torch.utils.data.DistributedSampler\n"),
], ids=["torchrun-script", "continued-line", "readme-above", "local-module"])
def test_a_launcher_or_module_of_several_processes_keeps_the_averaging(tmp_path, where, name, text):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "model.py").write_text(MODEL)
    (folder if where == "beside" else tmp_path).joinpath(name).write_text(text)
    out, _ = rewrite(folder)
    assert not single_process_form(out)
    assert "if WORLD_SIZE > 1:" in out and "WORLD_SIZE = int(os.environ.get(\"WORLD_SIZE\", \"1\"))" in out


@pytest.mark.parametrize("change", [
    lambda t: t.replace('if __name__ == "__main__":', "if True:"),  # a module, imported by some program
    lambda t: t.replace("    main(parser", "    print(xm.get_ordinal())\n    main(parser"),  # a rank read
    lambda t: t.replace("import argparse\n", "import argparse\nimport os\n").replace(
        "    main(parser", "    print(os.environ.get('WORLD_SIZE'))\n    main(parser"),
], ids=["no-main", "rank-read", "world-size-read"])
def test_a_program_that_may_run_as_several_processes(tmp_path, change):
    (tmp_path / "model.py").write_text(MODEL)
    out, _ = rewrite(tmp_path, text=change(PROGRAM))
    assert not single_process_form(out)


@pytest.mark.parametrize("where, importer, several", [
    ("variants", "from train import main\nimport torch.distributed as dist\n\ndist.init_process_group('gloo')\n", True),
    (".", "import train\nimport torch_xla.distributed.xla_multiprocessing as xmp\n\nxmp.spawn(train.main)\n", True),
    ("variants", "from train import main\n\nmain(None)\n", False),  # a one-process variant
    ("variants", "from trainer import main\nimport torch.distributed\n", False),  # another module
], ids=["subfolder-group", "beside-spawn", "one-process-variant", "other-module"])
def test_a_module_a_multi_process_variant_imports(tmp_path, where, importer, several):
    """A base script that a multi-process variant imports (examples/eager/ extends examples/train_base.py) runs
    in that variant's processes: `master_print` keeps its rank guard there."""
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / where).mkdir(exist_ok=True)
    (tmp_path / where / "variant.py").write_text(importer)
    out, files_read = rewrite(tmp_path)
    assert single_process_form(out) is not several, out
    assert ('if RANK == 0:\n            print("loss", loss.item())' in out) is several
    assert str(tmp_path / where / "variant.py") in {str(p) for p in map(type(tmp_path), files_read)}


def test_ranks_are_read_once_per_module(tmp_path):
    """Several sites share the module's names; each rewritten call stays about as long as the original."""
    text = PROGRAM.replace('if __name__ == "__main__":', "if True:").replace(
        "    xm.save(", "    print(xm.get_ordinal(), xm.xrt_world_size())\n    xm.save(")
    out, _ = rewrite(tmp_path, text=text)
    assert out.count("os.environ.get(") == 3  # RANK, LOCAL_RANK, WORLD_SIZE: once each
    assert "print(RANK, WORLD_SIZE)" in out and "if LOCAL_RANK == 0:" in out and "if RANK == 0:" in out


def test_only_the_names_the_module_uses_are_read_in_place(tmp_path):
    """A function's own `LOCAL_RANK` keeps that variable read in place; "RANK" in a plain string, or in an
    f-string's text, is no use of the name, so rank and world size are still read once."""
    text = PROGRAM.replace('if __name__ == "__main__":', 'LOG = "loss-RANK-{RANK}.txt"\nif True:').replace(
        "    xm.save(", '    LOCAL_RANK = 3\n    print(f"RANK-{LOCAL_RANK}", xm.get_ordinal(), xm.xrt_world_size())\n'
                       "    xm.save(")
    out, _ = rewrite(tmp_path, text=text)
    assert '\nRANK = int(os.environ.get("RANK", "0"))' in out and "LOCAL_RANK = int(" not in out
    assert 'print(f"RANK-{LOCAL_RANK}", RANK, WORLD_SIZE)' in out and "if RANK == 0:" in out
    assert 'if int(os.environ.get("LOCAL_RANK", "0")) == 0:' in out
    # an f-string's field reads the name: RANK stays in place there
    used = PROGRAM.replace("    xm.save(", '    print(f"{RANK}", xm.get_ordinal())\n    xm.save(')
    out, _ = rewrite(tmp_path, text=used)
    assert "\nRANK = int(" not in out and 'int(os.environ.get("RANK", "0"))' in out


def test_a_module_that_uses_the_names_reads_the_environment_in_place(tmp_path):
    text = PROGRAM.replace('if __name__ == "__main__":', "WORLD_SIZE = 8\nif True:")
    out, _ = rewrite(tmp_path, text=text)
    assert "WORLD_SIZE = 8" in out and 'int(os.environ.get("WORLD_SIZE", "1")) > 1' in out


LATE_OS = textwrap.dedent('''\
    import args_parse
    import torch_xla.runtime as xr

    FLAGS = args_parse.parse_common_options(batch_size=128)
    SHARDS = xr.world_size()

    import os
    import sys
    import torch
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met
    import torch_xla.test.test_utils as test_utils

    LOG = "log-%d.txt"


    def train(model, optimizer, accuracy):
        xm.optimizer_step(optimizer)
        xm.master_print("step at {}".format(test_utils.now()))
        xm.master_print("metrics", met.metrics_report())  # labelled: stays, marked (NM228)
        xm.master_print("rank", xr.global_ordinal(), "of", xr.world_size())
        xm.master_print("mean", xm.mesh_reduce("accuracy", accuracy, sum))
        return os.path.join(FLAGS.logdir, LOG % xr.global_ordinal())


    if __name__ == "__main__":
        train(torch.nn.Linear(2, 2), None, 1.0)
        sys.exit(0)
''')


def test_an_import_of_os_below_other_code_is_followed_by_the_names(tmp_path):
    """`import os` after a parser's call (torch_xla's own test scripts): the names are bound after the run of
    imports that holds it, and the module-level code above it reads the environment in place."""
    out, _ = rewrite(tmp_path, text=LATE_OS)
    ast.parse(out)
    # above the late `import os`: in place, with the import it needs above it (as before)
    assert 'import os\nSHARDS = int(os.environ.get("WORLD_SIZE", "1"))\n' in out
    # the new imports join the file's own block below, not the one-line import above SHARDS
    assert "\nimport os\nimport sys\nimport time\nimport torch\nimport torch.distributed as dist\n" in out
    names = 'RANK = int(os.environ.get("RANK", "0"))\nWORLD_SIZE = int(os.environ.get("WORLD_SIZE", "1"))\n'
    assert out.index("import torch_xla.debug.metrics as met\n\n" + names + "\n" + 'LOG = "log-%d.txt"') > 0
    assert out.count("os.environ.get(") == 3
    assert "if WORLD_SIZE > 1:" in out and "return os.path.join(FLAGS.logdir, LOG % RANK)" in out
    (tmp_path / "train.py").write_text(out)  # a second run changes nothing
    assert process_python(str(tmp_path / "train.py"), out.encode(), Settings(unsafe_fixes=True), True).new_bytes \
        is None


def test_master_print_of_local_calls_is_one_guarded_print(tmp_path):
    """The clock and the rank run no collective: the print is guarded as it stands; a collective among the
    arguments still runs on every rank (`printed = (...)`), and so do the metrics (their marker stays above)."""
    out, _ = rewrite(tmp_path, text=LATE_OS)
    assert '    if RANK == 0:\n        print("step at {}".format(time.strftime("%H:%M:%S")))\n' in out
    assert '    if RANK == 0:\n        print("rank", RANK, "of", WORLD_SIZE)\n' in out
    assert "NM228): torch_xla metrics: choose what to log; neuron-migrate explain NM228\n    printed = (\"metrics\", met" in out
    assert out.count("printed = (") == 2 and "printed = (\"mean\", xm.mesh_reduce(" in out


@pytest.mark.parametrize("where, name, text", [
    ("beside", "run.sh", "#!/bin/bash\ntorchrun --nproc_per_node=2 train.py --lr 0.2\n"),
    ("above", "README.md", "Run it:\n\n    torchrun --nproc_per_node=2 job/train.py\n"),
    ("variants", "train_ddp.py", "from train import main\nimport torch.distributed as dist\n"),
], ids=["launcher-beside", "readme-above", "variant-below"])
def test_the_cache_sees_a_file_added_where_the_decision_looked(tmp_path, monkeypatch, where, name, text):
    """The decision lists the program's folder, the one above and the folders below: the listings are among the
    files the result depends on (a folder's path ending in a separator), so a file added there makes the cached
    result stale, and the second run decides again."""
    from neuron_migrate.engine.runner import run

    monkeypatch.setenv("NEURON_MIGRATE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "repo" / "job"
    (folder / "variants").mkdir(parents=True)
    (folder / "model.py").write_text(MODEL)
    (folder / "train.py").write_text(PROGRAM)
    settings = Settings(unsafe_fixes=True)

    def new_text() -> str:
        [result] = [r for r in run([str(folder)], settings, rewrite=True, jobs=1, use_cache=True).results
                    if r.path.endswith("train.py") and "variants" not in r.path]
        return result.new_bytes.decode()

    assert single_process_form(new_text())
    place = {"beside": folder, "above": folder.parent, "variants": folder / "variants"}[where]
    (place / name).write_text(text)
    assert not single_process_form(new_text())
