"""Launch scripts: `python train.py` of a spawn-based program becomes torchrun, or gets a marker."""

from __future__ import annotations

from neuron_migrate.files.launch import process_shell
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES

SPAWNED = """\
import torch_xla.distributed.xla_multiprocessing as xmp


def _mp_fn(index):
    pass


if __name__ == "__main__":
    xmp.spawn(_mp_fn, args=(), nprocs={nprocs})
"""
LOCAL_SPAWN = """\
class Pool:
    def spawn(self, fn, nprocs):
        fn()


xmp = Pool()
xmp.spawn(print, nprocs=4)
"""


def rewrite(tmp_path, script: str, program: str = SPAWNED.format(nprocs=8), name: str = "train.py", **settings):
    (tmp_path / name).write_text(program)
    path = tmp_path / "run.sh"
    path.write_bytes(script.encode())
    settings.setdefault("unsafe_fixes", True)  # the torchrun launch (NM240) is an unsafe fix
    result = process_shell(str(path), script.encode(), Settings(**settings), True)
    return (result.new_bytes or script.encode()).decode(), result


def test_python_launch_becomes_torchrun_with_the_spawned_process_count(tmp_path):
    script = "#!/bin/bash\nset -e\nPJRT_DEVICE=NEURON python3 -u train.py --epochs 2 | tee log.txt\n"
    out, result = rewrite(tmp_path, script)
    assert out.splitlines()[2] == "PJRT_DEVICE=NEURON torchrun --nproc_per_node=8 train.py --epochs 2 | tee log.txt"
    assert out.startswith("#!/bin/bash\nset -e\n") and out.endswith("log.txt\n")
    assert result.applied == {"NM240": 1}
    assert [(f.code, f.line) for f in result.findings] == [("NM240", 3)]
    assert process_shell("run.sh", out.encode(), Settings(), True).new_bytes is None  # a second run changes nothing


def test_process_count_from_neuron_rt_num_cores(tmp_path):
    script = "export NEURON_RT_NUM_CORES=2\ncd src && python train.py\r\n"
    out, _ = rewrite(tmp_path, script, SPAWNED.format(nprocs="None"))
    assert out == "export NEURON_RT_NUM_CORES=2\ncd src && torchrun --nproc_per_node=2 train.py\r\n"


def test_unknown_process_count_is_marked_once(tmp_path):
    script = "  python train.py\n"
    out, result = rewrite(tmp_path, script, SPAWNED.format(nprocs="n"))
    assert out.startswith("  # TODO(neuron-migrate NM241): launch it with torchrun --nproc_per_node; neuron-migrate explain NM241\n")
    assert out.endswith("\n  python train.py\n")
    assert process_shell(str(tmp_path / "run.sh"), out.encode(), Settings(), True).new_bytes is None


def test_programs_without_torch_xla_spawn_and_comments_stay(tmp_path):
    script = "# python train.py\npython train.py\npython missing.py\n"
    out, result = rewrite(tmp_path, script, LOCAL_SPAWN)
    assert result.new_bytes is None and not result.findings


def test_check_mode_reports_without_writing(tmp_path):
    (tmp_path / "train.py").write_text(SPAWNED.format(nprocs=4))
    path = tmp_path / "launch.sh"
    result = process_shell(str(path), b"python train.py\n", Settings(), False)
    assert result.new_bytes is None
    assert [f.code for f in result.findings] == ["NM240"]
    assert process_shell(str(path), b"python train.py\n", Settings(ignore=frozenset({"NM240"})), True).new_bytes is None


def test_spawn_over_every_device_starts_one_process_per_neuron_device(tmp_path):
    out, _ = rewrite(tmp_path, "python train.py\n", SPAWNED.format(nprocs="None"))
    assert out == "torchrun --nproc_per_node=neuron train.py\n"


def test_optimum_cli_exports_get_the_route_of_their_task():
    """`optimum-cli export neuron` exports for the XLA inference path: NM524 above each command (after `sudo -E`,
    `env VAR=...`, `cd ... &&`), with the route of its `--task` (continuation lines read); a second run adds
    nothing, and other commands that only name it stay byte-identical."""
    folder = FIXTURES / "NM5xx-inference" / "exports"
    case = folder / "export_models.sh"
    result = process_shell(str(case), case.read_bytes(), Settings(), True)
    out = result.new_bytes
    assert out == (folder / "export_models.expected.sh").read_bytes()
    assert [(f.code, f.line, f.col) for f in result.findings] == [("NM524", 6, 9), ("NM524", 10, 22), ("NM524", 11, 14)]
    chat, embed, vit = (f.message for f in result.findings)
    assert "serve it with vLLM Neuron" in chat and "load the original checkpoint" in chat
    assert "`transformers.AutoModel`" in embed and "vLLM" not in embed
    assert "vLLM Neuron" in vit and "plain Hugging Face class" in vit  # no --task: both routes
    assert process_shell(str(case), out, Settings(), True).new_bytes is None
    lookalikes = folder / "lookalikes.sh"
    kept = process_shell(str(lookalikes), lookalikes.read_bytes(), Settings(), True)
    assert kept.new_bytes is None and not kept.findings


def test_optimum_cli_exports_on_inf2_are_a_note():
    case = FIXTURES / "NM5xx-inference" / "exports" / "export_models.sh"
    result = process_shell(str(case), case.read_bytes(), Settings(instance="inf2"), True)
    assert result.new_bytes is None and [f.code for f in result.findings] == ["NM510"] * 3
