"""verify runs a real program the way users install and lay it out (issue 28).

- The harness reaches the tool without taking anything from the interpreter's own `sys.path`: from a regular
  install the tool lies in site-packages, where the program's third-party packages are.
- Each run copies the project (the folder holding pyproject.toml or .git), so a script reaches a sibling folder
  one level up (`sys.path.append("..")`, `common/`), and the migration covers those files too.
- The reference without torch_xla answers as the `neuron` device (a migrated device check holds there), and a
  process group made without a backend (`init_device_mesh("neuron", ...)`) serves its collectives.
- Before running, the migrated program's own files are read: the torch_xla they still use is reported, and a
  program that cannot start without torch_xla stops at once, naming each line.
- An error torch.compile wraps is shown as itself, at the program's line, before the wrapper.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import cli

pytestmark = pytest.mark.needs_torch


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


def _verify(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, dict | None]:
    proc = cli("verify", "--format", "json", *args, cwd=cwd)
    return proc, json.loads(proc.stdout) if proc.stdout.startswith("{") else None


# -- the interpreter's sys.path -------------------------------------------------------------------------------
@pytest.mark.parametrize("on_path", [True, False], ids=["site-packages (regular install)", "checkout (editable)"])
def test_the_harness_takes_away_only_what_it_added_to_sys_path(tmp_path, monkeypatch, on_path):
    from neuron_migrate.verify import runs

    tool = tmp_path / "site-packages"  # where the tool's package lies
    tool.mkdir()
    (tool / "probe_thirdparty.py").write_text("VALUE = 7\n")  # a package installed beside it
    monkeypatch.setattr(runs, "PACKAGE_PARENT", str(tool))
    harness = runs._harness_dir(tmp_path, own_interpreter=True)
    env = {k: v for k, v in os.environ.items() if k != runs.CONFIG_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(harness)] + ([str(tool)] if on_path else []))
    probe = ("import json, sys\ntry:\n    import probe_thirdparty; found = probe_thirdparty.VALUE\n"
             "except ImportError:\n    found = None\nprint(json.dumps([found, sys.path]))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    found, path = json.loads(proc.stdout)
    assert str(harness) not in path  # the harness's own folder is not the program's
    if on_path:  # the interpreter's own entry stays, and what lies there imports after the harness started
        assert found == 7 and str(tool) in path
    else:  # the tool's checkout, added for the harness only, is gone again
        assert found is None and str(tool) not in path


# -- the project root ------------------------------------------------------------------------------------------
def test_the_project_root_is_the_folder_with_a_marker(tmp_path):
    from neuron_migrate.verify.runs import VerifyError, project_root

    _write(tmp_path, {"repo/pyproject.toml": "", "repo/training/mnist/train.py": "", "loose/train.py": ""})
    assert project_root(tmp_path / "repo/training/mnist/train.py") == (tmp_path / "repo").resolve()
    (tmp_path / "repo/training/.git").mkdir()  # the nearest marker wins
    assert project_root(tmp_path / "repo/training/mnist/train.py") == (tmp_path / "repo/training").resolve()
    assert project_root(tmp_path / "loose/train.py") == (tmp_path / "loose").resolve()
    assert project_root(tmp_path / "loose/train.py", tmp_path) == tmp_path.resolve()  # --root
    with pytest.raises(VerifyError, match="not inside it"):
        project_root(tmp_path / "loose/train.py", tmp_path / "repo")


SIBLING = {
    ".git/HEAD": "ref: refs/heads/main\n",
    "samples/common/__init__.py": "",
    "samples/common/helpers.py": """
        import torch
        import torch_xla.core.xla_model as xm


        def device():
            return xm.xla_device()


        def batch(step):
            g = torch.Generator().manual_seed(step)
            return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
        """,
    "samples/linear/train.py": """
        import sys

        if ".." not in sys.path:
            sys.path.append("..")
        import torch
        import torch_xla.core.xla_model as xm

        import common.helpers as helpers

        device = helpers.device()
        model = torch.nn.Linear(4, 2).to(device)
        if next(model.parameters()).device != xm.xla_device():
            raise SystemExit("the model is not on the device")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x, y = helpers.batch(step)
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        print("loss", round(loss.item(), 5))
        """,
}


@pytest.mark.slow
def test_a_script_importing_a_folder_one_level_up_verifies_with_its_device_check(tmp_path):
    """`sys.path.append("..")` and `common/` one level up, from the script's own folder; the migration of the
    sibling file is laid over each run's copy, and the device check it writes holds in the CPU reference."""
    _write(tmp_path, SIBLING)
    before = (tmp_path / "samples/common/helpers.py").read_text()
    proc, report = _verify("train.py", "--max-steps", "3", "--skip-no-neuron", cwd=tmp_path / "samples/linear")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["verdict"] == "equivalent"
    assert sorted(report["migration"]["changed"]) == ["samples/common/helpers.py", "samples/linear/train.py"]
    assert report["migration"]["torch_xla_left"] == []
    assert (tmp_path / "samples/common/helpers.py").read_text() == before  # the user's files are never touched


