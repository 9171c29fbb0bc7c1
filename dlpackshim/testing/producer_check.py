"""``python3 -m dlpackshim check MODULE:EXPR``: a DLPack producer conformance checker.

Given an expression that builds an array of some library (``numpy:arange(12)
.reshape(3, 4)``, ``torch:ones(2, 3)``, ``mypkg:make_array`` where a callable
is called with no arguments), every rule below is run against fresh arrays
made by evaluating the expression again, and a table (or ``--json``) says
which rules passed, failed or did not apply, with the evidence.

Capsules are inspected without consuming them, and deleter calls counted,
by :mod:`.capsules`.

Exit status of the command: 0 when no rule failed, 1 when one failed or
could not be run (error), 2 on a usage error (bad ``MODULE:EXPR``, an
import or evaluation error, a result that is no DLPack producer).
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import mmap
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._types import DeviceType
from .capsules import FLAG_IS_COPIED, FLAG_READ_ONLY, CapsuleView, is_capsule, \
    count_calls_by_hand, rename_used, unwrap_all
from .interrupt import CtrlC
from .report import (CHECKER_SPEC, ERROR, EXIT_USAGE, FAIL, NA, NOT_RUN, PASS, Interrupted,
                     Report, Rule, exc_text as _exc, printable, raised_at)
from .targets import UsageError, _failure, factory_from_target
from .worker import TIMEOUT, Worker

__all__ = ["SPEC", "check_producer", "run_check"]

# ---- the rules ----------------------------------------------------------------------

SPEC = {
    "producer.methods": "an exported array has __dlpack__ and __dlpack_device__ (array API)",
    "device.tuple": "__dlpack_device__() returns (device_type, device_id), a DLDeviceType and "
                    "an int >= 0 (a tuple of ints: no list, float or string)",
    "keywords.2023_12": "__dlpack__(*, stream=None, max_version=None, dl_device=None, "
                        "copy=None) takes all four keywords (array API 2023.12)",
    "capsule.legacy": "max_version None: a PyCapsule named \"dltensor\" holding a valid "
                      "DLManagedTensor (or BufferError)",
    "capsule.versioned": "max_version >= (1, 0): a capsule named \"dltensor_versioned\" "
                         "(\"recommended if it does support that\"; legacy has no version "
                         "and no flags)",
    "version.reported": "DLManagedTensorVersioned.version is a version the consumer can "
                        "read: major 1 when max_version is (1, x) or (2, 0)",
    "tensor.valid": "the DLTensor obeys dlpack.h: ndim >= 0, shape non-NULL when ndim > 0, "
                    "extents >= 0, known device and dtype, sizes within int64",
    "dtype.code": "dtype (code, bits, lanes) is the DLDataType of the array's element type",
    "shape.matches": "shape (and ndim) equal the array's shape",
    "device.matches": "dl_tensor.device equals __dlpack_device__()",
    "strides.non_null": "DLPack >= 1.2: strides must not be NULL when ndim > 0",
    "byte_offset": "data + byte_offset is the address of the first element (of a copy when "
                   "the export says IS_COPIED: then not the array's)",
    "elements.match": "the exported elements (shape, strides and dtype applied) are the "
                      "array's own, as NumPy reads them through another protocol "
                      "(__array__, the buffer protocol, __array_interface__)",
    "flags.read_only": "READ_ONLY is set when the data must not be written "
                       "(DLPACK_FLAG_BITMASK_READ_ONLY); a copy (IS_COPIED) may be written",
    "copy.true": "copy=True: the producer always copies, into a fresh buffer (two copies "
                 "held at once are two buffers), and sets IS_COPIED "
                 "(DLPACK_FLAG_BITMASK_IS_COPIED); the copy holds the same elements",
    "copy.false": "copy=False: never copy (same memory, no IS_COPIED); BufferError if a "
                  "copy is needed",
    "dl_device.own": "dl_device equal to the array's own device exports as without it",
    "dl_device.unsupported": "a dl_device the producer cannot handle: \"this function must "
                             "raise BufferError\"",
    "stream.cpu": "\"On CPU and other device types without streams, only None is accepted\"",
    "deleter.unconsumed": "an unconsumed capsule's destructor calls the deleter exactly once",
    "deleter.used_capsule": "a capsule renamed \"used_...\" belongs to the consumer: the "
                            "producer's destructor does not call the deleter",
    "deleter.consumed": "consumed (here by dlpackshim): the deleter runs exactly once, when "
                        "the consumer is done, and releases the array",
    "refcount.restored": "after every capsule and consumer is gone, the array's reference "
                         "count is what it was",
    "exchange.table": "a type's __dlpack_c_exchange_api__ (dlpack.h 1.3) is a PyCapsule "
                      "named \"dlpack_exchange_api\" of a table of version 1.x whose required "
                      "entries are set; each entry answers or refuses (-1 with an exception "
                      "set); managed_tensor_from_py_object_no_sync exports what __dlpack__ "
                      "exports, "
                      "dltensor_from_py_object_no_sync (optional) describes it, "
                      "current_work_stream answers for its device",
    "views.hypothesis": "slices and transposes (hypothesis-generated): shape, strides (in "
                        "elements), byte_offset and data describe the same elements",
}


# Where run_check's forked check says how far it got (shared memory: a crash
# leaves it readable): the rule it is in and the rules it finished, as JSON
# after an 8-byte length; None when the check runs in this process.
_AT: Optional[Any] = None
_AT_SIZE = 1 << 20


def _rule(report: Report, rid: str) -> Rule:
    """A new rule, started: every rule before it is finished (rules run one
    after the other), which the forked check publishes at this point."""
    r = Rule(rid, SPEC[rid])
    report.rules.append(r)
    if _AT is not None:
        done = [dict(x.as_dict(), evidence=x.evidence[:2000]) for x in report.rules[:-1]]
        text = json.dumps({"at": rid, "done": done}).encode()
        if 8 + len(text) <= _AT_SIZE:
            _AT[8:8 + len(text)] = text
            _AT[:8] = len(text).to_bytes(8, "little")
    return r


def _progress() -> Tuple[str, List[Rule]]:
    """What the forked check published last: the rule it was in ("?" before
    the first) and the rules it had finished."""
    assert _AT is not None
    n = int.from_bytes(_AT[:8], "little")
    try:
        got = json.loads(bytes(_AT[8:8 + n])) if 0 < n <= _AT_SIZE - 8 else {}
    except ValueError:   # cut short by the crash itself
        got = {}
    return got.get("at", "?"), [Rule(d["id"], d["spec"], d["status"], d["evidence"])
                                for d in got.get("done", [])]


def _native_pointer(x: Any) -> Optional[int]:
    """The address of x's first element, as x's own library says it, or None."""
    try:
        if hasattr(x, "data_ptr") and callable(x.data_ptr):  # torch
            return int(x.data_ptr())
        if hasattr(x, "unsafe_buffer_pointer"):  # jax
            return int(x.unsafe_buffer_pointer())
        ai = getattr(type(x), "__array_interface__", None)
        if ai is not None:
            return int(x.__array_interface__["data"][0])
    except Exception:
        return None
    return None


def _kwargs(kw: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


def _elements(cap: Any) -> bytes:
    """The elements a capsule describes, in C order (imported by dlpackshim,
    which consumes it)."""
    from .._consume import from_dlpack
    t = from_dlpack(cap)
    try:
        return t.tobytes()
    finally:
        t.close()


def _numpy_elements(x: Any) -> Tuple[Optional[bytes], int, str]:
    """x's elements in C order as NumPy reads them without DLPack, and how
    many (None, 0 and why when it cannot: no NumPy, or no other protocol)."""
    try:
        import numpy
    except ImportError:
        return None, 0, "NumPy is not installed"
    try:
        a = numpy.asarray(x)
    except Exception as e:
        return None, 0, f"numpy.asarray(x) raised {_exc(e)}"
    if a.dtype == object or a.shape != tuple(int(n) for n in getattr(x, "shape", a.shape)):
        return None, 0, "NumPy reads the array through no other protocol"
    if not a.dtype.isnative:   # DLPack's elements are in the machine's order
        a = a.astype(a.dtype.newbyteorder("="))
    return numpy.ascontiguousarray(a).tobytes(), a.size, f"numpy.asarray(x): {a.dtype}"


def _writable(x: Any) -> Optional[bool]:
    """True/False when the library tells whether x's data may be written, else None."""
    flags = getattr(x, "flags", None)
    w = getattr(flags, "writeable", None)
    if isinstance(w, bool):
        return w
    if type(x).__module__.startswith(("jax", "jaxlib")):
        return False  # JAX arrays are immutable
    try:
        with memoryview(x) as mv:
            return not mv.readonly
    except Exception:
        return None


