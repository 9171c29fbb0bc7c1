"""Running cases in a forked worker process, so that a crash or a hang is a result.

:class:`Worker` forks a child (after the code under test was imported, before
it was called) that runs ``run_one(*case)`` for each case it is sent and sends
the result back; a case that kills the worker (a segfault, an abort, a hang
past ``timeout``) is a ``crash`` or ``timeout`` result, and a fresh worker is
forked for the next case. The worker is reused until then: one fork per crash,
not per case. :class:`InProcess` runs the cases in this process instead (fast;
a crash is fatal).
"""

from __future__ import annotations

import faulthandler
import gc
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Optional, Tuple

__all__ = ["CRASH", "TIMEOUT", "InProcess", "OutOfTime", "Worker", "crashed"]

CRASH, TIMEOUT = "crash", "timeout"


class OutOfTime(BaseException):
    """The time budget of the run is spent (a BaseException: it must stop a
    hypothesis search at once, not be judged as a failing example)."""


def crashed(r: Dict[str, Any]) -> bool:
    """The case killed the worker or hung: it says nothing about other rules."""
    return r["outcome"] in (CRASH, TIMEOUT)


# A frame: magic, the sender's pid, the body's length, then the pickled body. The
# consumer runs in the worker and may scribble on any fd or fork a child that
# answers too: a frame that is not the worker's own is a garbled result, never
# trusted (an unchecked length once asked for terabytes: MemoryError).
_MAGIC = b"DLPW"
_HEAD = struct.Struct("<4sIQ")
_MAX_FRAME = 1 << 24   # a result is a few kB
_POLL = 0.25   # seconds between looks at a worker whose answer is awaited


class _Garbled(Exception):
    """What came back is not one frame of the expected sender."""


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj)
    view = memoryview(_HEAD.pack(_MAGIC, os.getpid(), len(data)) + data)
    while view:   # one write when it fits in the pipe (atomic below PIPE_BUF)
        n = os.write(fd, view)
        view = view[n:]


def _recv(fd: int, sender: int, timeout: Optional[float] = None,
          alive: Optional[Callable[[], bool]] = None) -> Any:
    """The next frame's body from process `sender`; None at end of file, or
    once `alive()` says the sender died (a child it forked may hold the pipe
    open: no end of file comes). Raises TimeoutError, or _Garbled for anything
    but a well-formed frame of `sender`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    head = _read_exact(fd, _HEAD.size, deadline, alive)
    if head is None:
        return None
    magic, pid, n = _HEAD.unpack(head)
    if magic != _MAGIC:
        raise _Garbled(f"bytes {head[:8]!r} where a frame was expected")
    if pid != sender:
        raise _Garbled(f"a frame from pid {pid}, not from the worker ({sender}): "
                       "a forked child answered")
    if n > _MAX_FRAME:
        raise _Garbled(f"a frame of {n} bytes (at most {_MAX_FRAME})")
    body = _read_exact(fd, n, deadline, alive)
    if body is None:
        return None
    try:
        return pickle.loads(body)
    except Exception as e:  # noqa: BLE001 - any unpickling error means garbage
        raise _Garbled(f"the frame does not unpickle: {type(e).__name__}") from None


def _read_exact(fd: int, n: int, deadline: Optional[float],
                alive: Optional[Callable[[], bool]] = None) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        while deadline is not None or alive is not None:   # wait, looking in on the sender
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            if select.select([fd], [], [], _POLL if left is None else min(left, _POLL))[0]:
                break
            if alive is not None and not alive():
                return None
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _die_with(parent: int) -> None:
    """The calling child gets SIGKILL when `parent` dies (Linux): leading its
    own process group, it gets no signal of the terminal's, and a parent
    killed by `timeout` or SIGTERM left it running, holding the pipes."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):   # not Linux: the parent's stop() still kills it
        return
    if os.getppid() != parent:   # it died before the request
        os._exit(0)


