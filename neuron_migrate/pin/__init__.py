"""Dependency and platform pinning: every file that installs packages ends up on one TorchNeuron family.

`plan` decides (one place for the version logic, data in rules/versions.toml); one module per file format
finds the entries and renders the outcome; `pin_install_command` serves notebook cells.
"""


def canonical_name(name: str) -> str:
    """A distribution name normalized as PEP 503 says (`re.sub(r"[-_.]+", "-", name).lower()`), what
    `packaging.utils.canonicalize_name` gives: here because importing that module loads `packaging.tags` too
    (about 11 ms of every run's start-up, for `check` only this)."""
    value = name.lower().replace("_", "-").replace(".", "-")
    while "--" in value:
        value = value.replace("--", "-")
    return value