def _readonly_variant(factory: Callable[[], Any]) -> Optional[Any]:
    """A read-only array of the library, when it can make one (NumPy's setflags)."""
    x = factory()
    if _writable(x) is False:
        return x
    if hasattr(x, "setflags"):
        try:
            y = x.copy()
            y.setflags(write=False)
            return y
        except Exception:
            return None
    return None


def _expected_dtype(x: Any) -> Optional[Tuple[int, int, int]]:
    from .._types import as_dtype
    dt = getattr(x, "dtype", None)
    if dt is None:
        return None
    name = str(dt).replace("torch.", "")
    name = {"bool_": "bool", "float": "float64", "half": "float16",
            "double": "float64"}.get(name, name)
    try:
        d = as_dtype(name)
    except Exception:
        return None
    return (int(d.code), int(d.bits), int(d.lanes))


def _refcounts(x: Any) -> List[Tuple[str, int]]:
    """Reference counts of x and of the objects in its __dict__ (what a producer's
    export may hold: the array, or a buffer the array keeps)."""
    out = [("array", sys.getrefcount(x) - 1)]
    d = getattr(x, "__dict__", None)
    if isinstance(d, dict):
        for k, v in d.items():
            if v is None or isinstance(v, (int, float, str, bool, tuple)):
                continue
            out.append((f"array.{k}", sys.getrefcount(v) - 1))
    return out


def _diff(a: List[Tuple[str, int]], b: List[Tuple[str, int]]) -> str:
    db = dict(b)
    return ", ".join(f"{k} {n} -> {db[k]}" for k, n in a if k in db and db[k] != n)


def _device_ok(dev: Any) -> Tuple[bool, str]:
    # A tuple of two ints (an IntEnum such as PyTorch's DLDeviceType is one),
    # read as they are: a list, a float id or a numeric string is no answer.
    if not isinstance(dev, tuple):
        return False, f"{dev!r} is not a tuple"
    if len(dev) != 2:
        return False, f"{dev!r} has {len(dev)} items"
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in dev):
        return False, f"{dev!r}: items are not ints"
    dt, di = int(dev[0]), int(dev[1])
    if dt not in DeviceType._value2member_map_:
        return False, f"device type {dt} is not a DLDeviceType"
    if di < 0:
        return False, f"device id {di} < 0"
    return True, f"({dt}, {di})"


