"""What the project model (engine/project.py) read beyond the list of files, and whether it reads the same now.

Apart from the model, so that a run whose cache holds the model's facts checks them without importing it.
"""

from __future__ import annotations

import os
import re

from neuron_migrate.engine.cache import digest
from neuron_migrate.engine.sources import read_regular

README = re.compile(r"^readme(\.\w+)?$", re.I)
# the infrastructure files whose instance types tell where a folder's jobs run (shell scripts are discovered):
# Terraform, CloudFormation, a job queue's or job definition's YAML / JSON, a userdata script
INFRA_FILE = re.compile(r"\.(?:tf|tfvars|ya?ml|json|template)$|^user-?data", re.I)


def head(full: str) -> bytes | None:
    """The first MiB of a file the model reads (None when it cannot be read or is not a regular file)."""
    return read_regular(full, 1 << 20)


def readme(folder: str) -> str | None:
    """The name of a folder's README (the first the folder lists), None when it has none or cannot be listed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    return next((name for name in names if README.match(name)), None)


def infrastructure(folder: str) -> list[str]:
    """The names of a folder's infrastructure files, sorted (none when it cannot be listed)."""
    try:
        return sorted(e.name for e in os.scandir(folder) if INFRA_FILE.search(e.name) and e.is_file())
    except OSError:
        return []


def unchanged(inputs: object) -> bool:
    """Whether what a model read (`Project.inputs()`) reads the same now: the same bytes in every file, the same root
    markers, the same READMEs. A malformed record is a change."""
    try:
        files, markers, readmes = inputs["files"], inputs["markers"], inputs["readmes"]  # type: ignore[index]
        listings = inputs["infrastructure"]  # type: ignore[index]
        for full, known in files.items():
            data = head(full)
            if (None if data is None else digest(data)) != known:
                return False
        return (all(os.path.exists(path) == bool(found) for path, found in markers.items())
                and all(readme(folder) == name for folder, name in readmes.items())
                and all(infrastructure(folder) == names for folder, names in listings.items()))
    except (TypeError, KeyError, AttributeError):
        return False
