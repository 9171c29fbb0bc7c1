"""A one-line progress display for long checks, on a terminal only.

``Progress(stream)`` rewrites one line (``\\r``) at most a few times a second:
what is being checked, cases run, failures so far, seconds elapsed. It writes
nothing when the stream is not a terminal (a pipe, a file, a CI log), so that
the report itself stays clean; :meth:`done` clears the line.
"""

from __future__ import annotations

import time
from typing import Any, Optional

__all__ = ["Progress"]


class Progress:
    """Progress on `stream` when it is a TTY (else a no-op)."""

    interval = 0.2   # seconds between redraws

    def __init__(self, stream: Any, title: str) -> None:
        try:
            tty = bool(stream is not None and stream.isatty())
        except (AttributeError, ValueError, OSError):
            tty = False
        self.stream: Optional[Any] = stream if tty else None
        self.title = title
        self.t0 = time.monotonic()
        self.last = 0.0
        self.width = 0

    def update(self, what: str, cases: int, failures: int, force: bool = False) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        line = (f"{self.title}: {what}: {cases} cases, {failures} failing so far, "
                f"{now - self.t0:.0f} s")
        self._write("\r" + line.ljust(self.width))
        self.width = len(line)

    def done(self) -> None:
        if self.stream is not None and self.width:
            self._write("\r" + " " * self.width + "\r")
            self.width = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)   # type: ignore[union-attr]
            self.stream.flush()       # type: ignore[union-attr]
        except (OSError, ValueError):
            self.stream = None   # the terminal went away: the check goes on
