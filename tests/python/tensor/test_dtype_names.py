"""Every dtype has a name that parses back to it: ``DType(dt.name) == dt``
(issue 31.4: ``DType(6, 1, 1).name`` was ``'dtype6_1'``, which did not parse)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dlpackshim as ds
from dlpackshim import DType
from dlpackshim._ffi import ffi, lib


def _validation_accepts(code: int, bits: int, lanes: int) -> bool:
    """What the C library's validation says of a 0-d CPU tensor of this dtype."""
    probe = ffi.new("DLTensor *")
    probe.data = ffi.cast("void *", 256)
    probe.device.device_type = ds.DeviceType.kDLCPU
    probe.dtype.code, probe.dtype.bits, probe.dtype.lanes = code, bits, lanes
    return lib.dlpackshim_tensor_validate(probe, 0) == 0


def test_every_dtype_validation_accepts_has_a_name_that_parses_back():
    accepted = [(c, b) for c in range(256) for b in range(256) if _validation_accepts(c, b, 1)]
    assert (6, 1) in accepted and (2, 32) in accepted and (18, 32) in accepted
    for code, bits in accepted:
        for lanes in (1, 2, 4, 65535):
            dt = DType(code, bits, lanes)
            assert DType(dt.name) == dt and DType.from_name(dt.name) == dt, dt.name
            assert eval(repr(dt), {"DType": DType}) == dt


@given(st.integers(0, 255), st.integers(1, 255), st.integers(1, 65535))
def test_every_dtype_has_a_name_that_parses_back(code, bits, lanes):
    dt = DType(code, bits, lanes)
    back = DType(dt.name)
    assert back == dt and back.name == dt.name and tuple(back) == (code, bits, lanes)


def test_a_width_without_a_name_of_its_own_is_named_by_its_fields():
    assert DType(6, 1).name == "dtype6_1" and DType("dtype6_1") == (6, 1, 1)
    assert DType(4, 32, 2).name == "dtype4_32x2" and DType("dtype4_32x2") == (4, 32, 2)
    assert DType(200, 8).name == "dtype200_8" and DType("dtype200_8").code == 200
    assert ds.from_dlpack(ds.from_pointer(8, (0,), "dtype6_1")).dtype == (6, 1, 1)


def test_a_name_is_the_whole_string():
    """No prefix, suffix or trailing newline around a name parses (the regular
    expressions this parser replaced accepted "int8\\n" through ``$``)."""
    for name in ("int8\n", "dtype6_1\n", " int8", "int8 ", "int+8", "xint8", "int", "int0",
                 "int256", "dtype6_", "dtype_1", "dtype256_1", "dtype6_1_2", "float32x"):
        with pytest.raises(ValueError, match="unknown DLPack dtype name"):
            DType(name)


@pytest.mark.parametrize("name", ["int08", "dtype06_1", "dtype6_01", "float32x01",
                                  "int\u0663\u0662", "uint\uff18", "float32x\u0664",
                                  "float32x\u00b2", "dtype\u0666_1", "float32x1", "int8x1",
                                  "dtype6_8", "dtype0_32", "dtype4_16", "dtype18_32",
                                  "dtype2_16x1", "dtype6_8x2"])
def test_a_name_is_only_what_DType_name_writes(name):
    """Only the name DType.name writes parses (ASCII digits, no leading
    zero, no lanes of 1, no generic name for a type that has its own): any
    other is ValueError with the documented words (a defect: Arabic-Indic and
    full-width digits, leading zeros and aliases parsed, and a superscript
    digit raised int()'s own message)."""
    with pytest.raises(ValueError, match="unknown DLPack dtype name"):
        DType(name)
    with pytest.raises(ValueError):
        ds.from_pointer(8, (1,), name)
