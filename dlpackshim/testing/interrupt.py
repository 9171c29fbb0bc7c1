"""Ctrl-C during a check, made reliable.

Python raises KeyboardInterrupt in whatever code runs when SIGINT arrives; in
a gc callback (hypothesis installs one) or a ``__del__`` it is printed and
swallowed, and the check would run on to its end as if no key was pressed.
While a check runs, :class:`CtrlC` remembers the key press, and
:meth:`CtrlC.check`, called between cases, raises it again where nothing
swallows it (so the swallowed one is not printed as "Exception ignored").
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, Optional

__all__ = ["CtrlC"]


class CtrlC:
    """A context manager that remembers Ctrl-C while a check runs.

    It takes over SIGINT only from Python's own default handler, on the main
    thread (a program or test runner with its own handler keeps it).
    """

    def __init__(self) -> None:
        self.pressed = False
        self.watching = False   # SIGINT taken over: a KeyboardInterrupt without it is code's
        self._previous: Optional[Any] = None
        self._previous_hook: Any = None

    def __enter__(self) -> "CtrlC":
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._previous = signal.signal(signal.SIGINT, self._press)
            self.watching = True
            self._previous_hook = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            sys.unraisablehook = self._previous_hook
            self._previous = None

    def _unraisable(self, info: Any) -> None:
        if not (self.pressed and isinstance(info.exc_value, KeyboardInterrupt)):
            self._previous_hook(info)   # ours is raised again by check()

    def _press(self, signum: int, frame: Any) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C was pressed (a point between cases,
        where nothing swallows it)."""
        if self.pressed:
            raise KeyboardInterrupt
