"""What Dask needs of a Tensor: its size in worker memory. Dask calls
:func:`register_sizeof` the first time it sizes an object of this package,
through the ``dask.sizeof`` entry point (``_dlpackshim_dask.py``)."""

from typing import Any

from ._tensor import Tensor


def register_sizeof(sizeof: Any) -> None:
    """Teaches Dask's ``sizeof`` dispatch Tensors: the object and the bytes
    its layout spans (a broadcast dim's once), as Dask counts a NumPy array,
    whoever owns the memory: on a worker, the Tensor is what keeps it alive."""

    @sizeof.register(Tensor)
    def sizeof_tensor(t: Tensor) -> int:
        own = object.__sizeof__(t)
        if t.closed:
            return own
        data = t.nbytes
        for extent, stride in zip(t.shape, t.strides):
            if stride == 0 and extent > 1:
                data //= extent
        return own + data