class _Checker:
    def __init__(self, factory: Callable[[], Any], report: Report, examples: int,
                 seed: Optional[int]) -> None:
        self.factory = factory
        self.report = report
        self.examples = examples
        self.seed = seed
        self.wraps: List[Tuple[int, Any]] = []
        self.vkw: Optional[Dict[str, Any]] = None  # the call that gives a versioned capsule

    # -- helpers
    def export(self, x: Any, **kw: Any) -> Any:
        return x.__dlpack__(**kw)

    def wrap(self, view: CapsuleView) -> Any:
        w = view.wrap_deleter()
        self.wraps.append((view.managed, w))
        return w

    def judge_export(self, r: Rule, export: Callable[[], Any],
                     judge: Callable[[CapsuleView], None], refused: str = "refused with {}",
                     other: str = FAIL, raised: str = "raised {}") -> None:
        """Judge the capsule `export()` returns (`judge` sets `r`); BufferError is a
        refusal the standard allows (PASS, `refused`), any other exception `other`
        (`raised`); each text gets the exception."""
        try:
            cap = export()
            judge(CapsuleView(cap))
            self.drop(cap)
        except BufferError as e:
            r.status, r.evidence = PASS, refused.format(_exc(e))
        except Exception as e:
            r.status, r.evidence = other, raised.format(_exc(e))

    def watched_export(self, r: Rule, x: Any, kw: Dict[str, Any],
                       null: str = "NULL deleter") -> Optional[Tuple[Any, CapsuleView, Any]]:
        """A fresh capsule of `x`, its view and its swapped-in counting deleter; None
        (and why in `r`) when its deleter cannot be watched."""
        cap = x.__dlpack__(**kw)
        v = CapsuleView(cap)
        # Only a valid tensor's deleter is where its name says: a struct of
        # another layout keeps something else in that field (a pointer to call).
        if not v.dl_addr or v.valid_error is not None or not v.deleter:
            r.evidence = (f"cannot look into {v.describe()}" if not v.dl_addr else
                          f"not watched: invalid tensor ({v.valid_error})" if v.valid_error else null)
            self.drop(cap)
            return None
        return cap, v, self.wrap(v)

    def drop(self, *objs: Any) -> None:
        """Forget a capsule (reference counting frees it at once; the caller's
        own name for it must be rebound too)."""
        del objs

    # -- rules
    def run(self) -> None:
        x = self.factory()
        r = _rule(self.report, "producer.methods")
        missing = [m for m in ("__dlpack__", "__dlpack_device__") if not hasattr(x, m)]
        if missing:
            r.status, r.evidence = FAIL, f"{type(x).__name__} lacks {', '.join(missing)}"
            if "__dlpack__" in missing:
                return
        else:
            r.status, r.evidence = PASS, f"{type(x).__module__}.{type(x).__qualname__}"
        self.device_rules(x)
        self.keyword_rules(x)
        stop, broken = self.unexportable(x)
        if stop:   # nothing else can be looked at: every other rule says why
            for rid in SPEC:
                if rid not in {r.id for r in self.report.rules}:
                    r = _rule(self.report, rid)
                    r.evidence = stop
                    if broken and rid.startswith("capsule."):
                        r.status = FAIL
            return
        base = self.capsule_rules(x)
        self.flag_rules()
        self.dl_device_rules()
        self.deleter_rules()
        self.exchange_rule(x, base)
        self.views_rule(base)
        unwrap_all(self.wraps)

    def device_rules(self, x: Any) -> None:
        r = _rule(self.report, "device.tuple")
        if not hasattr(x, "__dlpack_device__"):
            r.status, r.evidence = FAIL, "no __dlpack_device__"
            self.device = None
            return
        try:
            dev = x.__dlpack_device__()
        except Exception as e:
            r.status, r.evidence = FAIL, f"__dlpack_device__() raised {_exc(e)}"
            self.device = None
            return
        ok, ev = _device_ok(dev)
        r.status, r.evidence = (PASS if ok else FAIL), f"returned {dev!r}" + ("" if ok else f": {ev}")
        self.device = (int(dev[0]), int(dev[1])) if ok else None

    def unexportable(self, x: Any) -> Tuple[str, bool]:
        """Why no export of x can be looked into, and whether that breaks the
        rules: it refuses every one with BufferError (allowed), or returns no
        capsule (broken); "" when one can be."""
        for kw in ({**(self.vkw or {})}, {}):
            try:
                cap = x.__dlpack__(**kw)
            except BufferError as e:
                why = f"the producer refuses to export this array: {_exc(e)}"
                continue
            except Exception:
                return "", False   # judged by the rules
            if not is_capsule(cap):
                return (f"__dlpack__({_kwargs(kw)}) returned an object of type "
                        f"{type(cap).__name__}, not a PyCapsule"), True
            return "", False
        return why, False

    def keyword_rules(self, x: Any) -> None:
        r = _rule(self.report, "keywords.2023_12")
        try:
            cap = x.__dlpack__(stream=None, max_version=(1, 3), dl_device=None, copy=None)
        except BufferError as e:   # the keywords were taken: the array is refused
            self.vkw = {"max_version": (1, 3)}
            r.status, r.evidence = PASS, f"accepted; refused with {_exc(e)}"
            return
        except TypeError as e:
            r.status, r.evidence = FAIL, f"raised {_exc(e)}"
            self.vkw = None
            try:
                cap = x.__dlpack__(max_version=(1, 3))
                self.vkw = {"max_version": (1, 3)}
                r.evidence += "; max_version alone is accepted"
            except TypeError:
                pass
            except Exception:
                self.vkw = None
            return
        except Exception as e:
            r.status, r.evidence = ERROR, f"raised {_exc(e)}"
            return
        self.vkw = {"max_version": (1, 3)}
        what = repr(CapsuleView(cap).name) if is_capsule(cap) else type(cap).__name__
        r.status, r.evidence = PASS, f"accepted; returned {what}"
        self.drop(cap)

    def capsule_rules(self, x: Any) -> Optional[CapsuleView]:
        # legacy
        r = _rule(self.report, "capsule.legacy")

        def legacy(v: CapsuleView) -> None:
            if v.name != "dltensor":
                r.status, r.evidence = FAIL, f"max_version None gave a capsule named {v.name!r}"
            elif not v.dl_addr or v.valid_error is not None:
                # tensor.valid judges the versioned export only
                r.status = FAIL
                r.evidence = f"its DLManagedTensor is invalid: {v.valid_error or v.describe()}"
            else:
                r.status, r.evidence = PASS, v.describe()
        self.judge_export(r, lambda: x.__dlpack__(), legacy)

        # versioned
        r = _rule(self.report, "capsule.versioned")
        base: Optional[CapsuleView] = None
        if self.vkw is None:
            r.status, r.evidence = FAIL, "__dlpack__ does not take max_version"
            cap = x.__dlpack__()
        else:
            cap = x.__dlpack__(**self.vkw)
        base = CapsuleView(cap)
        if self.vkw is not None:
            if base.name == "dltensor_versioned":
                r.status, r.evidence = PASS, base.describe()
            elif base.name == "dltensor":
                r.status, r.evidence = FAIL, ("max_version=(1, 3) gave a legacy \"dltensor\" "
                                              "capsule (no version, no flags)")
            else:
                r.status, r.evidence = FAIL, f"max_version=(1, 3) gave a capsule named {base.name!r}"
        rv = _rule(self.report, "version.reported")
        if self.vkw is None:
            rv.evidence = "no versioned capsule"
        else:
            seen = []
            bad = []
            for mv in ((1, 0), (1, 3), (2, 0)):
                try:
                    c = x.__dlpack__(max_version=mv)
                    cv = CapsuleView(c)
                    if cv.versioned:
                        seen.append(f"{mv}->{cv.version}")
                        if cv.version is None or cv.version[0] != 1:
                            bad.append(mv)
                    else:
                        seen.append(f"{mv}->legacy" if cv.name == "dltensor" else
                                    f"{mv}->a capsule named {cv.name!r}")
                    self.drop(c)
                except Exception as e:
                    seen.append(f"{mv}->{_exc(e)}")
                    if not isinstance(e, BufferError):
                        bad.append(mv)
            if not bad and not any("->(" in s for s in seen):
                rv.status, rv.evidence = NA, "no versioned capsule: " + ", ".join(seen)
            else:
                rv.status = FAIL if bad else PASS
                rv.evidence = ", ".join(seen)

        # the tensor itself
        r = _rule(self.report, "tensor.valid")
        if base.valid_error is None and base.dl_addr:
            r.status, r.evidence = PASS, base.describe()
        elif not base.dl_addr:
            r.status, r.evidence = FAIL, base.describe()
        else:
            r.status, r.evidence = FAIL, base.valid_error or ""
        ok = base.valid_error is None and bool(base.dl_addr)

        r = _rule(self.report, "dtype.code")
        exp = _expected_dtype(x)
        if not ok:
            r.evidence = "tensor invalid"
        elif exp is None:
            r.status, r.evidence = PASS, f"{base.dtype} (the array's dtype has no known DLPack name)"
        else:
            r.status = PASS if base.dtype == exp else FAIL
            r.evidence = f"dtype {getattr(x, 'dtype', None)}: expected {exp}, got {base.dtype}"

        r = _rule(self.report, "shape.matches")
        xs = getattr(x, "shape", None)
        if not ok:
            r.evidence = "tensor invalid"
        elif xs is None:
            r.evidence = "the array has no .shape"
        else:
            r.status = PASS if tuple(int(n) for n in xs) == base.shape else FAIL
            r.evidence = f"array {tuple(xs)}, capsule {base.shape}"

        r = _rule(self.report, "device.matches")
        if not ok or self.device is None:
            r.evidence = "tensor invalid or no device"
        else:
            r.status = PASS if base.device == self.device else FAIL
            r.evidence = f"__dlpack_device__ {self.device}, capsule {base.device}"

        r = _rule(self.report, "strides.non_null")
        if not ok:
            r.evidence = "tensor invalid"
        elif not base.versioned:
            r.evidence = ("legacy capsule: NULL strides allowed" if base.strides_null else
                          "legacy capsule (strides present)")
        elif base.version < (1, 2):
            r.evidence = f"version {base.version}: NULL strides allowed before 1.2"
            if not base.strides_null:
                r.evidence += " (strides present)"
        elif base.ndim == 0:
            r.evidence = "0-d tensor: strides may be NULL"
        else:
            r.status = FAIL if base.strides_null else PASS
            r.evidence = f"version {base.version}, ndim {base.ndim}, strides " + (
                "NULL" if base.strides_null else str(base.strides))

        r = _rule(self.report, "byte_offset")
        ptr = _native_pointer(x)
        copied = base.versioned and bool(base.flags & FLAG_IS_COPIED)
        if not ok:
            r.evidence = "tensor invalid"
        elif ptr is None:
            r.evidence = "the library gives no data pointer to compare with"
        elif base.empty:
            r.evidence = "an empty tensor: no memory to point at"
        else:
            got = base.data + base.byte_offset
            # a copy (a plain export may copy when it must: IS_COPIED) is elsewhere
            r.status = PASS if (got != ptr if copied else got == ptr) else FAIL
            r.evidence = (f"data {base.data:#x} + byte_offset {base.byte_offset} = {got:#x}; "
                          f"the array's pointer {ptr:#x}" +
                          ("; IS_COPIED: " + ("a copy" if got != ptr else "but the array's own "
                                              "memory") if copied else ""))

        r = _rule(self.report, "elements.match")
        if not ok:
            r.evidence = "tensor invalid"
        elif base.device != (int(DeviceType.kDLCPU), 0):
            r.evidence = f"data on {base.device}: not read here"
        else:
            want, count, how = _numpy_elements(x)
            try:
                got = _elements(x.__dlpack__(**(self.vkw or {}))) if want is not None else None
            except Exception as e:
                got, how = None, f"dlpackshim cannot read the export: {_exc(e)}"
            exported = math.prod(base.shape or ())
            if got is not None and count != exported:
                r.status = FAIL
                r.evidence = f"{exported} elements exported, {count} read by {how}"
            elif got is None:
                r.evidence = how
            elif len(got) != len(want):   # as many elements, in another dtype (int4 as int8)
                r.evidence = f"{len(got)} bytes exported, {len(want)} read by {how}: not compared"
            else:
                r.status = PASS if got == want else FAIL
                r.evidence = f"{len(got)} bytes {'equal' if got == want else 'DIFFER'} ({how})"
        self.drop(cap)
        self.base_versioned = base.versioned
        return base if ok else None

    def flag_rules(self) -> None:
        r = _rule(self.report, "flags.read_only")
        y = _readonly_variant(self.factory)
        if y is None:
            r.evidence = "the library offers no read-only array to test"
        else:
            def read_only(v: CapsuleView) -> None:
                if not v.dl_addr:
                    r.status, r.evidence = FAIL, f"cannot look into {v.describe()}"
                elif v.versioned and v.flags & FLAG_IS_COPIED and (
                        v.empty or _native_pointer(y) not in (None, v.data + v.byte_offset)):
                    # a copy, elsewhere than the array (where that can be told)
                    r.status = PASS
                    r.evidence = f"flags {v.flags:#x}: a copy (IS_COPIED), fresh memory to write"
                elif not v.versioned:
                    r.status, r.evidence = FAIL, ("read-only data exported as a legacy capsule, "
                                                  "which cannot say READ_ONLY")
                else:
                    r.status = PASS if v.flags & FLAG_READ_ONLY else FAIL
                    r.evidence = f"read-only array exported with flags {v.flags:#x}"
            self.judge_export(r, lambda: y.__dlpack__(**(self.vkw or {})), read_only,
                              other=ERROR)
            x = self.factory()
            if _writable(x) and self.vkw is not None and r.status == PASS:
                try:
                    cap = x.__dlpack__(**self.vkw)
                    v = CapsuleView(cap)
                    r.evidence += f"; writable array: flags {v.flags:#x}"
                    self.drop(cap)
                except Exception:
                    pass

        x = self.factory()
        # "The array's memory": where a plain export points (the byte_offset
        # rule checks that against the library's own pointer). The export is
        # held until both copy rules are judged: a producer whose every export
        # owns its memory would free it, and a copy could get its address.
        plain = None
        try:
            plain = x.__dlpack__(**(self.vkw or {}))
            cv = CapsuleView(plain)
            ptr = cv.data + cv.byte_offset if cv.dl_addr and cv.valid_error is None else None
        except Exception:
            ptr = _native_pointer(x)
        r = _rule(self.report, "copy.true")
        if self.vkw is None or "copy" not in self._accepted(x):
            r.status, r.evidence = FAIL, "__dlpack__ does not take copy"
        else:
            try:
                cap = x.__dlpack__(max_version=(1, 3), copy=True)
                v = CapsuleView(cap)
                got = v.data + v.byte_offset if v.dl_addr else None
                empty = v.empty   # no memory to share
                fresh = ptr is None or empty or got != ptr
                where = ("" if ptr is None else "; empty: no memory to share" if empty else
                         f"; data {'in a fresh buffer' if fresh else 'NOT copied'}"
                         f" ({got:#x} vs {ptr:#x})")
                if not v.dl_addr:
                    r.status, r.evidence = FAIL, f"cannot look into {v.describe()}"
                elif v.versioned:
                    flag = bool(v.flags & FLAG_IS_COPIED)
                    r.status = PASS if (flag and fresh) else FAIL
                    r.evidence = f"flags {v.flags:#x} (IS_COPIED {'set' if flag else 'NOT set'})" + where
                else:
                    r.status = FAIL
                    r.evidence = "a legacy capsule, which cannot carry IS_COPIED" + where
                if r.status == PASS and not empty:
                    # a second copy while the first is held: not the same buffer again
                    cap2 = x.__dlpack__(max_version=(1, 3), copy=True)
                    v2 = CapsuleView(cap2)
                    got2 = v2.data + v2.byte_offset if v2.dl_addr else None
                    if got2 == got:
                        r.status = FAIL
                        r.evidence += f"; a second copy in the same buffer ({got2:#x})"
                    cap2 = v2 = None
                if r.status == PASS and not empty and v.device == (int(DeviceType.kDLCPU), 0):
                    self.same_elements(r, x, cap)
                cap = v = None
            except Exception as e:
                r.status, r.evidence = FAIL, f"raised {_exc(e)}"

        r = _rule(self.report, "copy.false")
        if self.vkw is None or "copy" not in self._accepted(x):
            r.status, r.evidence = FAIL, "__dlpack__ does not take copy"
        else:
            def no_copy(v: CapsuleView) -> None:
                if not v.dl_addr:
                    r.status, r.evidence = FAIL, f"cannot look into {v.describe()}"
                    return
                got = v.data + v.byte_offset
                moved = ptr is not None and got != ptr and not v.empty   # empty: no memory
                bad = (v.versioned and v.flags & FLAG_IS_COPIED) or moved
                r.status = FAIL if bad else PASS
                r.evidence = (f"flags {v.flags:#x}" if v.versioned else "legacy capsule") + (
                    "" if ptr is None else f"; data {got:#x} vs the array's {ptr:#x}")
            self.judge_export(r, lambda: x.__dlpack__(max_version=(1, 3), copy=False), no_copy,
                              refused="refused with {} (a copy is needed)")
        self.drop(plain)
        plain = None

    def same_elements(self, r: Rule, x: Any, copy: Any) -> None:
        """Fails `r` when the capsule `copy` (consumed here) holds other elements
        than a plain export of `x`."""
        try:
            got, want = _elements(copy), _elements(x.__dlpack__(**(self.vkw or {})))
        except Exception as e:
            r.evidence += f"; elements not compared: {_exc(e)}"
            return
        if got == want:
            r.evidence += "; the same elements"
        else:
            r.status = FAIL
            r.evidence += f"; its {len(got)} bytes DIFFER from the array's"

    def _accepted(self, x: Any) -> Tuple[str, ...]:
        """The 2023.12 keywords the producer takes (probed once)."""
        if not hasattr(self, "_acc"):
            acc = []
            for kw in ("copy", "dl_device"):
                try:
                    c = x.__dlpack__(max_version=(1, 3), **{kw: None})
                    acc.append(kw)
                    self.drop(c)
                except TypeError:
                    pass
                except Exception:
                    acc.append(kw)
            self._acc = tuple(acc)
        return self._acc

    def dl_device_rules(self) -> None:
        x = self.factory()
        acc = self._accepted(x) if self.vkw is not None else ()
        r = _rule(self.report, "dl_device.own")
        if "dl_device" not in acc or self.device is None:
            r.status, r.evidence = FAIL, "__dlpack__ does not take dl_device" if self.device else \
                "no device to ask for"
            if self.device is None:
                r.status = NA
        else:
            try:
                cap = x.__dlpack__(max_version=(1, 3), dl_device=self.device)
                v = CapsuleView(cap)
                r.status = PASS if v.dl_addr and v.device == self.device else FAIL
                r.evidence = (f"dl_device={self.device}: capsule on {v.device}" if v.dl_addr else
                              f"dl_device={self.device}: cannot look into {v.describe()}")
                self.drop(cap)
            except Exception as e:
                r.status, r.evidence = FAIL, f"dl_device={self.device} raised {_exc(e)}"

        r = _rule(self.report, "dl_device.unsupported")
        if "dl_device" not in acc or self.device is None:
            r.evidence = "__dlpack__ does not take dl_device"
        else:
            # A device type no library handles: kDLExtDev, id 12345.
            target = (12, 12345)
            def exported(v: CapsuleView) -> None:
                r.status, r.evidence = FAIL, f"dl_device={target}: exported anyway ({v.describe()})"
            self.judge_export(r, lambda: x.__dlpack__(max_version=(1, 3), dl_device=target),
                              exported, refused=f"dl_device={target}: {{}}",
                              raised=f"dl_device={target}: {{}}, not BufferError")

        r = _rule(self.report, "stream.cpu")
        if self.device is None or self.device[0] != 1:
            r.evidence = f"the array is not on the CPU ({self.device})"
        else:
            try:
                cap = x.__dlpack__(**dict(self.vkw or {}, stream=1))
                r.status, r.evidence = FAIL, "stream=1 accepted for CPU data"
                self.drop(cap)
            except Exception as e:
                r.status, r.evidence = PASS, f"stream=1: {_exc(e)}"
            try:
                cap = x.__dlpack__(**dict(self.vkw or {}, stream=-1))
                r.evidence += "; stream=-1 accepted (\"no synchronisation\")"
                self.drop(cap)
            except Exception as e:
                r.evidence += f"; stream=-1: {_exc(e)}"

    def deleter_rules(self) -> None:
        from .._consume import from_dlpack

        kw = self.vkw or {}
        x = self.factory()
        before = _refcounts(x)

        # 1. unconsumed
        r = _rule(self.report, "deleter.unconsumed")
        watched = self.watched_export(r, x, kw, "NULL deleter: the producer keeps the memory")
        if watched is not None:
            cap, v, w = watched
            watched = None
            held = _refcounts(x)
            self.drop(cap)
            cap = None
            after = _refcounts(x)
            exported_ref = _diff(before, held)
            if w.calls == 1:
                r.status = PASS
                r.evidence = "deleter called once when the capsule was dropped"
            elif w.calls > 1:
                r.status = FAIL
                r.evidence = f"deleter called {w.calls} times when the capsule was dropped"
            elif exported_ref and _diff(before, after):
                r.status = FAIL
                r.evidence = ("deleter never called when the capsule was dropped: the export's "
                              f"references stay ({_diff(before, after)})")
            elif exported_ref:
                r.status = PASS
                r.evidence = ("the destructor released the export without calling the deleter "
                              "field (it calls the producer's deleter function directly)")
            else:
                r.evidence = ("the destructor did not call the deleter field; it may call the "
                              "producer's deleter function directly (JAX does), and the export "
                              "holds no Python reference to watch")

        # 2. renamed used_ by a consumer that keeps the producer's destructor
        r = _rule(self.report, "deleter.used_capsule")
        watched = self.watched_export(r, x, kw)
        if watched is not None:
            cap, v, w = watched
            watched = None
            rename_used(cap, v.versioned)
            self.drop(cap)
            cap = None
            by_destructor = w.calls
            if w.calls == 0:
                count_calls_by_hand(v.managed)  # the consumer's call: frees via the original
            r.status = PASS if by_destructor == 0 else FAIL
            r.evidence = (f"after renaming to used_*: the producer's destructor called the "
                          f"deleter {by_destructor} time(s)")

        # 3. consumed by dlpackshim
        r = _rule(self.report, "deleter.consumed")
        watched = self.watched_export(r, x, kw)
        if watched is not None:
            cap, v, w = watched
            watched = None
            try:
                t = from_dlpack(cap)
                cap = None
                during = w.calls
                t.close()
                self.drop(t)
                t = None
                r.status = PASS if (during == 0 and w.calls == 1) else FAIL
                r.evidence = (f"deleter calls: {during} while imported, {w.calls} after the "
                              f"import was closed")
            except Exception as e:
                cap = None
                gc.collect()
                r.status = ERROR if w.calls == 1 else FAIL
                r.evidence = f"dlpackshim could not import it ({_exc(e)}); deleter calls {w.calls}"

        # 4. references
        r = _rule(self.report, "refcount.restored")
        gc.collect()
        after = _refcounts(x)
        d = _diff(before, after)
        r.status = FAIL if d else PASS
        r.evidence = (f"sys.getrefcount of the array (and its attributes) changed by three "
                      f"exports: {d}" if d else
                      f"sys.getrefcount(array) {before[0][1]} before three exports and after")

    def exchange_rule(self, x: Any, base: Optional[CapsuleView]) -> None:
        r = _rule(self.report, "exchange.table")
        try:
            cap = getattr(type(x), "__dlpack_c_exchange_api__", None)
        except Exception as e:
            r.status, r.evidence = FAIL, f"type(x).__dlpack_c_exchange_api__ raised {_exc(e)}"
            return
        if cap is None:
            r.status, r.evidence = NA, "the type has no __dlpack_c_exchange_api__"
            return
        problems, done = exchange_problems(x, cap, base)
        r.status = FAIL if problems else PASS
        r.evidence = "; ".join(problems) if problems else "; ".join(done)

    def views_rule(self, base: Optional[CapsuleView]) -> None:
        r = _rule(self.report, "views.hypothesis")
        if self.examples <= 0:
            r.evidence = "--examples 0"
            return
        x = self.factory()
        shape = getattr(x, "shape", None)
        if base is None:
            r.evidence = "the plain export is invalid (tensor.valid)"
            return
        if shape is None or not hasattr(x, "__getitem__") or len(shape) == 0:
            r.evidence = "the array cannot be sliced (no shape/__getitem__, or 0-d)"
            return
        try:
            import hypothesis
            from hypothesis import strategies as st
        except ImportError:
            r.evidence = "hypothesis is not installed"
            return
        shape = tuple(int(n) for n in shape)
        neg_ok = True
        try:
            x[(slice(None, None, -1),)]
        except Exception:
            neg_ok = False
        perm_ok = len(shape) > 1 and any(hasattr(x, a) for a in ("__array_namespace__", "permute",
                                                                   "transpose"))
        steps = [1, 2, 3] + ([-1, -2] if neg_ok else [])
        from .._consume import from_dlpack

        def transposed(v: Any, perm: Tuple[int, ...]) -> Any:
            if hasattr(v, "__array_namespace__"):  # the array API standard's spelling
                return v.__array_namespace__().permute_dims(v, perm)
            if hasattr(v, "permute"):  # PyTorch
                return v.permute(*perm)
            return v.transpose(perm)

        @st.composite
        def ops(draw: Any) -> Tuple[Tuple[slice, ...], Optional[Tuple[int, ...]]]:
            idx = []
            for n in shape:
                a = draw(st.integers(0, n))
                b = draw(st.integers(0, n))
                step = draw(st.sampled_from(steps))
                if step < 0:
                    a, b = max(a, b) - 1 if max(a, b) > 0 else None, min(a, b) - 1
                    b = None if b is not None and b < 0 else b
                else:
                    a, b = min(a, b), max(a, b)
                idx.append(slice(a, b, step))
            perm = draw(st.permutations(range(len(shape)))) if perm_ok else None
            return tuple(idx), (tuple(perm) if perm is not None and draw(st.booleans()) else None)

        kw = self.vkw or {}
        stats = {"checked": 0, "byte_offset_nonzero": 0}

        def one(op: Tuple[Tuple[slice, ...], Optional[Tuple[int, ...]]]) -> None:
            idx, perm = op
            v = x[idx]
            if perm is not None:
                v = transposed(v, perm)
            cap = v.__dlpack__(**kw)
            cv = CapsuleView(cap)
            assert cv.valid_error is None, f"{idx} {perm}: invalid tensor: {cv.valid_error}"
            assert cv.shape == tuple(int(n) for n in v.shape), \
                f"{idx} {perm}: shape {cv.shape} != {tuple(v.shape)}"
            if cv.byte_offset:
                stats["byte_offset_nonzero"] += 1
            ptr = _native_pointer(v)
            numel = 1
            for n in cv.shape:
                numel *= n
            copied = cv.versioned and cv.flags & FLAG_IS_COPIED   # elsewhere, and says so
            if ptr is not None and numel and not copied:
                assert cv.data + cv.byte_offset == ptr, \
                    f"{idx} {perm}: data+byte_offset {cv.data + cv.byte_offset:#x} != {ptr:#x}"
            w = cv.wrap_deleter()
            self.wraps.append((cv.managed, w))
            t = from_dlpack(cap)
            cap = None
            try:
                want, _, _ = _numpy_elements(v)
                if want is not None:   # else only shapes, pointers and deleters (bfloat16)
                    assert t.tobytes() == want, f"{idx} {perm}: elements differ from the array's own"
            finally:
                t.close()
                t = None
            assert w.calls == 1 or not w.original, f"{idx} {perm}: deleter called {w.calls} times"
            stats["checked"] += 1

        settings = hypothesis.settings(
            max_examples=self.examples, deadline=None, database=None,
            derandomize=self.seed is None, verbosity=hypothesis.Verbosity.quiet,
            report_multiple_bugs=False,   # one failure, shrunk (never an exception group)
            suppress_health_check=list(hypothesis.HealthCheck),
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate,
                    hypothesis.Phase.shrink])
        test = settings(hypothesis.given(ops())(one))
        if self.seed is not None:
            test = hypothesis.seed(self.seed)(test)
        try:
            test()
        except AssertionError as e:
            r.status, r.evidence = FAIL, str(e)
            return
        except Exception as e:
            r.status, r.evidence = ERROR, f"{_exc(e)}"
            return
        r.status = PASS
        r.evidence = (f"{stats['checked']} views of shape {shape} (steps {steps}"
                      f"{', transposes' if perm_ok else ''}): elements, shapes, pointers and "
                      f"deleters right")
        if stats["byte_offset_nonzero"]:
            r.evidence += f"; {stats['byte_offset_nonzero']} used byte_offset"
        if not neg_ok:
            r.evidence += "; negative steps not supported by the library"


