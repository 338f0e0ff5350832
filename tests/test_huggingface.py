"""Hugging Face on Neuron: accelerate configuration files (NM511/NM512), optimum-neuron's trainer classes
(NM508/NM509), USE_TORCH_XLA (NM405)."""

from __future__ import annotations

import os
import shutil

import pytest

from neuron_migrate.files.accelerate_config import process_accelerate_config
from neuron_migrate.engine.discover import kind_of
from neuron_migrate.engine.runner import run, write_results
from neuron_migrate.engine.python import process_python
from neuron_migrate.settings import Settings
from tests.helpers import FIXTURES, rewrite_bytes

CONFIGS = FIXTURES / "accelerate_config"
CASES = sorted(p for p in CONFIGS.iterdir() if p.is_file())


@pytest.mark.parametrize("name, kind", [
    ("accelerate_config.yaml", "accelerate-config"), ("fsdp_accelerate.yml", "accelerate-config"),
    ("default_config.yaml", "accelerate-config"), ("docker-compose.yaml", None), ("environment.yml", "conda-env"),
])
def test_accelerate_config_files_are_found_by_name(name, kind):
    assert kind_of(name) == kind


def test_accelerate_config_fixtures(tmp_path):
    work = tmp_path / "configs"
    shutil.copytree(CONFIGS, work, ignore=shutil.ignore_patterns("expected"))
    first = run([str(work)], Settings(unsafe_fixes=True), rewrite=True, jobs=1)
    assert not first.errors
    write_results(first)
    for source in CASES:
        expected = CONFIGS / "expected" / source.name
        if os.environ.get("NEURON_MIGRATE_UPDATE_SNAPSHOTS") == "1" and expected.exists():
            expected.write_text((work / source.name).read_text())  # regenerate the expected copies that exist
        want = (expected if expected.exists() else source).read_text()
        assert (work / source.name).read_text() == want, source.name
    assert [r.path for r in run([str(work)], Settings(unsafe_fixes=True), rewrite=True, jobs=1).changed] == []
    # after the rewrite only the markers remain, reported as NM900 until a person resolves them
    after = run([str(work)], Settings(unsafe_fixes=True), rewrite=False, jobs=1)
    assert sorted((f.path.rsplit("/", 1)[1], f.code) for f in after.findings) == [
        ("deepspeed_accelerate.yaml", "NM900"), ("fsdp_accelerate.yml", "NM900")]


def test_xla_for_neuron_becomes_multi_neuron_and_tpu_configs_stay():
    neuron = b"# trn2 training\ndistributed_type: 'XLA'  # from accelerate config\nnum_processes: 64\n"
    result = process_accelerate_config("accelerate.yaml", neuron, Settings(unsafe_fixes=True), True)
    assert result.new_bytes == b"# trn2 training\ndistributed_type: 'MULTI_NEURON'  # from accelerate config\n" \
                               b"num_processes: 64\n"
    assert [(f.line, f.code) for f in result.findings] == [(2, "NM511")]
    assert "accelerate>=1.13.0" in result.findings[0].message
    assert process_accelerate_config("accelerate.yaml", neuron, Settings(), True).new_bytes is None  # unsafe: held
    tpu = b"distributed_type: XLA\nnum_processes: 8\n"
    assert process_accelerate_config("accelerate.yaml", tpu, Settings(), True).findings == []
    not_accelerate = b"# neuron\nservices:\n  web: {}\n"
    assert process_accelerate_config("accelerate.yaml", not_accelerate, Settings(), False).findings == []


def test_optimum_neuron_classes_are_not_rewritten_when_kwargs_hide_the_arguments():
    text = (b"from optimum.neuron import NeuronTrainer, NeuronTrainingArguments\n\n"
            b"def build(model, data, **options):\n"
            b"    args = NeuronTrainingArguments(output_dir='out', **options)\n"
            b"    return NeuronTrainer(model=model, args=args, train_dataset=data)\n")
    assert rewrite_bytes(text, path="t.py") is None  # neither class changes: the options may be Neuron-only


