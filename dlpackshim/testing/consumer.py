"""``check_consumer``: property-based fuzzing of a DLPack consumer (``from_dlpack``).

The consumer is fed valid producers (:func:`~.strategies.tensor_specs`: every
layout, dtype and flag the standard allows, through 2023.12 and legacy
``__dlpack__`` and raw capsules) and broken ones
(:func:`~.strategies.hostile_specs`), and each property below is a
hypothesis search of its own, so one failing property does not hide another,
and each failure is reported with the smallest spec hypothesis shrank it to.

Isolation: the cases run in a worker process (:mod:`.worker`): a case that
kills the worker (a segfault, an abort, a garbled answer, a hang past
``timeout``) is a ``crash`` or ``timeout`` result. Results are cached per
spec, so the properties share the cases they have in common. A search stops
at its property's first failure and at its first hang; ``max_time`` bounds the
whole run (the properties it did not reach are ``not run``).

What one case does (in the worker): build the producer (C-built tensors with
counting deleters), call ``from_dlpack(obj)``; if it returned, read the result
back through dlpackshim (shape, dtype, bytes, address, read-only) and count
the deleter calls while the result lives; then drop everything, collect, and
count each exported tensor's deleter calls again.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import producers as _p
from .producers import DEFECTS, TensorSpec
from .progress import Progress
from .interrupt import CtrlC
from .report import (ERROR, EXIT_USAGE, FAIL, NA, NOT_RUN, PASS, Interrupted, Report, Rule,
                     printable)
from .targets import UsageError, _failure, consumer_from_target, host_device_from
from .worker import TIMEOUT, InProcess, OutOfTime, Worker, crashed as _crashed

__all__ = ["ConsumerReport", "PROPERTIES", "check_consumer", "run_case", "run_check_consumer"]

#: The properties, in table order: id -> what the standard asks.
PROPERTIES: Dict[str, str] = {
    "valid.no_crash": "valid producers (any layout, dtype, flag, protocol): the consumer "
                      "returns or raises, never crashes or hangs",
    "valid.refusal_class": "a valid tensor the consumer cannot import (dtype, lanes, layout) "
                           "is refused cleanly: BufferError, ValueError or TypeError",
    "valid.values": "an imported tensor has the producer's shape, dtype and C-order bytes",
    "valid.zero_copy": "a compact row-major host tensor aligned to 256 bytes (what every "
                       "library can view) is imported without a copy: the result's first "
                       "element is at data + byte_offset",
    "valid.deleter_timing": "a zero-copy result keeps the producer's tensor alive: while "
                            "the result lives, some export of it is undeleted (a consumer may "
                            "let go of an export it did not use, e.g. one it asked again)",
    "valid.deleter_once": "every exported tensor's deleter runs exactly once, after the "
                          "result died (or at once when the consumer refused it)",
    "valid.copy_true": "from_dlpack(x, copy=True) returns a copy (never the producer's "
                       "memory) with the same elements, also when the producer ignores copy "
                       "(defect 'ignores-copy': a view without IS_COPIED)",
    "valid.read_only": "READ_ONLY data is imported as a read-only view (or copied, or "
                       "refused with BufferError/ValueError where its writable twin is "
                       "imported), and never written",
    "protocol.max_version": "the consumer asks for a versioned capsule: __dlpack__ gets "
                            "max_version=(1, x) with x >= 0 (array API 2023.12)",
    "protocol.legacy_fallback": "a pre-2023 producer (__dlpack__(stream=None) only) is still "
                                "imported: the consumer retries without the new keywords",
    "protocol.stream_cpu": "for a CPU producer the consumer passes stream None (or -1)",
    "protocol.dl_device": "from_dlpack(x, device=<host>) of a (kDLCUDA, 0) producer passes "
                          "dl_device=(kDLCPU, 0) and imports the host copy the producer "
                          "answers with; when the producer ignores dl_device (defect "
                          "'ignores-dl-device') and answers with its CUDA tensor, the "
                          "consumer refuses it (BufferError or ValueError)",
    "hostile.no_crash": "broken producers (bad version, ndim, shape, dtype, data, deleter, "
                        "capsule names, devices, exchange tables, raising __dlpack__): "
                        "never a crash or a hang",
    "hostile.exception": "each broken producer gets the answer the standard requires "
                         "(BufferError for an invalid tensor or an unsupported device, the "
                         "producer's own exception passed through, an exception for a "
                         "capsule that is not the consumer's to take)",
    "hostile.deleter": "deleter exactly once for a capsule the consumer took or refused by "
                       "the standard's rules; never for a foreign or used capsule; never a "
                       "NULL deleter",
}

#: The classes the standard's DLPack sections name for a refusal: BufferError (cannot
#: be exchanged), ValueError (copy=False but a copy is needed; invalid values),
#: TypeError (not a producer).
REFUSAL_CLASSES = ("BufferError", "ValueError", "TypeError")


class ConsumerReport(Report):
    """The outcome of :func:`check_consumer` (a :class:`.report.Report`)."""

    command = "check-consumer"

    def __init__(self, target: str, library: str) -> None:
        super().__init__(target, library)
        self.stats: Dict[str, Any] = {}
        #: defect -> protocol -> outcome of the fixed broken-producer cases
        self.census: Dict[str, Dict[str, str]] = {}

    def as_dict(self) -> Dict[str, Any]:
        d = super().as_dict()
        d["stats"] = self.stats
        d["census"] = self.census
        return d


# ---- one case (runs in the worker) -------------------------------------------------

def _dtype_tuple(dt: Any) -> Tuple[int, int, int]:
    return (int(dt[0]), int(dt[1]), int(dt[2]))


#: run_case's `device` when the consumer is called without one.
NO_DEVICE: Any = object()


def run_case(fn: Callable[..., Any], spec: TensorSpec, copy: Optional[bool] = None,
             device: Any = NO_DEVICE) -> Dict[str, Any]:
    """Feed `fn` the producer `spec` describes (``fn(obj)``, plus ``copy=copy`` when
    copy is not None and ``device=device`` when a device is given) and say what
    happened (a dict of plain values). Runs in the caller's process: a crash kills
    it."""
    import dlpackshim
    res: Dict[str, Any] = {"outcome": None}
    obj, holder = _p.make_producer(spec)
    mem = holder.mem
    origin = mem.origin
    kwargs: Dict[str, Any] = {}
    if copy is not None:
        kwargs["copy"] = copy
    if device is not NO_DEVICE:
        kwargs["device"] = device
    # READ_ONLY memory as it was: the consumer must not write it (whole-byte
    # elements, as bytes_ok below reads them).
    whole = spec.dtype[1] * spec.dtype[2] >= 8 and not spec.padded and not spec.defect
    before = mem.view_bytes(spec) if spec.readonly and whole else None
    try:
        out = fn(obj, **kwargs)
    except BaseException as e:  # noqa: BLE001 - any exception is an answer to judge
        res.update(outcome="raise", exc=type(e).__name__,
                   exc_mro=[c.__name__ for c in type(e).__mro__], msg=str(e)[:300])
        e.__traceback__ = None
        del e
        out = None
    # The consumer's own calls: reading its result back below may call the
    # producer again (a consumer that returned its input), which it did not.
    res["dlpack_calls"] = [dict(c) for c in getattr(obj, "calls", [])]
    if res["outcome"] is None:
        res["outcome"] = "accept"
        res["result_type"] = f"{type(out).__module__}.{type(out).__qualname__}"
        try:
            t = dlpackshim.from_dlpack(out)
            try:
                res.update(shape=tuple(t.shape), dtype=_dtype_tuple(t.dtype), ptr=t.data_ptr,
                           readonly=bool(t.readonly),
                           device=(int(t.device[0]), int(t.device[1])))
                if whole:
                    res["bytes_ok"] = t.tobytes() == mem.view_bytes(spec)
            finally:
                t.close()
                del t
        except BaseException as e:  # noqa: BLE001
            res["inspect_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        gc.collect()
        res["calls_alive"] = holder.deleter_calls
        res["undeleted_alive"] = sum(1 for t in holder.tensors if t.deleter_calls == 0)
    if before is not None:
        res["wrote_read_only"] = mem.view_bytes(spec) != before
    res["origin"] = origin
    out = None
    obj = None
    gc.collect()
    gc.collect()
    res["exports"] = len(holder.tensors)
    res["versioned_exports"] = [t.versioned for t in holder.tensors]
    res["calls_each"] = [t.deleter_calls for t in holder.tensors]
    for t in holder.tensors:   # free what may be freed (a consumer that leaked keeps it)
        if t.deleter_calls > 0:
            t.free()
    return res


# ---- judging ------------------------------------------------------------------------

class _Skip(Exception):
    """The case says nothing about this property."""


def _judge(pid: str, spec: TensorSpec, r: Dict[str, Any]) -> Optional[str]:
    """None when the case satisfies property `pid`, else what went wrong.
    Raises _Skip when the case does not bear on it."""
    out = r["outcome"]
    if out == "harness-error":
        raise RuntimeError(f"the checker failed on {spec.describe()}: {r['msg']}")
    if pid in ("valid.no_crash", "hostile.no_crash"):
        return f"{out}: {r['msg']}" if _crashed(r) else None
    if _crashed(r):
        raise _Skip
    accepted = out == "accept"
    zero_copy = accepted and r.get("ptr") == r["origin"]
    if pid == "valid.refusal_class":
        if accepted:
            raise _Skip
        if any(c in r["exc_mro"] for c in REFUSAL_CLASSES):
            return None
        return f"refused with {r['exc']}: {r['msg']} (want {' or '.join(REFUSAL_CLASSES)})"
    if pid == "valid.values":
        if not accepted:
            raise _Skip
        if "inspect_error" in r:
            return f"result {r['result_type']} could not be read back: {r['inspect_error']}"
        problems = []
        if r["shape"] != tuple(spec.shape):
            problems.append(f"shape {r['shape']} != {spec.shape}")
        want = spec.dtype
        if r["dtype"] != want:
            problems.append(f"dtype {r['dtype']} != {want}")
        if r.get("bytes_ok") is False:
            problems.append("element bytes differ from the producer's")
        return "; ".join(problems) or None
    if pid == "valid.zero_copy":
        if not accepted or "inspect_error" in r or _p.numel(spec.shape) == 0:
            raise _Skip
        if (r["origin"] % 256 or spec.elem_strides != _p.compact_strides(spec.shape)
                or r["dtype"] != spec.dtype):   # a converted dtype is valid.values' business
            raise _Skip   # a consumer may copy unaligned or strided data it cannot view
        if zero_copy:
            return None
        return (f"result data at {r['ptr']:#x}, producer's first element at {r['origin']:#x} "
                "(a copy)")
    if pid == "valid.deleter_timing":
        if not zero_copy or _p.numel(spec.shape) == 0:
            raise _Skip
        if r["calls_alive"] == 0 or r["undeleted_alive"] > 0:
            return None
        return (f"deleter called {r['calls_alive']} time(s) while the result still lived, "
                "every export deleted")
    if pid == "valid.deleter_once":
        bad = [c for c in r["calls_each"] if c != 1]
        if not bad:
            return None
        return (f"deleter calls per exported tensor {r['calls_each']} (want 1 each) after "
                f"{'import' if accepted else 'refusal ' + r.get('exc', '')}")
    if pid == "valid.copy_true":
        if not accepted or "inspect_error" in r or _p.numel(spec.shape) == 0:
            raise _Skip
        problems = []
        if r["ptr"] == r["origin"]:
            problems.append("the result shares the producer's memory")
        if r.get("bytes_ok") is False:
            problems.append("element bytes differ from the producer's")
        return "; ".join(problems) or None
    if pid == "valid.read_only":
        if not spec.readonly:
            raise _Skip
        if r.get("wrote_read_only"):
            return "the consumer wrote into the producer's READ_ONLY memory"
        if accepted:
            if "inspect_error" in r or not zero_copy or _p.numel(spec.shape) == 0:
                raise _Skip   # a copy of read-only data may well be writable
            return None if r["readonly"] else "READ_ONLY data imported as writable"
        return None if ("BufferError" in r["exc_mro"] or "ValueError" in r["exc_mro"]) else \
            f"READ_ONLY data refused with {r['exc']}, not BufferError"
    if pid in ("hostile.exception", "hostile.deleter"):
        defect = DEFECTS[spec.defect]
        if not _defect_applied(spec, r):
            raise _Skip
        if pid == "hostile.deleter":
            want = defect.deleter_calls
            bad = [c for c in r["calls_each"] if c != want]
            if not bad:
                return None
            return (f"deleter calls per exported tensor {r['calls_each']} (want {want} each) "
                    f"after {'import' if accepted else 'refusal ' + r.get('exc', '')}")
        expect = defect.expect
        if expect == "no-crash":
            return None
        if expect == "accept":
            return None if accepted else f"refused a legal tensor: {r['exc']}: {r['msg']}"
        if accepted and expect.startswith("raise-or-cuda:"):
            # a consumer that holds device tensors may take it, as long as it says CUDA
            dev = r.get("device")
            return None if dev is not None and dev[0] == 2 else \
                f"imported (kDLCUDA, 0) memory as {dev} (want a refusal or a CUDA result)"
        if accepted:
            return "imported it (want " + ("an exception" if expect == "raise"
                                           else expect.split(":")[1]) + ")"
        if expect == "raise":
            return None
        classes = expect.split(":")[1].split(",")
        if any(c in r["exc_mro"] for c in classes):
            return None
        return f"raised {r['exc']}: {r['msg']} (want {' or '.join(classes)})"
    raise KeyError(pid)


# ---- the search ---------------------------------------------------------------------

class _Hung(BaseException):
    """A case of this search hung: stop it (a BaseException, so that hypothesis
    neither shrinks nor goes on: each further hang costs a whole timeout)."""


class _Runner:
    replay = True   # judge a property on the specs of an equal search that passed

    def __init__(self, backend: Any, deadline: Optional[float] = None,
                 progress: Optional[Progress] = None,
                 report: Optional[Report] = None) -> None:
        self.backend = backend
        self.cache: Dict[Any, Dict[str, Any]] = {}
        self.cases = 0
        self.crashes = 0
        self.slowest: Tuple[float, str] = (0.0, "")
        self.deadline = deadline   # time.monotonic() at which the budget is spent
        self.progress = progress
        self.report = report
        self.doing = "probes"      # what the progress line says is being checked
        self.ctrl_c = CtrlC()      # checked before each case: Ctrl-C stops the run there
        # (strategy, examples, seed, explicit cases) -> the specs a search that
        # passed was given, in order (see _search)
        self.replays: Dict[Any, Tuple[TensorSpec, ...]] = {}

    def show(self, force: bool = False) -> None:
        if self.progress is not None:
            fails = sum(r.status in (FAIL, ERROR) for r in self.report.rules) \
                if self.report is not None else 0
            self.progress.update(self.doing, self.cases, fails, force)

    def result(self, spec: TensorSpec, copy: Optional[bool] = None,
               on_host: bool = False) -> Dict[str, Any]:
        """What the consumer did with `spec` (called with ``copy=copy`` when not None,
        and ``device=<host device>`` when on_host); cached."""
        key = (spec, copy, on_host)
        r = self.cache.get(key)
        if r is None:
            self.ctrl_c.check()
            t0 = time.monotonic()
            limit = None
            if self.deadline is not None:
                limit = self.deadline - t0
                if limit <= 0:
                    raise OutOfTime
            r = self.backend.run(key, limit)
            took = time.monotonic() - t0
            if took > self.slowest[0]:
                self.slowest = (took, spec.describe() + ("" if copy is None else f", copy={copy}")
                                + (", device=<host>" if on_host else ""))
            self.cases += 1
            if _crashed(r):
                self.crashes += 1
            if len(self.cache) > 50000:
                self.cache.clear()
            self.cache[key] = r
            self.show()
        return r


def explicit_cases(hostile: bool, protocols: Tuple[str, ...]) -> List[TensorSpec]:
    """The fixed cases every search starts with (hypothesis's explicit examples), so
    that each defect, dtype and layout feature is tried whatever the example budget."""
    from .strategies import ALL_DTYPES
    base = TensorSpec(dtype=(2, 32, 1), shape=(2, 3), seed=7)
    out: List[TensorSpec] = []
    if hostile:
        for name in DEFECTS:
            for proto in protocols:
                spec = base.with_(defect=name, protocol=proto)
                if _p.applicable(spec):
                    out.append(spec)
        return out
    for dt in ALL_DTYPES:
        sub = dt[1] < 8
        out.append(base.with_(dtype=dt, padded=False))
        if sub:
            out.append(base.with_(dtype=dt, padded=True, strides=(1, 2)))
    out += [base.with_(shape=(), strides=None), base.with_(shape=(0, 3)),
            base.with_(strides=(1, 2)), base.with_(strides=(-3, -1)),
            base.with_(shape=(4,), strides=(-1,)), base.with_(strides=(0, 1)),
            base.with_(shape=(1, 3), strides=(1 << 40, 1)), base.with_(byte_offset=12),
            base.with_(null_strides=True, version=(1, 1)), base.with_(readonly=True),
            base.with_(copied=True), base.with_(device=(3, 0)), base.with_(device=(13, 0)),
            base.with_(dtype=(2, 32, 4))]
    return [s for s in out if s.protocol in protocols]


def _search(runner: _Runner, pid: str, strategy: Any, examples: int,
            seed: Optional[int], explicit: List[TensorSpec]) -> Rule:
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import seed as hseed

    rule = Rule(pid, PROPERTIES[pid])
    runner.doing = pid
    seen: Dict[str, Any] = {"judged": 0, "fails": {}, "explicit": {}, "hang": None}
    copy = True if pid == "valid.copy_true" else None
    explicit_set = set(explicit)

    def check(spec: TensorSpec) -> None:
        # The budget is looked at for every spec, cached or not: replays and
        # hypothesis's own work on cached specs took ~1.3 s a property past it.
        if runner.deadline is not None and time.monotonic() >= runner.deadline:
            raise OutOfTime
        r = runner.result(spec, copy)
        if r["outcome"] == TIMEOUT:
            seen["hang"] = (spec, r["msg"])
            raise _Hung
        try:
            if pid == "valid.read_only" and spec.readonly and r["outcome"] != "accept":
                # judged only where the writable twin is imported
                if runner.result(spec.with_(readonly=False))["outcome"] != "accept":
                    raise _Skip
            if (pid == "hostile.exception" and spec.expect == "accept"
                    and r["outcome"] == "raise"):
                # a legal defect refused: judged only where the tensor without
                # it is imported (a consumer may refuse a dtype it lacks)
                if runner.result(spec.with_(defect=None))["outcome"] != "accept":
                    raise _Skip
            msg = _judge(pid, spec, r)
        except _Skip:
            return
        seen["judged"] += 1
        if msg is not None:
            # hypothesis raises one failure (after shrinking: it replays the minimal
            # case last); the spec that gave that message last is the reproducer
            seen["fails"][msg] = spec
            if spec in explicit_set:
                seen["explicit"].setdefault(msg, spec)
            raise AssertionError(msg)

    given_specs: List[TensorSpec] = []

    @settings(max_examples=examples, deadline=None, database=None,
              derandomize=seed is None, print_blob=False,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck),
              report_multiple_bugs=False)   # one failure per property, shrunk
    @given(strategy)
    def prop(spec: TensorSpec) -> None:
        given_specs.append(spec)
        check(spec)

    for spec in reversed(explicit):
        prop = example(spec)(prop)
    if seed is not None:
        prop = hseed(seed)(prop)

    # The search is deterministic (derandomized, or seeded): given the same
    # strategy, examples and fixed cases, and a test that passes them all,
    # hypothesis draws the same specs again. So where an earlier property's
    # search passed, this one is judged on the specs that search was given, in
    # order (about 1.3 ms of hypothesis per spec saved: more than half of
    # NumPy's run at 1000 examples); at the first spec it does not pass, its
    # own search runs from the start, to fail and shrink there.
    key = (strategy, examples, seed, tuple(explicit), copy)

    def search() -> None:
        replay = runner.replays.get(key) if runner.replay else None
        if replay is not None:
            try:
                for spec in replay:
                    check(spec)
                return
            except (Exception, _Hung):   # noqa: BLE001 - its own search finds it again
                seen.update(judged=0, fails={}, explicit={}, hang=None)
        prop()
        runner.replays[key] = tuple(given_specs)

    try:
        try:
            search()
        except OutOfTime:
            rule.status = NOT_RUN
            rule.evidence = (f"the time budget ran out after {seen['judged']} judged cases"
                             if seen["judged"] else "not reached within the time budget")
            return rule
        except _Hung:
            spec, msg = seen["hang"]
            if pid.endswith(".no_crash"):
                rule.status = FAIL
                rule.evidence = f"timeout: {msg}; minimal reproducer: {spec.describe()}"
            else:   # a hang says nothing about this property, but ends its search
                rule.status = ERROR
                rule.evidence = (f"search stopped at the first hang, after {seen['judged']} "
                                 f"judged cases ({msg}: {spec.describe()})")
            return rule
        except Exception as group:   # an exception group of our failures is one of them
            first = _first_assertion(group)
            if first is None or first is group:
                raise
            raise first from None
    except AssertionError as e:
        msg = str(e).split("\n")[0]
        spec = (seen["explicit"].get(msg) or seen["fails"].get(msg)
                or list(seen["fails"].values())[-1])
        rule.status = FAIL
        rule.evidence = f"{msg}; minimal reproducer: {spec.describe()}"
        return rule
    except Exception as e:  # noqa: BLE001 - the search itself broke
        rule.status = ERROR
        rule.evidence = f"{type(e).__name__}: {str(e)[:300]}"
        return rule
    if seen["judged"] == 0:
        rule.status = NA
        rule.evidence = "no generated case applied"
    else:
        rule.status = PASS
        rule.evidence = f"{seen['judged']} cases"
    return rule


def _first_assertion(exc: BaseException) -> Optional[BaseException]:
    """exc if it is an AssertionError, else the first one inside an exception
    group (hypothesis's "distinct failures"), else None."""
    if isinstance(exc, AssertionError):
        return exc
    for sub in getattr(exc, "exceptions", None) or ():
        found = _first_assertion(sub)
        if found is not None:
            return found
    return None


def _probe(runner: _Runner, base: TensorSpec) -> Tuple[Rule, Rule, Rule, bool, bool]:
    """The fixed protocol probes; returns whether raw capsules are accepted, and
    whether the time budget ran out (the probes not reached are not run)."""
    def result(spec: TensorSpec) -> Optional[Dict[str, Any]]:
        try:
            return runner.result(spec)
        except OutOfTime:
            return None

    r_both = result(base.with_(protocol="both"))
    r_leg = result(base.with_(protocol="legacy")) if r_both is not None else None
    mv = Rule("protocol.max_version", PROPERTIES["protocol.max_version"])
    st = Rule("protocol.stream_cpu", PROPERTIES["protocol.stream_cpu"])
    lf = Rule("protocol.legacy_fallback", PROPERTIES["protocol.legacy_fallback"])
    late = "not reached within the time budget"
    if r_both is None:
        for rule in (mv, st, lf):
            rule.status, rule.evidence = NOT_RUN, late
        return mv, lf, st, False, True
    calls = r_both.get("dlpack_calls", [])
    if r_both["outcome"] == "accept" and not calls:
        mv.status = st.status = FAIL
        mv.evidence = st.evidence = ("a plain float32 producer: the consumer returned without "
                                     "calling __dlpack__")
    elif _crashed(r_both) or not calls:
        mv.status = st.status = ERROR
        mv.evidence = st.evidence = (f"a plain float32 producer: {r_both['outcome']} "
                                     f"{r_both.get('msg', '')}")
    else:
        first = calls[0]
        m = first.get("max_version")
        ok = (type(m) is tuple and len(m) == 2 and all(type(v) is int for v in m)
              and m[0] == 1 and m[1] >= 0)
        mv.status = PASS if ok else FAIL
        mv.evidence = f"first __dlpack__ call: {first}"
        # every call, the legacy producer's retries included
        streams = {c.get("stream") for c in calls + (r_leg or {}).get("dlpack_calls", [])}
        st.status = PASS if streams <= {None, -1} else FAIL
        st.evidence = f"stream values passed: {sorted(map(repr, streams))}"
    if r_leg is None:
        lf.status, lf.evidence = NOT_RUN, late
        return mv, lf, st, False, True
    if r_leg["outcome"] == "accept" and r_leg["dlpack_calls"]:
        lf.status, lf.evidence = PASS, f"imported; __dlpack__ calls {r_leg['dlpack_calls']}"
    else:
        lf.status = FAIL
        lf.evidence = ("returned without calling __dlpack__" if r_leg["outcome"] == "accept" else
                       f"{r_leg['outcome']}: {r_leg.get('exc', '')} {r_leg.get('msg', '')}")
    r_cap = result(base.with_(protocol="capsule-versioned"))
    return mv, lf, st, r_cap is not None and r_cap["outcome"] == "accept", r_cap is None


def _probe_dl_device(runner: _Runner, base: TensorSpec, host_device: str) -> Rule:
    """protocol.dl_device: a (kDLCUDA, 0) producer asked for the host (`host_device`
    says how), honest and not."""
    rule = Rule("protocol.dl_device", PROPERTIES["protocol.dl_device"])
    cuda = base.with_(device=(_p.kDLCUDA, 0))
    honest = runner.result(cuda, None, True)
    if honest["outcome"] == "raise" and honest["exc"] == "TypeError" \
            and not any("dl_device" in c for c in honest.get("dlpack_calls", [])):
        rule.status, rule.evidence = NA, (f"from_dlpack(x, device={host_device}) is a "
                                          f"TypeError: {honest['msg'][:120]}")
        return rule
    lying = cuda.with_(defect="ignores-dl-device")
    liar = runner.result(lying, None, True)
    problems: List[Tuple[str, TensorSpec]] = []   # each with the producer that shows it
    for what, r, spec in (("honest", honest, cuda), ("ignores-dl-device", liar, lying)):
        if _crashed(r):
            problems.append((f"{what} producer: {r['outcome']}: {r['msg']}", spec))
    if not problems:
        asked = [c.get("dl_device") for c in honest.get("dlpack_calls", [])]
        if not asked:
            problems.append(("never called __dlpack__ (" + (
                f"raised {honest['exc']}: {honest['msg'][:120]})" if honest["outcome"] == "raise"
                else "returned without it)"), cuda))
        elif (_p.kDLCPU, 0) not in asked:
            problems.append((f"the producer was asked for dl_device {asked}, not (kDLCPU, 0)",
                             cuda))
        elif honest["outcome"] != "accept":
            problems.append((f"refused the producer's host copy: {honest['exc']}: "
                             f"{honest['msg']}", cuda))
        elif honest.get("device") not in (None, (_p.kDLCPU, 0)):
            problems.append((f"the result of device=<host> is on {honest['device']}", cuda))
        if liar["outcome"] == "accept":
            problems.append(("imported the (kDLCUDA, 0) tensor of a producer that ignored "
                             f"dl_device=(kDLCPU, 0), as {liar.get('device')}", lying))
        elif not any(c in liar["exc_mro"] for c in ("BufferError", "ValueError")):
            problems.append((f"refused the producer that ignored dl_device with {liar['exc']}: "
                             f"{liar['msg'][:120]} (want BufferError or ValueError)", lying))
    if problems:
        rule.status = FAIL
        rule.evidence = ("; ".join(m for m, _ in problems)
                         + f"; reproducer: {problems[0][1].describe()}, device=<host>")
    else:
        rule.status = PASS
        rule.evidence = (f"asked dl_device={(_p.kDLCPU, 0)}; host copy imported; the liar got "
                         f"{liar['exc']}")
    return rule


def _check_arguments(examples: Any, timeout: Any, properties: Any, max_time: Any) -> None:
    """ValueError (TypeError for the wrong kind) for what the command line
    refuses as a usage error, before any case runs."""
    def number(name: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"check_consumer: {name} must be a number, not {type(v).__name__}")
        if not v > 0 or v == float("inf"):   # NaN too
            raise ValueError(f"check_consumer: {name} must be a finite number > 0, not {v!r}")
        return v
    if isinstance(examples, bool) or not isinstance(examples, int):
        raise TypeError(f"check_consumer: examples must be an int, not {type(examples).__name__}")
    if examples < 1:
        raise ValueError(f"check_consumer: examples must be >= 1, not {examples}")
    number("timeout", timeout)
    if max_time is not None:
        number("max_time", max_time)
    if properties is not None:
        unknown = [p for p in properties if p not in PROPERTIES]
        if unknown or not list(properties):
            raise ValueError(f"check_consumer: properties must name some of {list(PROPERTIES)}"
                             + (f"; unknown: {unknown}" if unknown else ", not none"))


def check_consumer(from_dlpack: Any, *, examples: int = 100, seed: Optional[int] = None,
                   target: Optional[str] = None, isolate: bool = True,
                   timeout: float = 20.0, properties: Optional[List[str]] = None,
                   dtypes: Any = None, host_device: Any = None,
                   max_time: Optional[float] = None,
                   progress: Any = None) -> ConsumerReport:
    """Fuzz a DLPack consumer with valid and broken producers.

    Parameters
    ----------
    from_dlpack : callable or str
        The consumer, called with one argument (a producer object or, when it
        accepts them, a raw capsule); or ``"MODULE:FUNC"``.
    examples : int
        Hypothesis examples per property (results are shared between properties).
    seed : int, optional
        Hypothesis seed; None: derandomized (the same cases every run).
    target : str, optional
        Its name in the report.
    isolate : bool
        Run the cases in a forked worker (default), so that a crash is a result.
    timeout : float
        Seconds one case may take before it counts as a hang (default 20).
    properties : list of str, optional
        Only these ids of :data:`PROPERTIES` (default: all).
    dtypes : strategy, optional
        The dtypes of valid producers (default: every DLPack 1.3 dtype).
    host_device : object, optional
        What the consumer's ``device=`` keyword takes for the host, for
        ``protocol.dl_device``; default :func:`default_host_device` of the
        consumer's module (``"cpu"``, as NumPy and PyTorch spell it), made
        where the cases run (a device of JAX's, made here, would start JAX's
        backend before the worker is forked). A TypeError from the consumer
        makes the property n/a.
    max_time : float, optional
        Seconds for the whole run. When they are spent, the case under way is
        stopped and every property not checked to the end is ``not run``
        (``exit_status`` 3 unless another property failed); the census keeps
        the rows it reached.
    progress : text stream, optional
        Where to show a progress line (cases, failures so far, elapsed) while
        the check runs; nothing is written unless it is a terminal.

    Returns
    -------
    ConsumerReport
        ``.table()``, ``.to_json()``, ``.failed``, ``.exit_status``; ``.stats``
        holds the cases run, crashes, worker starts and seconds.

    Raises
    ------
    Interrupted
        Ctrl-C (a KeyboardInterrupt): its ``report`` has the rules reached,
        the others ``not run``.
    """
    from . import strategies as dst   # first: it says which extra installs hypothesis
    from hypothesis import strategies as st

    _check_arguments(examples, timeout, properties, max_time)
    if isinstance(from_dlpack, str):
        target = target or from_dlpack
        from_dlpack = consumer_from_target(from_dlpack)
    target = target or getattr(from_dlpack, "__qualname__", repr(from_dlpack))
    mod = (getattr(from_dlpack, "__module__", None) or "?").split(".")[0]
    version = getattr(sys.modules.get(mod), "__version__", None)
    # The default is made where the cases run, in the worker: JAX's backend,
    # started here (jax.devices) before the worker is forked, deadlocks the
    # worker at its first compile (reported as a hang of the consumer).
    default = host_device is None
    shown_device = default_host_device_name(mod) if default else repr(host_device)
    report = ConsumerReport(target, f"{mod} {version}" if version else mod)

    def run_one(spec: TensorSpec, copy: Optional[bool], on_host: bool) -> Dict[str, Any]:
        device = NO_DEVICE if not on_host else default_host_device(mod) if default else host_device
        return run_case(from_dlpack, spec, copy, device)

    backend: Any = Worker(run_one, timeout) if isolate else InProcess(run_one)
    t0 = time.monotonic()
    shown = Progress(progress, "check-consumer")
    runner = _Runner(backend, None if max_time is None else t0 + max_time, shown, report)
    wanted = list(PROPERTIES) if properties is None else list(properties)
    capsules = False
    runner.show(force=True)   # at once: the first case may take the whole timeout
    interrupted = False
    probes: Dict[str, Rule] = {}   # judged first, whatever order the report has
    under_way = None
    try:
        with runner.ctrl_c:
            base = TensorSpec(dtype=(2, 32, 1), shape=(2, 3), seed=1)
            mv, lf, stc, capsules, late = _probe(runner, base)
            probes = {r.id: r for r in (mv, lf, stc)}
            if late:
                raise OutOfTime
            protocols = ("both", "legacy") + (("capsule-versioned", "capsule-legacy")
                                              if capsules else ())
            valid = dst.tensor_specs(protocols=protocols, dtypes=dtypes)
            hostile = dst.hostile_specs(protocols=protocols)
            for pid in wanted:
                under_way = pid
                if pid == "protocol.max_version":
                    report.rules.append(mv)
                elif pid == "protocol.legacy_fallback":
                    report.rules.append(lf)
                elif pid == "protocol.stream_cpu":
                    report.rules.append(stc)
                elif pid == "protocol.dl_device":
                    report.rules.append(_probe_dl_device(runner, base, shown_device))
                else:
                    strat = hostile if pid.startswith("hostile.") else valid
                    if pid == "valid.copy_true":
                        r_copy = runner.result(base, True)
                        if (r_copy["outcome"] == "raise" and r_copy["exc"] == "TypeError"
                                and ("copy" in r_copy["msg"]
                                     or "keyword argument" in r_copy["msg"])):   # the keyword's
                            report.rules.append(Rule(pid, PROPERTIES[pid], NA,
                                                     "the consumer takes no copy= keyword: "
                                                     + r_copy["msg"][:120]))
                            continue
                        strat = dst.tensor_specs(protocols=("both",), dtypes=dtypes,
                                                 copied=False).flatmap(
                            lambda sp: st.sampled_from([sp, sp.with_(defect="ignores-copy")]))
                    hostile_pid = pid.startswith("hostile.")
                    explicit = explicit_cases(hostile_pid, protocols)
                    if pid == "valid.copy_true":  # a producer that ignores copy, first
                        explicit = [base.with_(seed=7, defect="ignores-copy")] + [
                            e for e in explicit if e.protocol == "both" and not e.copied]
                    report.rules.append(_search(runner, pid, strat, examples, seed, explicit))
            under_way = None
            runner.doing = "census"
            report.census = _census(runner, protocols)
            runner.ctrl_c.check()   # a Ctrl-C swallowed in the last case
    except (OutOfTime, KeyboardInterrupt) as stop:
        # A fixed probe ran out of time, or Ctrl-C: what was not reached is not run.
        # The probes' verdicts stand; the rule under way says so.
        interrupted = isinstance(stop, KeyboardInterrupt)
        why = "interrupted (Ctrl-C)" if interrupted else "not reached within the time budget"
        now = "interrupted (Ctrl-C) while it ran" if interrupted else \
            "the time budget ran out while it ran"
        done = {r.id for r in report.rules}
        # A hang seen before the budget ran out fails its no_crash rule all
        # the same (a consumer that always hangs spends the budget on it).
        hangs: Dict[str, str] = {}
        for (spec, copy, on_host), r in runner.cache.items():
            if r["outcome"] == TIMEOUT:
                pid = ("protocol.dl_device" if on_host else "valid.copy_true" if copy
                       else "hostile.no_crash" if spec.defect else "valid.no_crash")
                how = (", device=<host>" if on_host else "") + (
                    "" if copy is None else f", copy={copy}")
                hangs.setdefault(pid, f"timeout: {r['msg']}; minimal reproducer: "
                                      f"{spec.describe()}{how}")
        for p in wanted:
            if p in done:
                continue
            if p in probes:
                report.rules.append(probes[p])
            elif p in hangs:
                report.rules.append(Rule(p, PROPERTIES[p], FAIL, hangs[p]))
            else:
                report.rules.append(Rule(p, PROPERTIES[p], NOT_RUN,
                                         now if p == under_way else why))
    finally:
        backend.stop()
        shown.done()
    report.stats = {"examples_per_property": examples, "cases_run": runner.cases,
                    "max_time": max_time,
                    "crashes": runner.crashes, "worker_starts": backend.starts,
                    "seconds": round(time.monotonic() - t0, 2),
                    "raw_capsules": "accepted" if capsules else "not accepted (skipped)",
                    "slowest_case": f"{runner.slowest[0]:.2f} s {runner.slowest[1]}"}
    if interrupted:
        raise Interrupted(report)
    return report


def _defect_applied(spec: TensorSpec, r: Dict[str, Any]) -> bool:
    """False when the consumer asked for a legacy capsule, which cannot carry a
    versioned-only defect."""
    if spec.defect == "version-major-2" and not spec.protocol.startswith("capsule"):
        return any(r.get("versioned_exports") or [])
    return True


def _outcome(spec: TensorSpec, r: Dict[str, Any]) -> str:
    if not _crashed(r) and not _defect_applied(spec, r):
        return "n/a (legacy asked)"
    if _crashed(r):
        return r["outcome"] + " (" + r["msg"].split(":")[0] + ")"
    if r["outcome"] == "accept":
        s = "accept"
    elif r["outcome"] == "raise":
        s = r["exc"]
    else:
        s = r["outcome"]
    calls = r.get("calls_each") or []
    return s + (f" d{','.join(map(str, calls))}" if calls else "")


def _census(runner: _Runner, protocols: Tuple[str, ...]) -> Dict[str, Dict[str, str]]:
    """defect -> protocol -> what the consumer did with the fixed case (outcome, then
    d<deleter calls per exported tensor>). A search stops at its first failure, so
    the fixed cases it did not reach are run here."""
    out: Dict[str, Dict[str, str]] = {}
    hung = False
    for spec in explicit_cases(True, protocols):
        key = (spec, None, False)
        if hung and key not in runner.cache:
            out.setdefault(spec.defect, {})[spec.protocol] = "not run (after a hang)"
            continue
        try:
            r = runner.result(spec)
        except OutOfTime:
            break
        hung = hung or r["outcome"] == TIMEOUT
        out.setdefault(spec.defect, {})[spec.protocol] = _outcome(spec, r)
    return out


def census_table(report: "ConsumerReport") -> str:
    """The census as text: one row per defect, one column per protocol."""
    census = getattr(report, "census", {})
    if not census:
        return ""
    protos = [p for p in ("both", "legacy", "capsule-versioned", "capsule-legacy")
              if any(p in row for row in census.values())]
    w = max(len(d) for d in census)
    cols = {p: max([len(p)] + [len(row.get(p, "-")) for row in census.values()]) for p in protos}
    lines = ["What each broken producer got (fixed 2x3 float32 cases; d = deleter calls per "
             "exported tensor):", "",
             "defect".ljust(w) + "  " + "  ".join(p.ljust(cols[p]) for p in protos),
             "-" * w + "  " + "  ".join("-" * cols[p] for p in protos)]
    for d, row in census.items():
        lines.append(d.ljust(w) + "  " + "  ".join(row.get(p, "-").ljust(cols[p]) for p in protos))
    return "\n".join(lines)


def default_host_device(module: str) -> Any:
    """How the consumers of top-level `module` spell the host device: JAX's CPU
    device, ``(kDLCPU, 0)`` for dlpackshim, ``"cpu"`` for everyone else."""
    if module == "jax":
        import jax
        return jax.devices("cpu")[0]
    if module == "dlpackshim":
        return (_p.kDLCPU, 0)
    return "cpu"


def default_host_device_name(module: str) -> str:
    """:func:`default_host_device` as source text, for reports (without
    starting JAX's backend)."""
    return {"jax": "jax.devices('cpu')[0]", "dlpackshim": "(kDLCPU, 0)"}.get(module, "'cpu'")


def _print_consumer_report(report: ConsumerReport, out: Any, as_json: bool,
                           max_time: Optional[float]) -> None:
    if as_json:
        print(report.to_json(), file=out)
        return
    print(printable(report.table(width=160), out), file=out)
    if report.census:
        print("\n" + printable(census_table(report), out), file=out)
    s = report.stats
    print(f"\n{s['cases_run']} cases ({s['examples_per_property']} examples per property), "
          f"{s['crashes']} crashes, {s['worker_starts']} worker starts, "
          f"{s['seconds']} s" + (f" of --max-time {max_time:g}" if max_time else "")
          + f"; raw capsules {s['raw_capsules']}; slowest case "
          f"{s['slowest_case']}", file=out)


def run_check_consumer(target: str, *, examples: int = 100, as_json: bool = False,
                       seed: Optional[int] = None, out: Any = None,
                       host_device: Optional[str] = None,
                       max_time: Optional[float] = None) -> int:
    """The ``check-consumer`` command: print the report, return the exit status
    (0 all passed, 1 a property failed, 2 usage error, 3 ``max_time`` ran out
    before every property was checked). Progress goes to stderr when it is a
    terminal. On Ctrl-C it prints the partial report, then lets the
    :class:`~.report.Interrupted` go on (the command line exits 130)."""
    out = out or sys.stdout
    ctrl_c = CtrlC()   # tells a Ctrl-C from the target's own KeyboardInterrupt
    try:
        with ctrl_c:
            fn = consumer_from_target(target)
            device = None if host_device is None else host_device_from(host_device, target)
    except UsageError as e:
        print(f"python3 -m dlpackshim check-consumer: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:
        if not ctrl_c.not_a_key_press():
            raise
        print(f"python3 -m dlpackshim check-consumer: {target}: {_failure(e)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        report = check_consumer(fn, examples=examples, seed=seed, target=target,
                                host_device=device, max_time=max_time, progress=sys.stderr)
    except Interrupted as stop:   # the partial report, then the interrupt goes on
        _print_consumer_report(stop.report, out, as_json, max_time)
        raise
    _print_consumer_report(report, out, as_json, max_time)
    return report.exit_status
