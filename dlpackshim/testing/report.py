"""The report of a conformance check: rules, their status and evidence, as a table or JSON.

Shared by ``check`` (:mod:`.producer_check`) and ``check-consumer``
(:mod:`.consumer`).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

PASS, FAIL, NA, ERROR, NOT_RUN = "pass", "fail", "n/a", "error", "not run"

from ..__main__ import EXIT_INTERRUPTED  # noqa: F401 - the command line's, for every command

#: Exit statuses of the check commands (and EXIT_INTERRUPTED: Ctrl-C).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_RUN = 0, 1, 2, 3


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a check: still a KeyboardInterrupt (a test run stops as
    usual), carrying the partial :class:`Report` of the rules it reached, so
    that the command line can print it."""

    def __init__(self, report: "Report") -> None:
        super().__init__("interrupted")
        report.interrupted = True
        self.report = report


def exc_text(e: BaseException) -> str:
    """``Type: first line of the message`` (at most 120 characters), for evidence."""
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    if len(first) > 120:
        first = first[:117] + "..."
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def raised_at(e: BaseException) -> str:
    """``file:line`` where `e` was raised (the file's name alone), or ``?``."""
    import os
    import traceback
    frames = traceback.extract_tb(e.__traceback__)
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"


# The rule that is an error when the check stopped before its end.
CHECKER_SPEC = "the check runs every rule to its end (an error: it stopped early)"


def printable(text: str, stream: Any = None) -> str:
    """`text` with what `stream` cannot encode (by default UTF-8: a lone
    surrogate from a target's message; an ASCII console: any accent) written
    as its escape."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return text.encode(encoding, "backslashreplace").decode(encoding)
    except LookupError:   # an encoding Python does not know
        return text.encode("ascii", "backslashreplace").decode("ascii")


class Rule:
    """One rule's outcome."""

    __slots__ = ("id", "spec", "status", "evidence")

    def __init__(self, id: str, spec: str, status: str = NA, evidence: str = "") -> None:
        self.id, self.spec, self.status, self.evidence = id, spec, status, evidence

    def as_dict(self) -> Dict[str, str]:
        return {"id": self.id, "spec": self.spec, "status": self.status,
                "evidence": self.evidence}


class Report:
    """The outcome of a check (:func:`.check_producer`; :class:`.ConsumerReport`)."""

    command = "check"   # the title of the table (check-consumer reuses the class)
    interrupted = False   # Ctrl-C stopped the check (see Interrupted)

    def __init__(self, target: str, library: str) -> None:
        self.target = target
        self.library = library
        self.rules: List[Rule] = []

    def __getitem__(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def status(self, rule_id: str) -> str:
        return self[rule_id].status

    def ids(self, status: str) -> List[str]:
        return [r.id for r in self.rules if r.status == status]

    @property
    def failed(self) -> bool:
        return any(r.status in (FAIL, ERROR) for r in self.rules)

    @property
    def exit_status(self) -> int:
        """0 every rule checked, none failed; 1 a rule failed or could not be run
        (error); 3 none failed but some were not run (a time budget ran out);
        130 Ctrl-C stopped the check (what the command exits with)."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.failed:
            return EXIT_FAILED
        return EXIT_NOT_RUN if any(r.status == NOT_RUN for r in self.rules) else EXIT_OK

    def summary(self) -> Dict[str, int]:
        out = {PASS: 0, FAIL: 0, NA: 0, ERROR: 0, NOT_RUN: 0}
        for r in self.rules:
            out[r.status] += 1
        return out

    def as_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "library": self.library,
                "rules": [r.as_dict() for r in self.rules], "summary": self.summary(),
                "exit_status": self.exit_status, "interrupted": self.interrupted}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def table(self, width: int = 100) -> str:
        idw = max(len(r.id) for r in self.rules) if self.rules else 4
        lines = [f"dlpackshim {self.command} {self.target}  ({self.library})", "",
                 f"{'rule'.ljust(idw)}  status  evidence",
                 f"{'-' * idw}  ------  {'-' * 40}"]
        for r in self.rules:
            ev = r.evidence.replace("\n", " ")
            room = max(20, width - idw - 10)
            if len(ev) > room:
                ev = ev[:room - 3] + "..."
            lines.append(f"{r.id.ljust(idw)}  {r.status.ljust(6)}  {ev}")
        s = self.summary()
        lines += ["", f"{s[PASS]} passed, {s[FAIL]} failed, {s[NA]} not applicable, "
                      f"{s[ERROR]} errors"
                      + (f", {s[NOT_RUN]} not run" if s[NOT_RUN] else "")
                      + ("; interrupted (Ctrl-C): a partial report" if self.interrupted else "")]
        fails = [r for r in self.rules if r.status in (FAIL, ERROR)]
        if fails:
            lines.append("")
            for r in fails:
                lines.append(f"{r.status.upper()} {r.id}: {r.spec}")
                lines.append(f"    {r.evidence}")
        return printable("\n".join(lines))
