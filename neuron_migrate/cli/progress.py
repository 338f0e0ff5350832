"""A progress bar on stderr for long runs on a terminal; silent when stderr is piped, in CI, or for short runs."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

DELAY = 0.5  # seconds before the bar appears: short runs never show it
INTERVAL = 0.1  # seconds between redraws


def wanted(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stderr
    return stream.isatty() and not os.environ.get("CI") and os.environ.get("TERM") != "dumb"


class Progress:
    def __init__(self, total: int, label: str = "files", stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = wanted(self.stream) if enabled is None else enabled
        self.done = 0
        self.started = time.monotonic()
        self.drawn_at = 0.0
        self.shown = False

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.started < DELAY or now - self.drawn_at < INTERVAL:
            return
        self.drawn_at = now
        self.shown = True
        import shutil  # here: a run on a terminal long enough for a bar needs it, no other (2 ms of start-up)

        self.stream.write("\r" + self.line(shutil.get_terminal_size((80, 20)).columns))
        self.stream.flush()

    def line(self, columns: int) -> str:
        counts = f" {self.done}/{self.total} {self.label}"
        width = max(10, min(40, columns - len(counts) - 3))
        filled = width * self.done // max(1, self.total)
        return f"[{'#' * filled}{'.' * (width - filled)}]{counts}"

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