FSDP2 = {
    "pyproject.toml": "",
    "train.py": """
        import os

        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard


        def main():
            mesh = init_device_mesh("neuron", (int(os.environ.get("WORLD_SIZE", "1")),))
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
            fully_shard(model.to("neuron"), mesh=mesh)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            data = torch.randn(16, 8)
            for _ in range(3):
                loss = model(data.to("neuron")).pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            dist.barrier()
            dist.destroy_process_group()


        if __name__ == "__main__":
            main()
        """,
}


@pytest.mark.slow
def test_an_fsdp2_program_on_a_mesh_group_verifies_against_its_unsharded_reference(tmp_path):
    _write(tmp_path, FSDP2)
    proc, report = _verify("train.py", "--nproc", "2", "--skip-no-neuron", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["verdict"] == "equivalent"
    assert report["runs"][0]["program"].endswith("unsharded")


def test_a_group_made_without_a_backend_serves_the_cpu_collectives(tmp_path):
    """The emulated device runs collectives on CPU tensors: the `neuron` backend of a group made by
    `init_device_mesh` / `init_process_group()` serves the `cpu` device too (a barrier, an all-reduce)."""
    code = textwrap.dedent("""
        from neuron_migrate.verify import emulator
        emulator.install()
        import torch, torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        init_device_mesh("neuron", (1,))
        dist.barrier()
        t = torch.ones(2, device="neuron")
        dist.all_reduce(t)
        print(t.device.type, t.cpu().tolist())
        dist.destroy_process_group()
        """)
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_free_port())}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "neuron [1.0, 1.0]"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- what the migration left of torch_xla ------------------------------------------------------------------------
LEFT = {
    "setup.cfg": "",
    "train.py": """
        import torch

        import helpers
        import torch_xla.debug.profiler as xp  # left by the migration: no native form


        def main():
            server = xp.start_server(9012)
            print(helpers.scale(torch.ones(2)), server)


        if __name__ == "__main__":
            main()
        """,
    "helpers.py": """
        try:
            import torch_xla.core.xla_model as xm  # guarded: the program starts without it
        except ImportError:
            xm = None


        def scale(t):
            import torch_xla.experimental as xe  # in a function: not at start
            return t * 2
        """,
    "unrelated.py": "import torch_xla\n",
}


def test_the_closure_finds_what_the_program_imports_and_what_runs_at_start(tmp_path):
    from neuron_migrate.verify.closure import closure

    _write(tmp_path, {**LEFT, "pkg/__init__.py": "from .inner import f\n", "pkg/inner.py": "import torch_xla\n",
                      "train.py": LEFT["train.py"].replace("import helpers", "import helpers\n        from pkg import f")})
    found = closure(tmp_path / "train.py", tmp_path)
    assert found.relative() == {"train.py", "helpers.py", "pkg/__init__.py", "pkg/inner.py"}
    left = {(u.path, u.line): u.at_start for u in found.leftovers}
    assert left == {("train.py", 5): True, ("train.py", 9): False, ("helpers.py", 2): False,
                    ("helpers.py", 8): False, ("pkg/inner.py", 1): True}
    assert [f"{u.path}:{u.line}" for u in found.blocking()] == ["pkg/inner.py:1", "train.py:5"]


