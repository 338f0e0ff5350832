"""Device names held as data change together or not at all (NM102, NM321, NM117), and device equality compares types.

The programs below choose a branch from a device name. Each runs as written (with a stand-in torch_xla) and as
rewritten, in both device styles, from its defaults, its command line and its environment: the rewritten program
must take the branch the original took. Then the text: which literals change, and where the one marker goes.
"""

from __future__ import annotations

import os
import sys
import textwrap
import types

import pytest

from tests.helpers import check_codes, rewrite_text

# Each program ends with `RESULT = <the branch it took>`; `main(argv)` reads the command line where it has one.
PROGRAMS = {
    "dataclass default compared by a helper (a script)": '''
        from dataclasses import dataclass
        import torch_xla.core.xla_model as xm

        @dataclass
        class Config:
            device: str = "xla"

        def get_device(requested):
            if requested == "xla":
                return "accelerator"
            if requested in ("cuda", "gpu"):
                return "gpu"
            return "cpu"

        def main(argv):
            return get_device(Config().device)

        if __name__ == "__main__":
            pass
        ''',
    "keyword to the file's own class, membership in a table the file defines": '''
        import torch_xla.core.xla_model as xm

        KINDS = ("xla", "cuda", "cpu")
        LABELS = {"xla": "accelerator", "cuda": "gpu", "cpu": "cpu"}

        class Runner:
            def __init__(self, device_kind="xla"):
                assert device_kind in KINDS
                self.device_kind = device_kind

            def label(self):
                return LABELS[self.device_kind]

        def main(argv):
            return Runner(device_kind="xla").label()

        if __name__ == "__main__":
            pass
        ''',
    "command-line option with choices, compared": '''
        import argparse
        import torch_xla.core.xla_model as xm

        def pick(name):
            if name.lower() == "xla":
                return "accelerator"
            return "cpu"

        def main(argv):
            parser = argparse.ArgumentParser()
            parser.add_argument("--device", choices=["cpu", "cuda", "xla"], default="xla")
            return pick(parser.parse_args(argv).device)

        if __name__ == "__main__":
            pass
        ''',
    "environment value with a default, compared": '''
        import os
        import torch_xla.core.xla_model as xm

        def main(argv):
            device_name = os.environ.get("TEST_DEVICE_NAME", "xla")
            return "accelerator" if device_name == "xla" else "cpu"

        if __name__ == "__main__":
            pass
        ''',
    "configuration dictionary and a match": '''
        import torch_xla.core.xla_model as xm

        CONFIG = {"device": "xla"}

        def main(argv):
            match CONFIG.get("device", "xla"):
                case "xla" | "xla:0":
                    return "accelerator"
                case _:
                    return "cpu"

        if __name__ == "__main__":
            pass
        ''',
    "public library function compared on its parameter": '''
        import torch_xla.core.xla_model as xm

        def get_device(device="xla"):
            if device == "xla":
                return "accelerator"
            return "cpu"

        def main(argv):
            return get_device() + "/" + get_device("xla")
        ''',
}
# how users run them: (command line, environment)
RUNS = [([], {}), (["--device", "xla"], {"TEST_DEVICE_NAME": "xla"}), (["--device", "cpu"], {"TEST_DEVICE_NAME": "cpu"})]


def _run(source: str, argv: list[str], env: dict[str, str]) -> str:
    stub = {name: types.ModuleType(name) for name in ("torch_xla", "torch_xla.core", "torch_xla.core.xla_model")}
    program = stub["device_names_program"] = types.ModuleType("device_names_program")
    saved_modules = {name: sys.modules.get(name) for name in stub}
    saved_env = dict(os.environ)
    sys.modules.update(stub)
    os.environ.update(env)
    try:
        exec(compile(source, "program.py", "exec"), program.__dict__)
        return program.main(argv)
    except SystemExit:  # argparse refused a value
        return "refused"
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        for name, module in saved_modules.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