# The entries are called as CPython calls its own API (PYFUNCTYPE): the GIL
# held, a Python exception set by the entry raised here after it returns.
_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))
_DLTENSOR_FROM_PY = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)
_WORK_STREAM = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                                 ctypes.POINTER(ctypes.c_void_p))


def _answered(call: Callable[[], int], name: str, problems: List[str], done: List[str]) -> bool:
    """Calls one entry: True when it answered (0); a refusal (an exception,
    which ctypes raises) goes to `done`, a -1 without one to `problems`."""
    try:
        rc = call()
    except Exception as e:
        done.append(f"{name} refused with {_exc(e)}")
        return False
    if rc != 0:
        problems.append(f"{name} returned {rc} with no exception set")
    return rc == 0


def exchange_problems(x: Any, cap: Any, base: Optional[CapsuleView]) -> Tuple[List[str], List[str]]:
    """What is wrong with `cap`, the exchange table of x's type (and what was
    checked), against `base`, x's own __dlpack__ export. An entry may refuse
    (-1 with an exception set): consumers then use __dlpack__. ctypes raises
    the exception an entry set and drops what it returned, so an entry that
    returns 0 with an exception set reads as a refusal here, and its result
    is left alone (a refusal may leave anything in it); a KeyboardInterrupt
    or SystemExit goes on."""
    from .._ffi import FLAG_IS_SUBBYTE_TYPE_PADDED, ffi as sffi, lib as slib
    from ._lib import capsule_new
    from .capsules import _GetName, _GetPointer
    if type(cap).__name__ != "PyCapsule":
        return [f"__dlpack_c_exchange_api__ is a {type(cap).__name__}, not a PyCapsule"], []
    name = _GetName(cap)
    text = ctypes.string_at(name).decode("latin-1") if name else None
    if text != "dlpack_exchange_api":
        return [f"the capsule is named {text!r}, not 'dlpack_exchange_api'"], []
    h, versions = sffi.cast("DLPackExchangeAPIHeader *", _GetPointer(cap, name) or 0), []
    while h != sffi.NULL and len(versions) < 8 and h.version.major != 1:
        versions.append(f"{h.version.major}.{h.version.minor}")
        h = h.prev_api
    if h == sffi.NULL or h.version.major != 1:
        return [f"no table of major version 1 (the only one dlpack.h defines) among versions "
                f"{versions or 'none (a NULL pointer)'}"], []
    t = sffi.cast("DLPackExchangeAPI *", h)
    done = [f"version {h.version.major}.{h.version.minor}"]
    missing = [f for f in ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
                           "managed_tensor_to_py_object_no_sync", "current_work_stream")
               if getattr(t, f) == sffi.NULL]
    if missing:
        return [f"required entries are NULL: {', '.join(missing)}"], done

    def entry(field: str) -> int:
        return int(sffi.cast("uintptr_t", getattr(t, field)))

    problems: List[str] = []
    name = "managed_tensor_from_py_object_no_sync"
    out = ctypes.c_void_p()
    if _answered(lambda: _FROM_PY(entry(name))(x, ctypes.byref(out)), name, problems, done):
        if not out.value:
            problems.append(f"{name} returned 0 and no tensor")
        else:
            view = CapsuleView(capsule_new(out.value, 1))  # its capsule deletes it when dropped
            if view.valid_error:
                problems.append(f"{name}: invalid tensor: {view.valid_error}")
            elif base is not None and (view.shape, view.dtype, view.device,
                                       view.data + view.byte_offset) \
                    != (base.shape, base.dtype, base.device, base.data + base.byte_offset):
                problems.append(f"{name} exported {view.describe()}, __dlpack__ {base.describe()}")
            else:
                done.append(f"{name} exports what __dlpack__ does")
            del view
    name = "dltensor_from_py_object_no_sync"
    dl = sffi.new("DLTensor *")
    if t.dltensor_from_py_object_no_sync != sffi.NULL and _answered(
            lambda: _DLTENSOR_FROM_PY(entry(name))(x, int(sffi.cast("uintptr_t", dl))),
            name, problems, done):
        if slib.dlpackshim_tensor_validate(dl, 0) != 0 \
                and slib.dlpackshim_tensor_validate(dl, FLAG_IS_SUBBYTE_TYPE_PADDED) != 0:
            problems.append(f"{name} wrote an invalid DLTensor: "
                            + sffi.string(slib.dlpackshim_last_error()).decode(errors="replace"))
        elif base is not None and (dl.ndim, tuple(dl.shape[i] for i in range(dl.ndim)),
                                   int(sffi.cast("uintptr_t", dl.data)) + dl.byte_offset) \
                != (len(base.shape), base.shape, base.data + base.byte_offset):
            problems.append(f"{name} describes another tensor than __dlpack__ exports")
        else:
            done.append(f"{name} describes it")
    if base is not None:
        name = f"current_work_stream{base.device}"
        stream = ctypes.c_void_p()
        if _answered(lambda: _WORK_STREAM(entry("current_work_stream"))(
                base.device[0], base.device[1], ctypes.byref(stream)), name, problems, done):
            done.append(f"{name} answers")
    return problems, done


