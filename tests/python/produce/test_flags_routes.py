"""Every route carries every flag (issue 31.1 and the rest of its kind).

A Tensor is imported from a versioned capsule with each combination of
READ_ONLY, IS_COPIED and IS_SUBBYTE_TYPE_PADDED, on the CPU and on
kDLCUDAHost (host-readable, so no driver is needed), and then sent down
every route dlpackshim has: from_dlpack with and without device= and copy=,
__dlpack__ with max_version, dl_device and copy, the legacy ABI, copy.copy,
pickle at every protocol, memoryview and NumPy.

The rules (docs/behaviour.md, "Flags"):
- READ_ONLY survives every zero-copy route; a copy is fresh memory and
  writable. IS_SUBBYTE_TYPE_PADDED survives every route, copies included:
  it says how the bytes are laid out.
- IS_COPIED says one tensor solely owns its memory (dlpack.h): every copy
  sets it, a zero-copy view (of a copy too) does not, since another Tensor
  views the same memory.
- The legacy ABI carries no flags: READ_ONLY or PADDED data is refused
  there (BufferError), never handed out as writable or as packed.
- The bytes read back are the same on every route.
"""
from __future__ import annotations

import copy
import pickle

import pytest

import producers as P

import dlpackshim as ds

RO, COPIED, PADDED = P.FLAG_READ_ONLY, P.FLAG_IS_COPIED, P.FLAG_IS_SUBBYTE_TYPE_PADDED
DATA = bytes([1, 2, 3, 4, 5, 6])
FLAG_SETS = [0, RO, COPIED, PADDED, RO | COPIED, RO | PADDED, COPIED | PADDED, RO | COPIED | PADDED]
DEVICES = [(1, 0), (3, 0)]  # kDLCPU, kDLCUDAHost


def source(flags, device):
    """A Tensor imported from a versioned capsule with these flags: int4
    when padded (one element per byte), else uint8; the bytes are DATA."""
    dtype = (0, 4, 1) if flags & PADDED else (1, 8, 1)
    cap, _ = P.make_capsule(dtype=dtype, shape=(2, 3), device=device, flags=flags,
                            padded=bool(flags & PADDED), fill=DATA)
    t = ds.from_dlpack(cap)
    assert t._flags & 0xFF == flags
    return t


def public(t):
    return t._flags & 0xFF


def views(t):
    """The zero-copy routes: each gives a Tensor over t's memory."""
    v = (1, 3)
    return {
        "from_dlpack(t)": ds.from_dlpack(t),
        "device=same": ds.from_dlpack(t, device=t.device),
        "device=(1, 0)": ds.from_dlpack(t, device=(1, 0)),
        "copy=False": ds.from_dlpack(t, copy=False),
        "__dlpack__": ds.from_dlpack(t.__dlpack__(max_version=v)),
        "__dlpack__ dl_device": ds.from_dlpack(t.__dlpack__(max_version=v, dl_device=(1, 0))),
        "__dlpack__ copy=False": ds.from_dlpack(t.__dlpack__(max_version=v, copy=False)),
        "from_dlpack_many": ds.from_dlpack_many([t])[0],
    }


