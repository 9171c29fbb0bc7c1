"""Pickles of a Tensor under hostile conditions (defects found by the h6 review).

Each case runs in a child interpreter: the defects crashed it.

- A garbage cycle holding the PickleBuffer that protocol 5 hands out
  (``pickle.dumps(t, 5, buffer_callback=...)``; Dask keeps them in frames and
  tracebacks) crashes the collector: the buffer is a ``PickleBuffer`` over a
  ``memoryview(t)``, and CPython's memoryview ``tp_clear`` drops its managed
  buffer while the PickleBuffer still holds an export of it (the same crash
  as ``PickleBuffer(memoryview(bytearray(16)))`` in a cycle). NumPy's
  PickleBuffer is over the array itself and survives.
- A Fortran-order Tensor's out-of-band buffer is F-contiguous: whoever asks
  it for a simple buffer (``file.write``, ``socket.sendall``,
  ``b"".join``, Dask's TCP comm) gets BufferError. NumPy hands a C-contiguous
  buffer (of the transpose) for F-order arrays.
- ``_rebuild`` given an int as its data reads that address: a forged pickle
  reads any memory, though the docstring says a pickle "is refused
  (ValueError), never read past".
"""
from __future__ import annotations

import io
import pickle
import textwrap

import pytest

from conftest import run_python

np = pytest.importorskip("numpy")

import dlpackshim as ds


def _child(code):
    r = run_python("-c", textwrap.dedent(code), timeout=120)
    assert r.returncode == 0, f"status {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.mark.parametrize("how", ["buffer_callback", "reduce_ex"])
def test_protocol5_buffer_in_a_garbage_cycle(how):
    out = _child(f"""
        import gc, pickle
        import numpy as np, dlpackshim as ds
        t = ds.from_dlpack(np.arange(4.0))
        if {how!r} == "reduce_ex":
            _, (pb, meta) = t.__reduce_ex__(5)
        else:
            bufs = []
            pickle.dumps(t, 5, buffer_callback=bufs.append)
            pb = bufs.pop()
        class Node:
            pass
        n = Node(); n.pb = pb; n.me = n
        del n, pb
        gc.collect()
        print("survived")
    """)
    assert "survived" in out


def test_unpickled_over_oob_buffer_in_a_garbage_cycle():
    # Holds up: the holder's export is of the memoryview itself (the
    # PickleBuffer passes the request on), which the holder does not visit.
    out = _child("""
        import gc, pickle
        import numpy as np, dlpackshim as ds
        t = ds.from_dlpack(np.arange(4.0))
        bufs = []
        s = pickle.dumps(t, 5, buffer_callback=bufs.append)
        t2 = pickle.loads(s, buffers=bufs)
        class Node:
            pass
        n = Node(); n.t2 = t2; n.me = n
        del n, t2, bufs
        gc.collect()
        print("survived")
    """)
    assert "survived" in out


def test_fortran_order_oob_buffer_is_a_simple_buffer():
    t = ds.from_dlpack(np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)))
    bufs = []
    pickle.dumps(t, 5, buffer_callback=bufs.append)
    assert len(bufs) == 1
    f = io.BytesIO()
    f.write(bufs[0])  # what NumPy's F-order PickleBuffer allows
    assert len(f.getvalue()) == 48


def test_forged_pickle_with_an_address_is_refused():
    out = _child("""
        import pickle
        from dlpackshim._tensor import _rebuild
        class Forged:
            def __reduce__(self):
                return _rebuild, (0x1000, ((4,), (2, 32, 1), "C", False, False))
        s = pickle.dumps(Forged())
        try:
            t = pickle.loads(s)
            t.tobytes()
        except (TypeError, ValueError) as e:
            print("refused", type(e).__name__)
    """)
    assert "refused" in out


def test_from_memory_strides_stay_inside_the_buffer():
    # Tensor._from_memory (what _rebuild calls) checks that the buffer holds
    # nbytes, not that the strides address only its bytes: a 2-byte buffer
    # with stride -4096 is accepted and read 4 KiB before it.
    from dlpackshim._tensor import Tensor

    with pytest.raises((ValueError, BufferError)):
        Tensor._from_memory(bytearray(2), (1, 0), (2,), (-4096,), (1, 8, 1), 0, None)


@pytest.mark.parametrize("shape", [5, ("a",), (2, "b"), (-1,), (2 ** 62, 4, 4)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_a_corrupt_shape_is_a_valueerror(shape, order):
    # The F-order strides were computed in Python before the checks: a shape
    # that is not a tuple of ints escaped as TypeError there.
    from dlpackshim._tensor import _rebuild

    with pytest.raises(ValueError, match="corrupt dlpackshim.Tensor pickle"):
        _rebuild(bytearray(8), (shape, (2, 32, 1), order, False, False))


@pytest.mark.parametrize("meta", [None, 5, (), ((4,), (2, 32, 1), "C", False),
                                  ((4,), (2, 32, 1), "C", False, False, 0)])
def test_a_corrupt_description_is_a_valueerror(meta):
    # Unpacked as it came: None was "cannot unpack non-iterable NoneType", a
    # 6-tuple "too many values to unpack".
    from dlpackshim._tensor import _rebuild

    with pytest.raises(ValueError, match="corrupt dlpackshim.Tensor pickle: its description"):
        _rebuild(bytearray(16), meta)
