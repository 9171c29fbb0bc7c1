# Types of the C base of dlpackshim.Tensor (_base.py makes it at import from
# csrc/python/pytensor.c: tensor_members, tensor_methods). Type checkers read
# this file instead of _base.py, where the base is only known as a `type`.
import sys
from typing import Any, Optional, Tuple

from ._types import Device, DType

if sys.version_info >= (3, 13):
    from types import CapsuleType
else:
    from typing_extensions import CapsuleType

_DLPACK_DOC: str

class TensorBase:
    @property
    def _owner(self) -> Any: ...  # the holder (see _tensor.py); None once closed
    @property
    def _addr(self) -> int: ...  # the snapshot DLTensor's address: only with the holder pinned
    @property
    def _flags(self) -> int: ...  # DLPack flags (bit 63: came in through the legacy ABI)
    @property
    def _major(self) -> int: ...  # DLPack version of the import; 0.0 for a legacy capsule
    @property
    def _minor(self) -> int: ...
    _stream: Optional[int]  # the stream the data is ready on; None: the device's default
    _pinned: Any  # set once an array interface was made
    _meta: Optional[Tuple[Tuple[int, ...], Tuple[int, ...], DType, Device, int]]
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> CapsuleType: ...
    def close(self) -> None: ...