def copies(t):
    """The routes that copy: each gives a Tensor over fresh memory."""
    out = {
        "copy=True": ds.from_dlpack(t, copy=True),
        "device=(1, 0) copy=True": ds.from_dlpack(t, device=(1, 0), copy=True),
        "__dlpack__ copy=True": ds.from_dlpack(t.__dlpack__(max_version=(1, 3), copy=True)),
        "copy.copy": copy.copy(t),
        "copy.deepcopy": copy.deepcopy(t),
    }
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        out[f"pickle {protocol}"] = pickle.loads(pickle.dumps(t, protocol=protocol))
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAG_SETS)
def test_views_keep_read_only_and_padded(flags, device):
    t = source(flags, device)
    for route, v in views(t).items():
        assert public(v) == flags & (RO | PADDED), route
        assert v.readonly == bool(flags & RO), route
        assert not v.is_copied, route
        assert v.data_ptr == t.data_ptr, route
        assert v.nbytes == len(DATA) and v.tobytes() == DATA, route
        assert (v.shape, v.dtype) == (t.shape, t.dtype), route


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", FLAG_SETS)
def test_copies_keep_padded_and_own_their_memory(flags, device):
    t = source(flags, device)
    for route, c in copies(t).items():
        # pickle keeps READ_ONLY (the data of a read-only Tensor stays
        # read-only); a copy made by from_dlpack/__dlpack__/copy is writable.
        ro = RO if (flags & RO and route.startswith("pickle")) else 0
        assert public(c) == COPIED | ro | (flags & PADDED), route
        assert c.is_copied, route
        assert c.data_ptr != t.data_ptr, route
        assert c.nbytes == len(DATA) and c.tobytes() == DATA, route
        assert (c.shape, c.dtype, c.device) == (t.shape, t.dtype, (1, 0)), route


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flags", [f for f in FLAG_SETS if f & (RO | PADDED)])
def test_the_legacy_abi_refuses_what_it_cannot_say(flags, device):
    """Legacy capsules have no flags: READ_ONLY would become writable and
    PADDED would be read packed, so both are refused (BufferError). A copy
    is fresh, writable memory, so a copy of read-only data may go; a copy of
    padded data is padded still and may not."""
    t = source(flags, device)
    for kw in ({}, {"copy": True}, {"dl_device": (1, 0)}, {"max_version": (0, 8)}):
        if kw.get("copy") and not flags & PADDED:
            back = ds.from_dlpack(t.__dlpack__(**kw))
            assert back.dlpack_version is None and back.tobytes() == DATA
            continue
        with pytest.raises(BufferError, match="legacy"):
            t.__dlpack__(**kw)


@pytest.mark.parametrize("device", DEVICES)
def test_the_legacy_abi_takes_plain_data(device):
    t = source(0, device)
    assert t.dlpack_version == (P.DLPACK_MAJOR, P.DLPACK_MINOR)
    back = ds.from_dlpack(t.__dlpack__())
    assert back.dlpack_version is None  # where it came from: a legacy capsule
    # a legacy capsule says nothing of writability: read-only on import
    assert back.readonly and back.tobytes() == DATA


def test_padded_on_cuda_host_to_the_cpu_reads_every_element():
    """The defect of issue 31.1: the device= relabel dropped PADDED, so
    four padded int4 read as two packed bytes."""
    cap, _ = P.make_capsule(dtype=(0, 4, 1), shape=(4,), device=(3, 0), padded=True,
                            fill=bytes([1, 2, 3, 4]))
    t = ds.from_dlpack(cap, device=(1, 0))
    assert t.device == (1, 0) and t._flags & PADDED
    assert t.nbytes == 4 and t.tobytes() == bytes([1, 2, 3, 4])


def test_padded_legacy_copy_is_refused():
    """The other defect of 31.1: the legacy branch of a copying export
    skipped the check, and the copy read back as [1, 0, 2, 0]."""
    cap, _ = P.make_capsule(dtype=(0, 4, 1), shape=(4,), padded=True, fill=bytes([1, 2, 3, 4]))
    t = ds.from_dlpack(cap)
    with pytest.raises(BufferError, match="IS_SUBBYTE_TYPE_PADDED"):
        t.__dlpack__(copy=True)


@pytest.mark.parametrize("flags", [0, RO])
def test_memoryview_and_numpy_see_read_only(flags):
    np = pytest.importorskip("numpy")
    t = source(flags, (1, 0))
    assert memoryview(t).readonly == bool(flags & RO)
    a = np.from_dlpack(t)
    assert a.flags.writeable == (not flags & RO)
    assert a.tobytes() == DATA


def test_a_re_import_reports_the_version_it_came_in_by():
    """A re-import of our own export shares the first import's memory
    holder, yet reports the capsule it came in by, not the first import."""
    cap, _ = P.make_capsule(dtype=(1, 8, 1), shape=(2, 3), version=(1, 1), fill=DATA)
    t = ds.from_dlpack(cap)
    assert t.dlpack_version == (1, 1)
    assert ds.from_dlpack(t).dlpack_version == (1, 1)  # no new capsule: t itself
    again = ds.from_dlpack(t.__dlpack__(max_version=(1, 0)))
    assert again.dlpack_version == ds.DLPACK_VERSION and again.data_ptr == t.data_ptr
    legacy = ds.from_dlpack(t.__dlpack__())
    assert legacy.dlpack_version is None and legacy.readonly


