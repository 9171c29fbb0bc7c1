"""Ctrl-C during a check, made reliable; SIGTERM made an exit.

Python raises KeyboardInterrupt in whatever code runs when SIGINT arrives; in
a gc callback (hypothesis installs one) or a ``__del__`` it is printed and
swallowed, and the check would run on to its end as if no key was pressed.
While a check runs, :class:`CtrlC` remembers the key press, and
:meth:`CtrlC.check`, called between cases, raises it again where nothing
swallows it (so the swallowed one is not printed as "Exception ignored").
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any, Iterator, Optional

__all__ = ["CtrlC", "Terminated", "sigterm_as_exit"]


class CtrlC:
    """A context manager that remembers Ctrl-C while a check runs.

    It takes over SIGINT only from Python's own default handler, on the main
    thread (a program or test runner with its own handler keeps it).
    """

    def __init__(self) -> None:
        self.pressed = False
        self.watching = False   # SIGINT taken over: a KeyboardInterrupt without it is code's
        self.ignored = False    # SIGINT ignored here (make's jobs): no key press can come
        self._previous: Optional[Any] = None
        self._previous_hook: Any = None

    def __enter__(self) -> "CtrlC":
        self.ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
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

    def not_a_key_press(self) -> bool:
        """Whether a KeyboardInterrupt raised meanwhile can only be code's own:
        SIGINT was taken over and never came, or this process ignores it."""
        return (self.watching and not self.pressed) or self.ignored

    def check(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C was pressed (a point between cases,
        where nothing swallows it)."""
        if self.pressed:
            raise KeyboardInterrupt


class Terminated(BaseException):
    """SIGTERM reached a check command (``timeout``, a CI's cancel): it ends
    as an exit does, its workers stopped on the way (``args[0]``: the exit
    status, 128 + the signal). Not an exception of the target's: nothing
    judges it."""


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while a check command runs (on the
    main thread; the handler before is put back), so that the workers'
    process groups, with what the target forked, are stopped: killed
    outright, the command left the workers' own children running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