def test_a_migration_that_cannot_start_without_torch_xla_stops_before_any_run(tmp_path):
    _write(tmp_path, LEFT)
    proc, report = _verify("train.py", cwd=tmp_path)
    assert proc.returncode == 2 and report is None
    assert "cannot start without torch_xla" in proc.stderr
    assert re.search(r"^  train\.py:\d+ `import torch_xla\.debug\.profiler as xp", proc.stderr, re.MULTILINE)
    assert "helpers.py" not in proc.stderr and "unrelated.py" not in proc.stderr


def test_markers_in_the_programs_own_files_are_not_said_to_be_elsewhere(tmp_path):
    from neuron_migrate.findings import Finding
    from neuron_migrate.verify.closure import closure
    from neuron_migrate.verify.report import Report, _migration_lines
    from neuron_migrate.verify.runs import Migration

    _write(tmp_path, LEFT)
    marker = {name: Finding(str(tmp_path / name), 1, 1, "NM199", "torch_xla left")
              for name in ("train.py", "helpers.py", "unrelated.py")}
    migration = Migration(tmp_path, tmp_path / "train.py", tmp_path, ["train.py", "unrelated.py"],
                          manual=list(marker.values()))
    report = Report("train.py", [], [], migration, closure=closure(tmp_path / "train.py", tmp_path))
    shown, hidden = report.markers()
    assert [f.path for f in shown] == ["train.py", "helpers.py"] and hidden == 1
    lines = _migration_lines(report)
    assert lines[0] == ("  migration: 2 files rewritten (train.py; 1 more in files the program does not import), "
                        "3 manual items left as TODO markers (1 in files the program does not import)")
    assert "  torch_xla left in the program's files: 4 lines" in lines
    assert "    train.py:4 `import torch_xla.debug.profiler as xp  # left by the migration: no native form` " \
           "(runs at start)" in lines


# -- errors ----------------------------------------------------------------------------------------------------
def test_an_error_torch_compile_wrapped_comes_first_at_the_programs_line(tmp_path):
    from neuron_migrate.verify.report import _failure_tail
    from neuron_migrate.verify.runs import Program, RunResult

    folder = tmp_path / "runs" / "target"
    stderr = textwrap.dedent(f"""
        Traceback (most recent call last):
          File "{folder}/train.py", line 30, in <module>
            main()
          File "{folder}/model.py", line 12, in forward
            return self.block(x) + self.forward(x)
          File "/venv/lib/python3.11/site-packages/torch/_dynamo/output_graph.py", line 3147, in call_user_compiler
            raise BackendCompilerFailed(
          File "/venv/lib/python3.11/site-packages/torch/fx/graph_module.py", line 400, in __call__
            return super().__call__(*args, **kwargs)
        torch._dynamo.exc.BackendCompilerFailed: backend='neuron' raised:
        RecursionError: maximum recursion depth exceeded while calling a Python object

        Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially if you're reporting a bug to PyTorch). For even more developer context, set TORCH_LOGS="+dynamo"
        """).lstrip()
    run = RunResult(Program("target", "migrated copy", sys.executable, folder / "train.py", "emulated"), 1, 1.0,
                    stderr, folder=folder)
    tail = _failure_tail(run)
    assert tail[0] == "RecursionError: maximum recursion depth exceeded while calling a Python object"
    assert tail[1] == "  at model.py:12 `return self.block(x) + self.forward(x)`"
    assert "BackendCompilerFailed" in tail[2] and tail[3].startswith("Traceback")
    wrapper = tail.index("torch._dynamo.exc.BackendCompilerFailed: backend='neuron' raised:")
    assert tail[wrapper + 1] == tail[0]  # the traceback keeps the wrapped error after the wrapper