# Bits no DLPack defines yet: the producer's, kept as they came. Bit 63 is
# dlpackshim's own mark of a legacy import, never taken from a producer.
LATER = (1 << 20) | (1 << 40) | (1 << 62)
LEGACY_MARK = 1 << 63


def test_bits_a_later_dlpack_defines_travel_on_every_view():
    """Bits 32-62 were dropped on import (bits 3-31 kept)."""
    cap, _ = P.make_capsule(dtype=(1, 8, 1), shape=(2, 3), flags=LATER | RO | LEGACY_MARK,
                            fill=DATA)
    t = ds.from_dlpack(cap)
    assert t._flags == LATER | RO
    for route, v in views(t).items():
        assert v._flags == LATER | RO, route
    back = P.describe_capsule(t.__dlpack__(max_version=(1, 3)))
    assert back["flags"] == LATER | RO



def test_a_copy_is_new_memory_and_claims_no_bit_it_cannot_know():
    """A later DLPack's bit says something of the producer's memory or
    layout, which a copy (fresh, compact memory laid out by dlpackshim) does
    not share: every copying route leaves them, and says IS_COPIED."""
    cap, _ = P.make_capsule(dtype=(1, 8, 1), shape=(2, 3), flags=LATER, fill=DATA)
    t = ds.from_dlpack(cap)
    copies = {"copy=True": ds.from_dlpack(t, copy=True), "copy.copy": copy.copy(t),
              "pickle": pickle.loads(pickle.dumps(t, protocol=5))}
    for route, c in copies.items():
        assert c.tobytes() == DATA, route
        assert c._flags & LATER == 0 and c.is_copied, route

@pytest.mark.parametrize("device", DEVICES + [(13, 0)])  # kDLCUDAManaged too
def test_a_relabel_keeps_the_dlpack_version_it_came_in_by(device):
    """device=(kDLCPU, 0) of host-readable memory is the same capsule's data,
    relabelled: it reports that capsule's version (it reported this
    library's, so a legacy import's pickle kept the READ_ONLY assumed for
    it, where every other legacy import's pickle is writable)."""
    cap, _ = P.make_capsule(dtype=(2, 32, 1), shape=(3,), device=device, version=(1, 1))
    assert ds.from_dlpack(cap, device=(1, 0)).dlpack_version == (1, 1)
    cap, _ = P.make_capsule(versioned=False, dtype=(2, 32, 1), shape=(3,), device=device)
    t = ds.from_dlpack(cap, device=(1, 0))
    assert t.dlpack_version is None and t.readonly
    assert not pickle.loads(pickle.dumps(t)).readonly


def test_a_copy_the_producer_made_stays_copied_when_relabelled():
    """Pinned data the producer copied, put on (kDLCPU, 0) without another
    copy: the result is the only view of that memory, so IS_COPIED (the
    relabel cleared it). A view of a Tensor of ours is no copy (above)."""
    cap, _ = P.make_capsule(dtype=(1, 8, 1), shape=(2, 3), device=(3, 0), flags=COPIED,
                            fill=DATA)
    t = ds.from_dlpack(cap, device=(1, 0))
    assert (t.device, public(t), t.tobytes()) == ((1, 0), COPIED, DATA)

    class IgnoresDlDevice(P.VersionedProducer):
        """Copies when asked, but keeps its own (pinned) device."""

        def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
            self.calls.append(dict(dl_device=dl_device, copy=copy))
            return self._make(True, copy=copy)

    p = IgnoresDlDevice(shape=(2, 3), dtype=(1, 8, 1), device=(3, 0), fill=DATA)
    t = ds.from_dlpack(p, device=(1, 0), copy=True)
    assert (t.device, public(t), t.tobytes()) == ((1, 0), COPIED, DATA)
    assert p.calls == [dict(dl_device=(1, 0), copy=True)]  # the producer's copy, not ours


