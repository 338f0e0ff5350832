"""Colour on a terminal: on for a TTY, off when piped, with `NO_COLOR` set or `TERM=dumb`; `--color` decides first.

`NO_COLOR` (https://no-color.org) turns colour off when it is set to anything but the empty string;
`FORCE_COLOR` turns it on for an output that is not a terminal (CI logs that render colour).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TextIO

import click

COLOR_CHOICES = ("auto", "always", "never")


def color_wanted(choice: str, stream: TextIO | None) -> bool:
    if choice == "always":
        return True
    if choice == "never" or stream is None:
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@dataclass(frozen=True)
class Style:
    """The few styles the output uses; every one is the plain text when colour is off."""

    color: bool = False

    def _s(self, text: str, **kw) -> str:
        return click.style(text, **kw) if self.color else text

    def path(self, text: str) -> str:
        return self._s(text, bold=True)

    def dim(self, text: str) -> str:
        return self._s(text, fg="cyan")

    def code(self, text: str, error: bool = False) -> str:
        return self._s(text, fg="red" if error else "yellow", bold=True)

    def fixable(self, text: str) -> str:
        return self._s(text, fg="cyan")

    def caret(self, text: str) -> str:
        return self._s(text, fg="red", bold=True)

    def added(self, text: str) -> str:
        return self._s(text, fg="green")

    def removed(self, text: str) -> str:
        return self._s(text, fg="red")

    def hunk(self, text: str) -> str:
        return self._s(text, fg="cyan")

    def header(self, text: str) -> str:
        return self._s(text, bold=True)

    def ok(self, text: str) -> str:
        return self._s(text, fg="green", bold=True)


PLAIN = Style(False)


def style_for(choice: str, stream: TextIO | None) -> Style:
    return Style(color_wanted(choice, stream))
