"""``python3 -m dlpackshim demo|info|check|check-consumer``: the command line."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0 when every exchange checked out.
    """
    parser = argparse.ArgumentParser(prog="python3 -m dlpackshim",
                                     description="DLPack 1.3 for pure Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="exchange arrays with NumPy and PyTorch; print a table")
    demo.add_argument("--number", type=int, default=2000,
                      help="exchanges timed per repeat (default 2000)")
    sub.add_parser("info", help="library path, versions, GPU back-ends and peers found")
    check = sub.add_parser("check", help="check a library's DLPack producer against the rules "
                           "(exit 1 when one fails)")
    check.add_argument("target", metavar="MODULE:EXPR",
                       help="an expression (or a callable) that makes an array, e.g. "
                            "'numpy:arange(12).reshape(3,4)'")
    check.add_argument("--examples", type=int, default=25,
                       help="hypothesis examples of slices/transposes (default 25, 0 skips)")
    check.add_argument("--seed", type=int, default=None, help="hypothesis seed")
    check.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cc = sub.add_parser("check-consumer", help="fuzz a library's from_dlpack with valid and "
                        "broken producers (exit 1 when a property fails; needs hypothesis)")
    cc.add_argument("target", metavar="MODULE:FUNC",
                    help="the consumer, e.g. 'numpy:from_dlpack', 'jax.dlpack:from_dlpack'")
    cc.add_argument("--examples", type=int, default=100,
                    help="hypothesis examples per property (default 100)")
    cc.add_argument("--seed", type=int, default=None,
                    help="hypothesis seed (default: derandomized, the same cases every run)")
    cc.add_argument("--host-device", metavar="EXPR", default=None,
                    help="what FUNC's device= takes for the host (protocol.dl_device): a word "
                         "such as cpu, or an expression with the module imported, e.g. "
                         "'jax.devices(\"cpu\")[0]' (default: cpu; JAX's CPU device; (1, 0) "
                         "for dlpackshim)")
    cc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.command == "check-consumer":
        from .testing.consumer import run_check_consumer
        return run_check_consumer(args.target, examples=args.examples, as_json=args.json,
                                  seed=args.seed, host_device=args.host_device)
    if args.command == "check":
        from ._check import run_check
        return run_check(args.target, examples=args.examples, as_json=args.json, seed=args.seed)
    if args.command == "demo":
        from ._demo import run_demo
        return run_demo(number=args.number)
    from ._info import run_info
    return run_info()


if __name__ == "__main__":
    sys.exit(main())