class CannotCopy(P.VersionedProducer):
    """Refuses copy=True with `refusal` (apache-tvm-ffi's BufferError), and
    records that call too."""

    refusal = BufferError

    def __dlpack__(self, *, copy=None, **kw):
        if copy:
            self.calls.append(dict(copy=copy))
            raise self.refusal("copy not yet supported")
        return super().__dlpack__(copy=copy, **kw)


@pytest.mark.parametrize("refusal", [BufferError, NotImplementedError])
def test_a_producer_that_cannot_copy_is_copied_by_dlpackshim(refusal):
    """copy=True to a producer that refuses it: dlpackshim copies what the
    plain call gives (it did so only when device= was given too)."""
    p = CannotCopy(shape=(2, 3), dtype=(1, 8, 1), fill=DATA)
    p.refusal = refusal
    view = ds.from_dlpack(p)
    t = ds.from_dlpack(p, copy=True)
    assert (public(t), t.tobytes()) == (COPIED, DATA)
    assert t.data_ptr != view.data_ptr
    assert [c["copy"] for c in p.calls] == [None, True, None]  # refused, then asked plainly


def test_a_pinned_producer_refusing_a_copy_on_its_device_keeps_its_error():
    """device=(kDLCUDAHost, 0), copy=True to a producer that cannot copy:
    dlpackshim cannot either (below), so the producer is not asked again and
    its error stands."""
    p = CannotCopy(shape=(2, 3), dtype=(1, 8, 1), device=(3, 0), fill=DATA)
    with pytest.raises(BufferError, match="copy not yet supported"):
        ds.from_dlpack(p, device=(3, 0), copy=True)
    assert [c["copy"] for c in p.calls] == [True]


@pytest.mark.parametrize("flags", [0, RO, COPIED])
def test_a_copy_on_a_pinned_device_named_is_refused(flags):
    """device=(kDLCUDAHost, 0) with copy=True (or dl_device): dlpackshim's
    copy would be plain host memory, so it is refused (it came back labelled
    (kDLCPU, 0)); (kDLCPU, 0) is what to ask for."""
    t = source(flags, (3, 0))
    for call in (lambda: ds.from_dlpack(t, device=(3, 0), copy=True),
                 lambda: t.__dlpack__(max_version=(1, 3), dl_device=(3, 0), copy=True)):
        with pytest.raises(BufferError, match=r"host memory \(kDLCPU, 0\)"):
            call()
    assert ds.from_dlpack(t, device=(1, 0), copy=True).device == (1, 0)
    assert ds.from_dlpack(t, device=(3, 0)).data_ptr == t.data_ptr  # no copy: a view
    assert ds.from_dlpack(t, copy=True).device == (1, 0)  # documented: host memory


def test_a_pickled_legacy_import_is_a_writable_copy_as_copy_copy_gives():
    """A legacy capsule says nothing of writability, so its import is
    read-only; what a pickle brings to another process is a copy, writable
    as copy.copy's is (it arrived READ_ONLY, then refused by the legacy
    consumers it could go to before). The pickled Tensor's own memory stays
    read-only: handed back in this process, the buffer is copied."""
    cap, _ = P.make_capsule(versioned=False, dtype=(1, 8, 1), shape=(2, 3), fill=DATA)
    t = ds.from_dlpack(cap)
    assert t.readonly and t.dlpack_version is None
    assert not copy.copy(t).readonly
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        u = pickle.loads(pickle.dumps(t, protocol=protocol))
        assert (public(u), u.tobytes()) == (COPIED, DATA), protocol
        assert ds.from_dlpack(u.__dlpack__()).tobytes() == DATA  # the legacy ABI takes it
    buffers = []
    u = pickle.loads(pickle.dumps(t, protocol=5, buffer_callback=buffers.append), buffers=buffers)
    assert (public(u), u.tobytes()) == (COPIED, DATA) and u.data_ptr != t.data_ptr
    assert memoryview(t).readonly