def check_producer(factory: Callable[[], Any], *, target: str = "<factory>",
                   examples: int = 25, seed: Optional[int] = None) -> Report:
    """Run every rule against arrays made by `factory()` (called once per rule group).

    Parameters
    ----------
    factory : callable
        Returns a fresh array (DLPack producer) each call.
    target : str
        What to call it in the report.
    examples : int
        Hypothesis examples of slices/transposes (0: skip that rule).
    seed : int, optional
        Hypothesis seed (default: derandomized, the same examples every run).

    Returns
    -------
    Report

    Raises
    ------
    Interrupted
        Ctrl-C (a KeyboardInterrupt): its ``report`` has the rules reached.
    """
    try:
        x = factory()
    except (Exception, SystemExit) as e:   # a factory that fails: a report that says so
        report = Report(target, target.split(":")[0])
        report.rules.append(Rule("checker", CHECKER_SPEC, ERROR,
                                 f"the factory raised {_exc(e)} at {raised_at(e)}"))
        return report
    mod = type(x).__module__.split(".")[0]
    version = getattr(sys.modules.get(mod), "__version__", None)
    library = f"{mod} {version}" if version else mod
    report = Report(target, library)
    ctrl_c = CtrlC()

    def make() -> Any:
        ctrl_c.check()   # each rule group starts here: a Ctrl-C swallowed earlier stops it
        return factory()

    checker = _Checker(make, report, examples, seed)
    try:
        with ctrl_c:
            try:
                checker.run()
            finally:
                unwrap_all(checker.wraps)
                gc.collect()   # under ctrl_c: a Ctrl-C in a gc callback is kept
            ctrl_c.check()
    except (Exception, SystemExit) as e:
        # A rule group that blew up, or a producer that called sys.exit(): say
        # where, keep the rest (an exit must not end the check as if it passed).
        _stopped(report, e)
    except KeyboardInterrupt as e:
        if ctrl_c.not_a_key_press():
            # Raised by the producer's own code, not a Ctrl-C: a failure, as
            # an exit is.
            _stopped(report, e)
            return report
        # The rule under way (never judged: n/a without evidence) and those
        # not reached are not run, as the consumer checker reports them.
        why = "interrupted (Ctrl-C)"
        last = report.rules[-1] if report.rules else None
        if last is not None and last.status == NA and not last.evidence:
            last.status, last.evidence = NOT_RUN, why
        ran = {r.id for r in report.rules}
        report.rules += [Rule(rid, SPEC[rid], NOT_RUN, why) for rid in SPEC if rid not in ran]
        raise Interrupted(report) from None
    return report


