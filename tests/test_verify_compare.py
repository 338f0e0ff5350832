"""The comparison and the report's figures, on hand-made records (no subprocess)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="verify compares tensors: needs PyTorch (the [verify] extra)")

from neuron_migrate.verify.compare import compare, compare_losses, precision_of, same_data
from neuron_migrate.verify.fallbacks import known_fallbacks, predict
from neuron_migrate.verify.report import Report, recompiles, render_markdown, render_text, timing
from neuron_migrate.verify.runs import Program, RunResult


def record(losses, params, steps=None, rank=0, dtypes=("torch.float32",), **extra) -> dict:
    return {"meta": {"rank": rank, "torch": "2.13.0"}, "losses": losses, "params": params, "outputs": [],
            "step_times": steps if steps is not None else [0.1] * len(losses), "param_dtypes": list(dtypes),
            **extra}


def test_identical_runs_are_equivalent():
    params = [{"w": torch.ones(3)}]
    result = compare([record([1.0, 0.5], params)], [record([1.0, 0.5], params)])
    assert result.equivalent and result.precision == "fp32" and (result.rtol, result.atol) == (1e-4, 1e-5)
    assert all(c.max_abs == 0 and abs(c.cosine - 1.0) < 1e-12 for c in result.checks if c.numeric)


def test_tolerance_follows_the_dtype():
    ref = record([1.0], [{"w": torch.ones(3)}])
    tgt = record([1.005], [{"w": torch.ones(3)}], dtypes=("torch.bfloat16",))
    assert precision_of([ref, tgt]) == "low"
    mismatch = compare([ref], [tgt])  # the same values, but the target trains bfloat16 weights
    assert [c.detail for c in mismatch.checks if not c.ok] == ["parameters: reference float32, target bfloat16"]
    ref_bf16 = record([1.0], [{"w": torch.ones(3)}], dtypes=("torch.bfloat16",))
    assert compare([ref_bf16], [tgt]).equivalent  # 0.5 % is within bf16 tolerance
    assert not compare([ref], [record([1.005], [{"w": torch.ones(3)}])]).equivalent  # not within fp32's
    assert compare([ref], [record([1.005], [{"w": torch.ones(3)}])], rtol=1e-2).equivalent  # --rtol
    drifted = record([1.0], [{"w": torch.ones(3) + 2e-4}])
    assert not compare([ref], [drifted]).equivalent  # the same kernels must agree closely
    assert compare([ref], [drifted], cross_backend=True).precision == "fp32 across backends"
    assert compare([ref], [drifted], cross_backend=True).equivalent  # torch_xla rounds differently


def test_a_curve_that_drifts_names_the_first_step_that_differs():
    check = compare_losses("loss curve", [2.0, 1.5, 1.0], [2.0, 1.6, 1.3], rtol=1e-4, atol=1e-5)
    assert not check.ok and check.detail == "first differs at loss 2: reference 1.5, target 1.6"
    assert abs(check.max_abs - 0.3) < 1e-9


def test_missing_steps_parameters_and_ranks_are_failures():
    params = [{"w": torch.ones(2)}]
    fewer_steps = compare([record([1.0, 1.0], params)], [record([1.0, 1.0], params, steps=[])])
    assert [c.detail for c in fewer_steps.checks if not c.ok] == ["reference took 2 optimizer steps, target 0"]
    renamed = compare([record([1.0], params)], [record([1.0], [{"v": torch.ones(2)}])])
    assert "parameter names differ: v, w" in [c.detail for c in renamed.checks if not c.ok]
    reshaped = compare([record([1.0], params)], [record([1.0], [{"w": torch.ones(3)}])])
    assert "shapes differ: reference (2,), target (3,)" in [c.detail for c in reshaped.checks]
    ranks = compare([record([1.0], params, rank=0), record([1.0], params, rank=1)], [record([1.0], params)])
    assert not ranks.equivalent and ranks.checks[0].name == "processes"


def test_recompilations_and_timing_from_a_record():
    compiled = [{"frame": "0", "name": "forward", "shapes": [[8, 4]], "seconds": 1.0},
                {"frame": "1", "name": "loss_fn", "shapes": [[8]], "seconds": 0.1},
                {"frame": "0", "name": "forward", "shapes": [[5, 4]], "seconds": 1.0, "reason": "size mismatch"}]
    result = RunResult(Program("target", "x", "python", None, "emulated"), 0, 1.0, "",
                       [record([1.0] * 4, [], steps=[2.0, 0.1, 0.3, 0.2], compilations=compiled)])
    assert [(r.function, r.shapes, r.reasons) for r in recompiles(result)] == [
        ("forward", [[[8, 4]], [[5, 4]]], ["size mismatch"])]
    t = timing(result)
    assert (t.steps, t.first, t.steady) == (4, 2.0, 0.2)


def test_predicted_fallbacks_match_operator_names_with_counts():
    counts = {"mm": 40, "_linalg_svd": 3, "linalg_inv_ex.inverse": 2, "linalg_inv_ex": 1, "svd": 9}
    predicted = predict(counts, known_fallbacks())
    assert [(f.op, f.count) for f in predicted] == [("aten::_linalg_svd", 3), ("aten::linalg_inv_ex", 3)]


def test_report_names_the_shapes_that_recompiled_and_hints_at_padding():
    compiled = [{"frame": "0", "name": "forward (model.py:15)", "shapes": [[32, 784], [10]], "seconds": 1.0},
                {"frame": "0", "name": "forward (model.py:15)", "shapes": [[17, 784], [10]], "seconds": 1.0,
                 "reason": "0/0: tensor 'x' size mismatch at index 0. expected 32, actual 17"}]
    runs = [RunResult(Program(role, "train.py", "python", None, device), 0, 1.0, "",
                      [record([1.0], [{"w": torch.ones(2)}], compilations=compiled)])
            for role, device in (("reference", "cpu"), ("target", "emulated"))]
    report = Report("train.py", [], runs, None)
    report.comparison = compare(runs[0].records, runs[1].records)
    text = render_text(report)
    assert "recompiled forward (model.py:15) 1x: (32, 784) -> (17, 784)" in text
    assert "hint: every new input shape compiles a new graph: pad inputs" in text
    assert report.exit_code == 0 and text.startswith("neuron-migrate verify train.py: equivalent")
    markdown = render_markdown(report)
    assert "`forward (model.py:15)` recompiled 1x ((32, 784) -> (17, 784)); every new input shape" in markdown


def _bn_records(running_var):
    return record([1.0, 0.9], [{"bn.running_var": torch.tensor(running_var), "conv.weight": torch.ones(3)}],
                  module_types=["BatchNorm2d", "ConvNet"])


def _three_way(xla, cpu, target):
    from neuron_migrate.verify.compare import explain_by_cpu

    main = compare([xla], [target], cross_backend=True)
    explain_by_cpu(main, compare([cpu], [target]), compare([xla], [cpu], cross_backend=True), [xla, cpu])
    return main


def test_three_way_a_known_torch_xla_cpu_difference_is_not_the_migrations():
    xla, cpu = _bn_records([0.98568, 1.0]), _bn_records([0.98845, 1.0])  # biased vs unbiased variance
    main = _three_way(xla, cpu, _bn_records([0.98845, 1.0]))
    params = next(c for c in main.checks if c.name == "final parameters")
    assert not params.ok and params.explained == "BatchNorm running variance"
    assert main.equivalent and any("biased batch variance" in n for n in main.notes)
    runs = [RunResult(Program(role, "train.py", "python", None, device), 0, 1.0, "", [r])
            for role, device, r in (("reference", "xla", xla), ("target", "emulated", cpu))]
    report = Report("train.py", [], runs, None)
    report.comparison = main
    assert report.exit_code == 0 and "xla  final parameters" in render_text(report)


def test_three_way_bfloat16_accumulation_is_a_known_torch_xla_cpu_difference():
    """A long bfloat16 sum of ones: torch_xla on the CPU accumulates in bfloat16 (256), torch in float32."""
    def run(total, dtype="torch.bfloat16"):
        r = record([], [], steps=[], dtypes=(dtype,), call_dtypes=[dtype], module_types=["Summer"])
        r["outputs"] = [[torch.tensor([total])]]
        return r
    main = _three_way(run(256.0), run(109056.0), run(109056.0))
    outputs = next(c for c in main.checks if c.name.startswith("module outputs"))
    assert not outputs.ok and outputs.explained == "bfloat16 accumulation" and main.equivalent
    assert any("bfloat16 accumulation" in n for n in main.notes)
    # in float32 no known difference applies: the same numbers fail
    main = _three_way(run(256.0, "torch.float32"), run(109056.0, "torch.float32"), run(109056.0, "torch.float32"))
    assert not main.equivalent


def test_three_way_bfloat16_accumulation_excuses_a_loss_curve_only_on_the_same_course():
    """Measured on tests/data/verify/bf16_mse: torch_xla's losses a fifth lower than torch's, step by step in the
    same proportion. A migration whose losses take another course (a changed learning rate) is not excused."""
    def run(losses):
        return record(losses, [{"w": torch.ones(2, dtype=torch.bfloat16)}], dtypes=("torch.bfloat16",))
    xla = run([0.88672, 0.86719, 0.84766, 0.83203, 0.8125])
    cpu = run([1.07812, 1.05469, 1.03906, 1.01562, 0.99219])
    main = _three_way(xla, cpu, cpu)
    curve = next(c for c in main.checks if c.name == "loss curve")
    assert not curve.ok and curve.explained == "bfloat16 accumulation" and main.equivalent
    faster = run([1.07812, 0.98, 0.9, 0.83, 0.77])
    main = _three_way(xla, faster, faster)
    curve = next(c for c in main.checks if c.name == "loss curve")
    assert not curve.explained and not main.equivalent


def test_three_way_a_target_that_differs_from_the_cpu_run_fails():
    xla, cpu = _bn_records([0.98568, 1.0]), _bn_records([0.98845, 1.0])
    main = _three_way(xla, cpu, _bn_records([0.97, 1.0]))  # the migration itself is wrong
    assert not main.equivalent and not any(c.explained for c in main.checks)


def test_three_way_without_a_known_difference_stays_a_failure():
    plain = lambda v: record([1.0], [{"w": torch.tensor(v)}], module_types=["Linear"])  # noqa: E731
    main = _three_way(plain([1.0, 2.0]), plain([1.1, 2.0]), plain([1.1, 2.0]))
    assert not main.equivalent
    assert any("no known torch_xla CPU difference explains it" in n for n in main.notes)


def test_three_way_batchnorm_does_not_excuse_a_weight_or_loss_difference():
    """A wrong migration runs wrong on the plain CPU too: BatchNorm explains only the running variance."""
    def run(loss, weight):
        return record([1.0, loss], [{"bn.running_var": torch.tensor([1.0]), "conv.weight": torch.tensor(weight)}],
                      module_types=["BatchNorm2d"])
    main = _three_way(run(0.9, [1.0]), run(0.8, [1.2]), run(0.8, [1.2]))
    assert not main.equivalent and not any(c.explained for c in main.checks)


def test_printed_lines_ignore_times_and_allow_the_printed_precision():
    from neuron_migrate.verify.compare import compare_printed, printed_lines

    ref = printed_lines("epoch 1 loss 0.1234 on xla:0\ntrained in 3.2s\n12:01:02 step 5\nacc 0.50\n")
    tgt = printed_lines("epoch 1 loss 0.1235 on neuron:0\ntrained in 9.9s\n12:01:07 step 5\nacc 0.50\n")
    assert [p.template for p in ref] == ["epoch # loss # on <device>", "acc #"]
    assert compare_printed("printed", ref, tgt, 1e-4, 1e-5).ok  # one unit in the last printed digit
    worse = printed_lines("epoch 1 loss 0.1250 on neuron:0\nacc 0.50\n")
    assert not compare_printed("printed", ref, worse, 1e-4, 1e-5).ok
    other = printed_lines("epoch 1 loss 0.1234 on neuron:0\naccuracy 0.50\n")
    assert "line 2 differs" in compare_printed("printed", ref, other, 1e-4, 1e-5).detail


def test_report_lists_markers_of_imported_files_only_with_relative_paths(tmp_path):
    from neuron_migrate.findings import Finding
    from neuron_migrate.verify.runs import Migration

    folder = tmp_path / "migrated"
    m = Migration(folder, folder / "train.py", tmp_path,
                  manual=[Finding(str(folder / "train.py"), 3, 0, "NM230", "shards with torch_xla"),
                          Finding(str(folder / "tools" / "export.py"), 9, 0, "NM301", "not imported")])
    target = record([1.0], [{"w": torch.ones(2)}], files=["model.py", "train.py"])
    runs = [RunResult(Program(role, "train.py", "python", None, device), 0, 1.0, "", [target])
            for role, device in (("reference", "cpu"), ("target", "emulated"))]
    report = Report("train.py", [], runs, m)
    shown, hidden = report.markers()
    assert [(f.path, f.line) for f in shown] == [("train.py", 3)] and hidden == 1
    text = render_text(report)
    assert "2 manual items left as TODO markers (1 in files the program does not import)" in text
    assert "    train.py:3: NM230 shards with torch_xla" in text and "export.py" not in text


def test_ranks_trained_on_the_single_process_batches_only_when_they_had_or_split_them():
    def ran(*steps):
        return {"inputs": [[list(shape), total] for shape, total in steps]}
    single = ran(((32, 784), 100.0), ((32, 784), 90.0))
    # every rank saw the whole batch (FSDP / tensor-parallel programs that feed each rank the global batch)
    assert same_data(single, [single, single])
    # a global batch split by a DistributedSampler without shuffling: the halves make it up
    halves = [ran(((16, 784), 60.0), ((16, 784), 40.0)), ran(((16, 784), 40.0), ((16, 784), 50.0))]
    assert same_data(single, halves)
    # shuffled shards: each rank draws its own batches, which make up none of the single process's
    shards = [ran(((32, 784), 97.0), ((32, 784), 91.0)), ran(((32, 784), 103.0), ((32, 784), 88.0))]
    assert not same_data(single, shards)
    # the same sums in other shapes are other batches; a later step that differs is enough
    assert not same_data(single, [ran(((32, 392), 100.0)), ran(((32, 392), 100.0))])
    assert not same_data(single, [ran(((32, 784), 100.0), ((32, 784), 91.0))] * 2)
    # a record without inputs (an older harness, or a model never trained) says nothing against it
    assert same_data(single, [{}, {}]) and same_data({}, shards)