class Worker:
    """A forked child running cases; restarted after a crash. It leads its own
    process group, so that stopping it also stops what the consumer forked."""

    def __init__(self, run_one: Callable[..., Dict[str, Any]], timeout: float) -> None:
        self.run_one = run_one   # stays in the process (forked): it need not pickle
        self.timeout = timeout
        self.pid = 0
        self.starts = 0
        self.err = tempfile.TemporaryFile()

    def start(self) -> None:
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            try:
                os.setpgid(0, 0)
                _die_with(parent)
                me = os.getpid()
                os.close(w1)
                os.close(r2)
                os.dup2(self.err.fileno(), 2)
                try:   # a crash must not dump core: that takes seconds for a big process
                    import resource
                    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                except (ImportError, ValueError, OSError):
                    pass
                if faulthandler.is_enabled():   # pytest's writes to a copy of the old fd 2
                    faulthandler.enable(file=self.err)
                # Freeze what exists (the consumer's library, hypothesis: ~10^5
                # objects): the collections of each case then walk only its own.
                # No collection first: it would write to every object's header,
                # copying the parent's pages (70 ms of each worker start, 85% of
                # a crash's cost); the parent's garbage is frozen with the rest.
                gc.freeze()
                while True:
                    case = _recv(r1, parent)
                    if case is None:
                        break
                    try:
                        res = self.run_one(*case)
                    except BaseException as e:  # noqa: BLE001 - the harness itself
                        res = {"outcome": "harness-error", "msg": f"{type(e).__name__}: {e}"}
                    if os.getpid() != me:
                        break   # a child the consumer forked came back here: it must not answer
                    _send(w2, res)
            finally:
                os._exit(0)
        try:
            os.setpgid(pid, pid)   # also here: no race with the child's own call
        except OSError:
            pass
        os.close(r1)
        os.close(w2)
        self.pid, self.to, self.frm = pid, w1, r2
        self.starts += 1

    def _alive(self) -> bool:
        """The worker has not died (looked at without reaping it: _death does)."""
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def _kill_group(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self) -> None:
        if self.pid:
            try:
                os.close(self.to)
                os.close(self.frm)
            except OSError:
                pass
            self._kill_group()
            os.waitpid(self.pid, 0)
            self.pid = 0

    def _death(self) -> str:
        self._kill_group()   # what the consumer forked dies with it (the unreaped
        _, status = os.waitpid(self.pid, 0)   # leader keeps the group's id its own)
        self.pid = 0
        os.close(self.to)
        os.close(self.frm)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            what = f"killed by {signal.Signals(sig).name}"
        else:
            what = f"exited with status {os.WEXITSTATUS(status)}"
        self.err.seek(0)
        lines = [ln.strip() for ln in self.err.read().decode("utf-8", "replace").splitlines()]
        self.err.seek(0)
        self.err.truncate()
        # The message, not the stack dump (C++ "frame #N:" lines, Python's tracebacks).
        said = [ln for ln in lines if ln and not ln.startswith(("frame #", "File ", "Fatal Python",
                                                                "Current thread", "Stack (",
                                                                "Extension modules:"))]
        said = said[:3]
        return what + (": " + " | ".join(ln[:160] for ln in said) if said else "")

    def run(self, case: Tuple[Any, ...], limit: Optional[float] = None) -> Dict[str, Any]:
        """``run_one(*case)``'s result, or a crash or timeout result; `limit`
        (seconds) is what is left of a time budget: reaching it before the timeout
        raises OutOfTime (not a hang)."""
        if not self.pid:
            self.start()
        wait = self.timeout if limit is None else min(self.timeout, limit)
        try:
            _send(self.to, case)
            res = _recv(self.frm, self.pid, wait, self._alive)
        except TimeoutError:
            self.stop()
            if wait < self.timeout:
                raise OutOfTime from None
            return {"outcome": TIMEOUT, "msg": f"no answer within {self.timeout:g} s"}
        except _Garbled as e:
            self.stop()
            return {"outcome": CRASH, "msg": f"garbled result: {e}"}
        except BrokenPipeError:
            res = None
        if res is None:
            return {"outcome": CRASH, "msg": self._death()}
        if not isinstance(res, dict) or not isinstance(res.get("outcome"), str):
            self.stop()
            return {"outcome": CRASH, "msg": f"garbled result: a {type(res).__name__}, "
                                             "not the worker's dict"}
        self.err.seek(0)
        self.err.truncate()
        return res

    def interrupt(self, wait: float) -> Dict[str, Any]:
        """Passes a Ctrl-C that reached this process on to the case running in
        the child (its own process group does not get the terminal's) and
        returns the child's answer, or a crash or timeout result."""
        try:
            os.kill(self.pid, signal.SIGINT)
            res = _recv(self.frm, self.pid, wait, self._alive)
        except TimeoutError:
            self.stop()
            return {"outcome": TIMEOUT, "msg": f"no answer to Ctrl-C within {wait:g} s"}
        except (_Garbled, ProcessLookupError, BrokenPipeError):
            res = None
        return res if isinstance(res, dict) else {"outcome": CRASH, "msg": self._death()}


class InProcess:
    """Runs cases in this process (isolate=False: fast, but a crash is fatal)."""

    def __init__(self, run_one: Callable[..., Dict[str, Any]]) -> None:
        self.run_one = run_one
        self.starts = 0

    def run(self, case: Tuple[Any, ...], limit: Optional[float] = None) -> Dict[str, Any]:
        if not self.starts:
            gc.collect()
            gc.freeze()
            self.starts = 1
        return self.run_one(*case)

    def stop(self) -> None:
        if self.starts:
            gc.unfreeze()
