"""``MODULE:X`` targets of the check commands, parsed in one place.

``check MODULE:EXPR`` evaluates an expression in the module (a producer
factory); ``check-consumer MODULE:FUNC`` looks up a (dotted) attribute (the
consumer); ``--host-device EXPR`` is an expression with the consumer's
top-level module in scope. Every problem with a target (no colon, an import
that fails or exits, a missing attribute, an expression that raises) is one
:class:`UsageError`, which the command line reports with exit status 2.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable, Tuple

from .interrupt import Terminated
from .report import exc_text

__all__ = ["UsageError", "consumer_from_target", "factory_from_target", "host_device_from"]


class UsageError(ValueError):
    """A bad ``MODULE:X`` target or option value (exit status 2)."""


#: What a target's code may raise that makes it a bad target: any exception but
#: KeyboardInterrupt (Ctrl-C: the caller tells the target's own) and
#: Terminated (SIGTERM); SystemExit too (a module that calls sys.exit(0)
#: at import must not end the check as a pass), GeneratorExit and a
#: BaseException of its own.


def _failure(e: BaseException) -> str:
    """What went wrong in the target's code, in one line, with the ``file:line``
    of the user's innermost frame (none of this package's or importlib's:
    a target that does not parse, or a module not found, has none)."""
    import traceback
    ours = tuple(os.path.dirname(os.path.abspath(f)) + os.sep
                 for f in (os.path.dirname(__file__), importlib.__file__))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(("<frozen ",) + ours)]
    at = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r}){at}"
    return f"{exc_text(e)}{at}"


def _split(target: str, example: str) -> Tuple[str, str, Any]:
    """``MODULE:REST`` -> (module name, REST, the imported module)."""
    modname, sep, rest = target.partition(":")
    if not sep or not modname or not rest:
        raise UsageError(f"expected {example}, got {target!r}")
    try:
        mod = importlib.import_module(modname)
    except (KeyboardInterrupt, Terminated):   # Ctrl-C, SIGTERM: not the target's
        raise
    except BaseException as e:
        raise UsageError(f"cannot import {modname!r}: {_failure(e)}") from None
    return modname, rest, mod


def factory_from_target(target: str) -> Callable[[], Any]:
    """``MODULE:EXPR`` -> a callable making a fresh array per call.

    EXPR is evaluated in the module's namespace; a class, or a callable
    result that is not itself a producer, is called with no arguments.
    """
    modname, expr, mod = _split(target, "MODULE:EXPR (e.g. numpy:arange(12).reshape(3,4))")
    ns = dict(vars(mod))
    ns.setdefault(modname.split(".")[0], sys.modules[modname.split(".")[0]])

    def make() -> Any:
        obj = eval(expr, ns)  # noqa: S307 - the user's own expression, as `python -c`
        # a class (its __dlpack__ is a function of the class) or a factory
        if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "__dlpack__")):
            obj = obj()
        return obj

    try:
        x = make()
    except (KeyboardInterrupt, Terminated):   # Ctrl-C, SIGTERM: not the target's
        raise
    except BaseException as e:
        raise UsageError(f"evaluating {expr!r} in {modname}: {_failure(e)}") from None
    if not hasattr(x, "__dlpack__"):
        raise UsageError(f"{target} made a {type(x).__module__}.{type(x).__qualname__}, "
                         "which has no __dlpack__")
    return make


def consumer_from_target(target: str) -> Callable[[Any], Any]:
    """``MODULE:FUNC`` (``FUNC`` may be dotted) -> the callable."""
    modname, attr, obj = _split(target, "MODULE:FUNC (e.g. numpy:from_dlpack)")
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"{modname} has no {attr!r}") from None
        except (KeyboardInterrupt, Terminated):   # Ctrl-C, SIGTERM: not the target's
            raise
        except BaseException as e:   # a module __getattr__ or a property that failed
            raise UsageError(f"{modname}.{attr}: {_failure(e)}") from None
    if not callable(obj):
        raise UsageError(f"{target} is not callable")
    return obj


def host_device_from(expr: str, target: str) -> Any:
    """``--host-device EXPR``: a Python expression evaluated with the consumer's
    top-level module imported under its own name (``jax.devices("cpu")[0]``);
    a bare word (``cpu``) is that string."""
    if expr.isidentifier():
        return expr
    modname = target.split(":", 1)[0]
    top = modname.split(".")[0]
    try:
        scope = {top: importlib.import_module(top)}
        importlib.import_module(modname)
        return eval(expr, scope)  # noqa: S307 - the user's own expression, as in `check`
    except (KeyboardInterrupt, Terminated):   # Ctrl-C, SIGTERM: not the target's
        raise
    except BaseException as e:
        raise UsageError(f"--host-device {expr!r}: {_failure(e)}") from None
