"""Properties over generated dependency files: pinning is a fixed point and leaves well-formed files."""

from __future__ import annotations

import re

from hypothesis import example, given, settings, strategies as st
from packaging.requirements import Requirement

from neuron_migrate.pin.requirements import entries_of, process_requirements
from neuron_migrate.pin.shell import commands, pip_install, process_shell
from neuron_migrate.settings import Settings

REQUIREMENTS = [
    "torch", "torch==2.1.2+cpu", "torch>=2.1 ; python_version >= '3.9'", "torch==2.1.2 ; sys_platform == 'darwin'",
    "torch-neuronx==2.9.0.2.15.32035", "torch-neuronx==2.14.*", "torch_neuronx", "torch-xla==2.9.0",
    "torch-xla[tpu]", "libneuronxla", "torch-neuron==1.13.1.*", "neuronx-cc==2.21.*", "neuronx-cc", "nki",
    "torchvision>=0.16", "torchaudio", "numpy<2", "transformers[torch]>=4.36", "Torch-Vision==0.29.0",
]
OTHER_LINES = ["# a comment", "", "--extra-index-url https://download.pytorch.org/whl/cpu",
               "--extra-index-url https://pip.repos.neuron.amazonaws.com", "-e ."]
line = st.one_of(st.sampled_from(REQUIREMENTS), st.sampled_from(OTHER_LINES),
                 st.tuples(st.sampled_from(REQUIREMENTS), st.just("  # why")).map("".join))
newline = st.sampled_from(["\n", "\r\n"])


def pin(handler, path, text, **kw):
    result = handler(path, text.encode(), Settings(**kw), True)
    return result.new_bytes.decode() if result.changed else text


@settings(max_examples=150, deadline=None)
@given(st.lists(line, max_size=12), newline, st.sampled_from(["2.13", "2.14"]))
def test_requirements_files(lines, nl, torch):
    text = nl.join(lines) + nl
    once = pin(process_requirements, "requirements.txt", text, torch=torch)
    assert pin(process_requirements, "requirements.txt", once, torch=torch) == once
    entries, _, _ = entries_of(once)
    for entry in entries:
        Requirement(once[entry.req_start:entry.req_end])
    if "\r\n" in text:
        assert once.count("\n") == once.count("\r\n")


BARE = [r for r in REQUIREMENTS if re.fullmatch(r"[A-Za-z0-9_.=*+-]+", r)]  # safe as unquoted shell words
word = st.one_of(st.sampled_from(BARE),
                 st.sampled_from(REQUIREMENTS).map(lambda r: f'"{r}"'),
                 st.sampled_from(["-U", "--no-cache-dir", "-r reqs.txt"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(word, min_size=1, max_size=6), min_size=1, max_size=3),
       st.sampled_from([" ", " \\\n    "]))
# the packages added after torch-neuronx fell inside the span that removed the torch-xla line after it
@example([["torch-neuronx==2.9.0.2.15.32035", "torch-xla==2.9.0"], ["nki", '"neuronx-cc==2.21.*"']], " \\\n    ")
@example([["torch-neuronx==2.9.0.2.15.32035", "torch-xla==2.9.0", "torch-xla==2.9.0"], ["nki"]], " \\\n    ")
def test_shell_scripts(lines, separator):
    text = "".join("pip install" + separator + separator.join(words) + "\n" for words in lines)
    once = pin(process_shell, "install.sh", text)
    assert pin(process_shell, "install.sh", once) == once
    before = [pip_install(c) for c in commands(text)]
    after = [pip_install(c) for c in commands(once)]
    assert len(after) == len(before) and all(after)
    for old, new in zip(before, after):
        if old.requirements:  # a pip install is never left without anything to install
            assert new.requirements or new.other_sources


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(REQUIREMENTS), min_size=1, max_size=6), st.booleans(), st.booleans())
def test_setup_py_lists(requirements, multiline, trailing_comma):
    import ast

    from neuron_migrate.pin.setup_py import process_setup_py

    items = [repr(r) for r in requirements]
    if multiline:
        last = items[-1] + ("," if trailing_comma else "")
        body = "[\n" + "".join(f"    {item},\n" for item in items[:-1]) + f"    {last}\n]"
    else:
        body = "[" + ", ".join(items) + ("," if trailing_comma else "") + "]"
    text = f"from setuptools import setup\n\nsetup(name='x', install_requires={body})\n"
    once = pin(process_setup_py, "setup.py", text)
    assert pin(process_setup_py, "setup.py", once) == once
    ast.parse(once)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aZ9-_.", max_size=12))
def test_canonical_name_is_packagings(name):
    from packaging.utils import canonicalize_name

    from neuron_migrate.pin import canonical_name

    assert canonical_name(name) == canonicalize_name(name)