@pytest.mark.parametrize("style", ["neuron", "accelerator"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_rewritten_program_takes_the_branch_the_original_took(name, style):
    original = textwrap.dedent(PROGRAMS[name])
    migrated = rewrite_text(original, device_style=style)
    if style == "accelerator" and "import torch" in migrated:
        pytest.importorskip("torch", reason="the accelerator style's program asks torch for the device it runs on")
    for argv, env in RUNS:
        before, after = _run(original, argv, env), _run(migrated, argv, env)
        if before == "accelerator" or argv == []:
            # --device-style accelerator names the device found at run time: on this machine (no accelerator)
            # `DEVICE.type` is "cpu", and a switch that also has a CPU branch may take that one
            allowed = {before, "cpu"} if style == "accelerator" else {before}
            assert after in allowed, f"{name}, run {argv} {env}: {before} before, {after} after:\n{migrated}"


def test_a_group_defined_in_the_file_is_respelled_whole():
    out = rewrite_text(textwrap.dedent(PROGRAMS["dataclass default compared by a helper (a script)"]))
    assert 'device: str = "neuron"' in out and 'if requested == "neuron":' in out
    assert '"cuda"' in out  # the GPU branch of the same switch stays


def test_a_compared_value_from_outside_is_kept_with_one_marker_where_it_is_defined():
    for name in ("command-line option with choices, compared", "environment value with a default, compared",
                 "public library function compared on its parameter"):
        source = textwrap.dedent(PROGRAMS[name])
        out = rewrite_text(source)
        assert out.count("TODO(neuron-migrate NM117)") == 1, out
        marker = out.splitlines().index(next(line for line in out.splitlines() if "NM117" in line))
        defining = out.splitlines()[marker + 1]
        assert "add_argument" in defining or "environ" in defining or defining.startswith("def get_device"), out
        kept = [line for line in source.splitlines() if '"xla"' in line]
        assert all(line in out.splitlines() for line in kept), out
        assert check_codes(source).count("NM117") == 1


def test_an_unrelated_xla_string_stays():
    source = textwrap.dedent('''
        import argparse
        import torch_xla.core.xla_model as xm

        RESULTS = {"xla": []}
        parser = argparse.ArgumentParser()
        parser.add_argument("--compiler", choices=["xla", "eager"], default="xla")
        args = parser.parse_args()
        if args.compiler == "xla":
            print("compiling with xla", RESULTS["xla"], "xla.log")
        device = xm.xla_device()
        ''')
    out = rewrite_text(source)
    assert [line for line in source.splitlines() if "xla" in line and "xm" not in line] == \
        [line for line in out.splitlines() if "xla" in line]
    assert "NM117" not in out


def test_cuda_in_a_switch_with_xla_is_not_respelled_and_cuda_alone_is_respelled_whole_unless_tested():
    switch = textwrap.dedent('''
        import torch
        import torch_xla.core.xla_model as xm

        def pick(device="cuda"):
            if device == "xla":
                return xm.xla_device()
            elif device == "cuda":
                return torch.device(device)
            return torch.device("cpu")

        if __name__ == "__main__":
            pick()
        ''')
    out = rewrite_text(switch)
    assert 'def pick(device="cuda"):' in out and 'elif device == "cuda":' in out
    assert 'if device == "neuron":' in out
    alone = switch.replace('if device == "xla":\n        return xm.xla_device()\n    elif', "if")
    alone = alone.replace("import torch\n", "import torch\nxm.mark_step()\n")
    out = rewrite_text(alone)
    # `device == "cuda"` tests for CUDA: its branch is a GPU path (engine/paths.py), kept with its group
    assert 'def pick(device="cuda"):' in out and 'if device == "cuda":' in out, out
    # a "cuda" group that no test reads is a leftover of the program moving to neuron: respelled whole
    unread = alone.replace('    if device == "cuda":\n        return torch.device(device)\n    return torch.device("cpu")\n',
                           "    return torch.device(device)\n")
    assert unread != alone
    out = rewrite_text(unread)
    assert 'def pick(device="neuron"):' in out and "return torch.device(device)" in out, out


def test_a_suppressed_site_holds_its_group_back():
    source = textwrap.dedent('''
        import torch_xla.core.xla_model as xm

        default_device = "xla"

        def pick(device=default_device):
            if device == "xla":  # neuron-migrate: ignore[NM102]
                return xm.xla_device()

        if __name__ == "__main__":
            pick()
        ''')
    out = rewrite_text(source)
    assert 'default_device = "xla"' in out and 'if device == "xla":' in out


@pytest.mark.parametrize("style, device_type", [("neuron", '"neuron"'), ("accelerator", "DEVICE.type")])
def test_device_equality_compares_types(style, device_type):
    source = textwrap.dedent('''
        import torch
        import torch_xla.core.xla_model as xm

        def check(model, batch):
            for p in model.parameters():
                if p.device != xm.xla_device():
                    raise RuntimeError(p.device)
            if batch.device == torch.device("xla"):
                return batch
            if str(batch.device).startswith("xla"):
                return batch
            return batch.to(xm.xla_device())
        ''')
    out = rewrite_text(source, device_style=style)
    assert f"if p.device.type != {device_type}:" in out
    assert f"if batch.device.type == {device_type}:" in out
    assert f"str(batch.device).startswith({device_type})" in out


def test_a_migrated_switch_keeps_its_gpu_branch_on_a_second_run():
    """torch_xla's own checkpoint helper tags CUDA and XLA autocast states with one key: the `"xla"` tag becomes
    `"neuron"`, and on a second run the `"cuda"` beside the migrated `"neuron"` is still the GPU branch."""
    source = textwrap.dedent('''
        import torch
        import torch_xla.core.xla_model as xm

        class Checkpoint(torch.autograd.Function):
            @staticmethod
            def forward(ctx, run_function, *args):
                ctx.gpu_autocast_kwargs = {
                    "device_type": "cuda",
                    "enabled": torch.is_autocast_enabled("cuda"),
                }
                ctx.xla_autocast_kwargs = {
                    "device_type": "xla",
                    "enabled": torch.is_autocast_enabled("xla"),
                }
                ctx.state = xm.get_rng_state()
                return run_function(*args)
        ''')
    once = rewrite_text(source)
    assert '"device_type": "cuda"' in once and '"device_type": "neuron"' in once, once
    assert rewrite_text(once) == once


@pytest.mark.parametrize("style", ["neuron", "accelerator"])
@pytest.mark.parametrize("head", ["import torch_xla.core.xla_model as xm", "import torch_neuronx"])
def test_a_device_name_spelled_with_escapes_is_respelled_whole(style, head):
    """`"\\x78la:1"` is `"xla:1"`: the new literal names the device plainly, never a piece of the escape (NM102 on
    an XLA program's names, NM321 on the CUDA names left in a program moving to neuron)."""
    names = 'first = torch.device("\\x78la:1")\nsecond = torch.device(R\'xla\')\n' if "xla" in head else \
        'first = torch.device("cud\\x61:1")\nsecond = torch.device(R\'cuda\')\n'
    out = rewrite_text(f"import torch\n{head}\n\n{names}", device_style=style)
    namespace = {"torch": types.SimpleNamespace(device=lambda *name: ":".join(map(str, name))),
                 "DEVICE": types.SimpleNamespace(type="neuron")}
    exec("\n".join(line for line in out.splitlines() if line.startswith(("first", "second"))), namespace)
    assert (namespace["first"], namespace["second"]) == ("neuron:1", "neuron"), out
    assert "x61" not in out and "x78" not in out, out


def test_a_gpu_program_comparing_a_cuda_device_is_no_cuda_leftover(monkeypatch):
    """NM321 reports CUDA names left in a program moving to neuron; a GPU program that only mentions neuron keeps its
    device test. The tree pre-filter is off: the rule itself decides on LibCST's tree."""
    from neuron_migrate.engine import python as engine

    monkeypatch.setattr(engine, "TREE_FILTER", False)
    source = textwrap.dedent('''
        import torch
        # a neuron version of this benchmark lives in ../trn2

        def on_gpu(t):
            return t.device == torch.device("cuda")
        ''')
    assert check_codes(source) == []
    assert check_codes(source.replace("import torch\n", "import torch\nimport torch_neuronx\n")) == ["NM321"]
