"""The C base of dlpackshim.Tensor (csrc/python/pytensor.c), made at import.

Its fields and methods are made in C, so type checkers read them from
``_base.pyi`` beside this file.
"""

from typing import TypeVar

from ._ffi import pylib

#: The docstring of ``Tensor.__dlpack__``, a method of the C base (made with
#: it, csrc/python/pytensor.c): the first lines are its signature for inspect.
_DLPACK_DOC = """__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)
--

Export the tensor as a DLPack capsule (array API standard ``__dlpack__``).

Parameters
----------
stream : int or None, optional
    The consumer's stream, on which it will use the data. For CUDA
    and ROCm data the consumer's stream is made to wait for the work
    queued on the Tensor's own stream (:attr:`stream`): an event is
    recorded there and ``cuStreamWaitEvent``/``hipStreamWaitEvent``
    queued; the host never blocks, and the same stream on both sides
    needs nothing. Values (array API standard): CUDA (also pinned and
    managed memory) None = 1 (legacy default stream), 1, 2
    (per-thread default stream), -1 (no synchronisation) or a
    ``cudaStream_t`` as an int; 0 is disallowed. ROCm: None = 0
    (default stream), 0, -1 or a ``hipStream_t``; 1 and 2 are
    disallowed. CPU, and a ``dl_device`` of ``(kDLCPU, 0)``: only
    None (dlpackshim also accepts -1). A disallowed value raises
    ValueError (NumPy raises RuntimeError for a CPU stream, PyTorch
    AssertionError; CuPy maps 0 to 1 with a warning).
max_version : tuple of two ints or None, optional
    The newest DLPack version the consumer speaks. Major >= 1 gives a
    ``"dltensor_versioned"`` capsule (version 1.3, with READ_ONLY and
    IS_COPIED flags); None or major 0 the legacy ``"dltensor"``.
dl_device : tuple or None, optional
    Device for the capsule: None or the tensor's own device, or
    ``(kDLCPU, 0)``: data in host-accessible memory (kDLCUDAHost,
    kDLCUDAManaged, kDLROCMHost) goes there without a copy (the same
    bytes, after the host waited for the Tensor's stream); data in
    GPU memory (kDLCUDA, kDLROCM) is copied to the host
    (``dlpackshim_copy`` on the Tensor's stream, waited for)
    unless ``copy=False``.
copy : bool or None, optional
    True: always a fresh compact copy (IS_COPIED set): in host memory
    for host-accessible data or ``dl_device=(kDLCPU, 0)``, else in new
    memory of the same GPU (queued on the Tensor's stream, which the
    consumer's stream then waits for). False: never copy (BufferError
    when one is needed). None: copy only when needed (a GPU tensor
    asked for on the CPU).

Returns
-------
PyCapsule
    It references the Tensor's owner, which stays alive as long as the
    capsule or the consumer's array does.

Raises
------
TypeError
    `max_version` or `dl_device` is not a 2-tuple of ints, `copy` is
    not a bool or None.
    (A `stream` that is not None or an int is a TypeError too.)
ValueError
    `stream` is not allowed for the device, `max_version` holds a number
    that is not a DLPack version (negative, or above 2**32 - 1), or the
    Tensor is closed.
BufferError
    `dl_device` cannot be reached (anything but the own device and
    ``(kDLCPU, 0)``), ``copy=False`` where a copy is needed, a
    read-only tensor asked for through the legacy ABI (as NumPy
    refuses it; pass ``max_version=(1, 0)`` or newer), a stream of a
    device type without stream support, or a GPU runtime that is
    missing or failed (the message carries the driver's error
    string, e.g. "CUDA: cuEventRecord failed: ...").
"""

TensorBase: type = pylib.dlpackshim__py_tensor_base(_DLPACK_DOC)

_T = TypeVar("_T", bound=type)

# What a class statement puts in a class's namespace that the C class has
# of its own (or must not have: __slots__ means nothing once copied).
_NOT_COPIED = frozenset({"__dict__", "__weakref__", "__slots__"})


def c_class(cls: _T) -> _T:
    """The package's Tensor class: `cls`'s methods, properties and docstring
    copied onto a C subtype of :data:`TensorBase` that the library makes,
    one per import of the package (a re-imported package has its own).

    A class statement makes a class that CPython deallocates through its
    generic subtype path (finalizer and weakref checks, a second GC
    tracking); Tensors are made and dropped in hot loops, and a C type's
    own deallocation saves ~40 ns a Tensor (docs/benchmarks.md, row 9a).
    The class statement stays what readers and type checkers see.
    """
    made = pylib.dlpackshim__py_tensor_class()
    for name, value in vars(cls).items():
        if name not in _NOT_COPIED:
            setattr(made, name, value)
    return made  # type: ignore[no-any-return]
