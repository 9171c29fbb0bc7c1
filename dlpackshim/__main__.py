"""``python3 -m dlpackshim demo|info|check|check-consumer``: the command line.

Exit statuses: 0 success; 1 a checked rule failed, the C library does not
load (``info`` still prints its diagnosis), or stdout's reader went away
(``... | head``); 2 a usage error (a bad option or target, a target that
exits at import, a missing extra); 3 ``check-consumer --max-time`` ran out
before every property was checked; 130 interrupted (Ctrl-C: a check prints
the rules it reached first); 143 a check stopped by SIGTERM (its workers, and
what the target forked, stopped with it). The check commands live in
:mod:`dlpackshim.testing`, imported only when one of them runs.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from typing import Any, Callable, Iterator, List, Optional

_PROG = "python3 -m dlpackshim"
#: The exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


def _number(kind: Callable[[str], Any], low: float, high: float, what: str) -> Callable[[str], Any]:
    """An argparse type: `kind` of the text, within [low, high] and finite (else a
    usage error, exit 2)."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (low <= value <= high) or (kind is float and not math.isfinite(value)):
            bound = f"in [{low:g}, {high:g}]" if kind is float else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"{text} is out of range: want {what} {bound}")
        return value
    return parse


_SEED = _number(int, 0, 2**64 - 1, "an integer")


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog=_PROG, description="DLPack 1.3 for pure Python.")
    parser.add_argument("--version", action="version", version=f"dlpackshim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="exchange arrays with NumPy and PyTorch; print a table")
    demo.add_argument("--number", type=_number(int, 1, 10**9, "an integer"), default=2000,
                      help="exchanges timed per repeat (default 2000)")
    sub.add_parser("info", help="library path, versions, GPU back-ends and peers found")
    check = sub.add_parser("check", help="check a library's DLPack producer against the rules "
                           "(exit 1 when one fails)")
    check.add_argument("target", metavar="MODULE:EXPR",
                       help="an expression (or a callable) that makes an array, e.g. "
                            "'numpy:arange(12).reshape(3,4)'")
    check.add_argument("--examples", type=_number(int, 0, 10**6, "an integer"), default=25,
                       help="hypothesis examples of slices/transposes (default 25, 0 skips)")
    check.add_argument("--seed", type=_SEED, default=None, help="hypothesis seed")
    check.add_argument("--json", action="store_true", help="print JSON instead of a table")
    check.add_argument("--timeout", metavar="SECONDS", default=600.0,
                       type=_number(float, 1e-3, 1e7, "a number of seconds"),
                       help="stop a check that has not ended by then: a producer that hangs "
                            "(default 600)")
    cc = sub.add_parser("check-consumer", help="fuzz a library's from_dlpack with valid and "
                        "broken producers (exit 1 when a property fails; needs hypothesis)")
    cc.add_argument("target", metavar="MODULE:FUNC",
                    help="the consumer, e.g. 'numpy:from_dlpack', 'jax.dlpack:from_dlpack'")
    cc.add_argument("--examples", type=_number(int, 1, 10**6, "an integer"), default=100,
                    help="hypothesis examples per property (default 100)")
    cc.add_argument("--seed", type=_SEED, default=None,
                    help="hypothesis seed (default: derandomized, the same cases every run)")
    cc.add_argument("--max-time", metavar="SECONDS", default=None,
                    type=_number(float, 1e-3, 1e7, "a number of seconds"),
                    help="a time budget for the whole run: properties not checked to the end "
                         "within it are reported as 'not run' (exit 3 unless one failed)")
    cc.add_argument("--host-device", metavar="EXPR", default=None,
                    help="what FUNC's device= takes for the host (protocol.dl_device): a word "
                         "such as cpu, or an expression with the module imported, e.g. "
                         "'jax.devices(\"cpu\")[0]' (default: cpu; JAX's CPU device; (1, 0) "
                         "for dlpackshim)")
    cc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def _run(args: argparse.Namespace) -> int:
    from ._info import library_load_error, run_info

    if args.command == "info":
        return run_info()
    problem = library_load_error()
    if problem is not None:
        print(f"{_PROG} {args.command}: {problem}", file=sys.stderr)
        return 1
    if args.command in ("check-consumer", "check"):
        from .testing.interrupt import Terminated, sigterm_as_exit
        try:
            with _hypothesis_home(), sigterm_as_exit():
                return _run_check(args)
        except Terminated as stop:
            return stop.args[0]
    from ._demo import run_demo
    return run_demo(number=args.number)


def _run_check(args: argparse.Namespace) -> int:
    """The check commands, their library loaded."""
    if args.command == "check-consumer":
        try:
            import hypothesis  # noqa: F401 - the consumer checker's search engine
        except ImportError:
            from .testing import HYPOTHESIS_REMEDY
            print(f"{_PROG} check-consumer needs hypothesis: {HYPOTHESIS_REMEDY}",
                  file=sys.stderr)
            return 2
        from .testing.consumer import run_check_consumer
        with _report_stream(args.json) as out:
            return run_check_consumer(args.target, examples=args.examples, as_json=args.json,
                                      seed=args.seed, host_device=args.host_device,
                                      max_time=args.max_time, out=out)
    from .testing.producer_check import run_check
    with _report_stream(args.json) as out:
        return run_check(args.target, examples=args.examples, as_json=args.json,
                         seed=args.seed, timeout=args.timeout, out=out)


@contextlib.contextmanager
def _hypothesis_home() -> Iterator[None]:
    """While a check runs, hypothesis keeps its files (a ``.hypothesis/``
    folder, in the working directory by default) in a temporary folder,
    removed after: a check leaves nothing where it runs. The home before is
    put back (a program may call main())."""
    try:
        from hypothesis import configuration
    except ImportError:   # said where it is needed
        yield
        return
    import shutil
    import tempfile
    previous = getattr(configuration, "__hypothesis_home_directory", None)
    home = tempfile.mkdtemp(prefix="dlpackshim-check-")
    configuration.set_hypothesis_home_dir(home)
    try:
        yield
    finally:
        configuration.set_hypothesis_home_dir(previous)
        shutil.rmtree(home, True)


@contextlib.contextmanager
def _report_stream(as_json: bool) -> Iterator[Any]:
    """Where a check prints its report. With --json, stdout carries the JSON
    alone: what the target prints (at import, in its worker, in its calls)
    goes to stderr for the check's length, so that the output parses."""
    if not as_json:
        yield sys.stdout
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    out = os.fdopen(os.dup(saved), "w")
    try:
        yield out
    finally:
        out.flush()
        out.close()
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status (see the module docstring); a usage error exits 2
        through argparse.
    """
    args = _parser().parse_args(argv)
    try:
        status = _run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`... | head`): as the Python docs advise, point
        # stdout at devnull so that the flush at exit does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:   # outside a check, which reports what it reached
        print(f"\n{_PROG} {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return status


if __name__ == "__main__":
    sys.exit(main())