def _stopped(report: Report, e: BaseException) -> None:
    """The check stopped at `e`: the rule under way (never judged: n/a without
    evidence) is not run, and the rule ``checker`` says where it stopped."""
    last = report.rules[-1] if report.rules else None
    if last is not None and last.status == NA and not last.evidence:
        last.status, last.evidence = NOT_RUN, "stopped under way (see checker)"
    report.rules.append(Rule("checker", CHECKER_SPEC, ERROR, f"{_exc(e)} at {raised_at(e)}"))


def run_check(target: str, *, examples: int = 25, as_json: bool = False,
              seed: Optional[int] = None, out: Any = None, timeout: float = 600.0) -> int:
    """The ``check`` command: print the report, return the exit status. On
    Ctrl-C it prints the partial report, then lets the
    :class:`~.report.Interrupted` go on (the command line exits 130). A check
    that has not ended after `timeout` seconds (a producer that hangs) is
    stopped, and its report says in which rule.

    The check runs in a forked child (as check-consumer runs consumers), which
    imports the target itself, so no thread of the producer's library exists
    when it forks: an export that crashes the process (strides that reach
    memory the array does not have, a deleter that frees twice) gives a
    report that names the rule it crashed in, instead of a dead checker."""
    global _AT
    out = out or sys.stdout

    def show(report: Report) -> None:
        print(report.to_json() if as_json else printable(report.table(), out), file=out)

    def run_one() -> Dict[str, Any]:
        ctrl_c = CtrlC()   # a Ctrl-C comes as the SIGINT Worker.interrupt sends
        try:
            with ctrl_c:
                factory = factory_from_target(target)
        except UsageError as e:
            return {"outcome": "usage", "msg": str(e)}
        except KeyboardInterrupt as e:   # the target's own, at import: a bad target
            if not ctrl_c.not_a_key_press():
                raise
            return {"outcome": "usage", "msg": f"{target}: {_failure(e)}"}
        try:
            return {"outcome": "done",
                    "report": check_producer(factory, target=target, examples=examples, seed=seed)}
        except Interrupted as stop:
            return {"outcome": "interrupted", "report": stop.report}

    _AT = mmap.mmap(-1, _AT_SIZE)   # shared with the child (MAP_SHARED)
    worker = Worker(run_one, timeout)
    interrupted = False
    try:
        try:
            res = worker.run(())
        except KeyboardInterrupt:   # the terminal's Ctrl-C reaches this process only
            interrupted = True
            res = worker.interrupt(30.0)
        at, finished = _progress()
    finally:
        worker.stop()
        _AT.close()
        _AT = None
    if res["outcome"] == "usage":
        print(f"python3 -m dlpackshim check: {res['msg']}", file=sys.stderr)
        return EXIT_USAGE
    if res["outcome"] == "interrupted":   # the partial report, then the interrupt goes on
        show(res["report"])
        raise Interrupted(res["report"])
    if res["outcome"] == "done":
        report = res["report"]
    else:   # the process died or hung: the rules it finished, and where
        report = Report(target, target.split(":")[0])
        report.rules = finished
        early = at == "?"   # no rule began: the target's import or first array
        if early:
            at = "none yet (importing the module or making the first array)"
        if res["outcome"] != TIMEOUT:
            why = f"it was {res['msg']}, in rule {at}: " + (
                "the target's own code stopped it" if early
                else "the producer's exports crashed it")
        elif interrupted:
            why = f"Ctrl-C in rule {at} got {res['msg']}: the producer hangs where Python cannot stop it"
        else:
            why = (f"it gave {res['msg']} (--timeout bounds the whole check), in rule {at}: "
                   "the producer hangs, or is too slow for that time")
        report.rules.append(Rule("checker", CHECKER_SPEC, ERROR,
                                 f"the check's process stopped: {why} (check_producer() runs "
                                 "the rules in this process, for a debugger)"))
        if interrupted:
            report.interrupted = True   # before it is shown: the JSON says so
            show(report)
            raise Interrupted(report)
    show(report)
    return report.exit_status
