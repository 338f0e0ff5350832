"""Dependency and platform pinning: every file that installs packages ends up on one TorchNeuron family.

`plan` decides (one place for the version logic, data in rules/versions.toml); one module per file format
finds the entries and renders the outcome; `pin_install_command` serves notebook cells.
"""