def test_a_neuron_only_argument_anywhere_keeps_every_class_and_names_the_native_equivalent():
    text = (b"from optimum.neuron import NeuronTrainer, NeuronTrainingArguments\n\n"
            b"args = NeuronTrainingArguments(output_dir='out', pipeline_parallel_size=4)\n"
            b"trainer = NeuronTrainer(model=model, args=args)\n")
    out = rewrite_bytes(text, path="t.py").decode()
    assert "trainer = NeuronTrainer(model=model, args=args)" in out and "import transformers" not in out
    assert "# TODO(neuron-migrate NM509): port `pipeline_parallel_size` by hand; neuron-migrate explain NM509" in out
    (found,) = [f for f in process_python("t.py", text, Settings(), rewrite=False).findings if f.code == "NM509"]
    assert found.message.startswith("`pipeline_parallel_size` is an optimum-neuron argument that "
                                    "`transformers.TrainingArguments` does not have: no TrainingArguments "
                                    "equivalent yet: use `torch.distributed.pipelining`")


def test_a_partly_used_optimum_import_keeps_the_other_names():
    text = (b"from optimum.neuron import NeuronModelForCausalLM, NeuronTrainer\n\n"
            b"trainer = NeuronTrainer(model=NeuronModelForCausalLM.from_pretrained('m'), args=None)\n")
    out = rewrite_bytes(text, path="t.py").decode()
    assert "from optimum.neuron import NeuronModelForCausalLM\n" in out
    assert "transformers.Trainer(model=NeuronModelForCausalLM.from_pretrained('m'), args=None)" in out
    # the model class that stays still needs a person, with its own route (NM524); nothing else of optimum.neuron
    assert "TODO(neuron-migrate NM524): XLA inference ended: use vLLM Neuron" in out
    assert "NM506" not in out


def test_use_torch_xla_is_reported_with_accelerates_advice(tmp_path):
    path = FIXTURES / "NM5xx-huggingface" / "transformers_trainer_xla.py"
    found = [f for f in run([str(path)], Settings(), rewrite=False, jobs=1).findings if f.code == "NM405"]
    assert len(found) == 1 and found[0].line == 7
    assert "set the USE_TORCH_XLA to false" in found[0].message and "uninstall torch-xla" in found[0].message


def test_the_optimum_neuron_advice_follows_the_names_imported():
    def advice(source: bytes) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for f in process_python("t.py", source, Settings(), False).findings:
            found.setdefault(f.code, []).append(f.message)
        return found

    def route(name: str) -> str:
        found = advice(f"from optimum.neuron import {name}\n\nm = {name}.from_pretrained('m', export=True)\n".encode())
        assert set(found) == {"NM524"} and len(found["NM524"]) == 1, found
        message = found["NM524"][0]
        assert "Trainer" not in message and "load the original checkpoint" in message and "export=True" in message
        return message

    assert "serve it with vLLM Neuron" in route("NeuronModelForCausalLM")
    for name, plain in (("NeuronModelForEmbedding", "`transformers.AutoModel`"),
                        ("NeuronModelForFeatureExtraction", "`transformers.AutoModel`"),
                        ("NeuronModelForSequenceClassification", "`transformers.AutoModelForSequenceClassification`"),
                        ("NeuronModelForSentenceTransformers", "`sentence_transformers.SentenceTransformer`"),
                        ("NeuronStableDiffusionXLPipeline", "`diffusers.StableDiffusionXLPipeline`")):
        message = route(name)
        assert plain in message and "vLLM" not in message and 'torch.compile(model, backend="neuron")' in message
    training = advice(b"from optimum.neuron.distributed import lazy_load_for_parallelism\n")
    assert set(training) == {"NM506"} and "transformers.Trainer" in training["NM506"][0]
    assert "vLLM" not in training["NM506"][0]
    # an import of a model class and a training helper: each gets its own advice
    both = advice(b"from optimum.neuron import NeuronModelForCausalLM, NeuronHfArgumentParser\n")
    assert "vLLM Neuron" in both["NM524"][0] and "NeuronHfArgumentParser" not in both["NM524"][0]
    assert "transformers.Trainer" in both["NM506"][0] and "vLLM" not in both["NM506"][0]
    # on an Inf2 target the XLA inference path is maintained: a note, no route and no marker
    inf2 = process_python("t.py", b"from optimum.neuron import NeuronModelForEmbedding\n", Settings(instance="inf2"),
                          True)
    assert {f.code for f in inf2.findings} == {"NM510"} and not inf2.changed
