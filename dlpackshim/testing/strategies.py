"""Hypothesis strategies for DLPack: dtypes, shapes, layouts, producers.

Composable in the manner of ``hypothesis.extra.numpy``: every strategy takes
the strategies (or values) it is made of as arguments, and draws plain data
(:class:`~dlpackshim.testing.producers.TensorSpec`, tuples) that prints as
its own minimal reproducer. :func:`tensors` and :func:`hostile_producers`
build the producers (C-built tensors with counting deleters)::

    from hypothesis import given
    from dlpackshim.testing import strategies as dst

    @given(dst.tensors(protocols=("both",)))
    def test_my_from_dlpack(t):
        arr = my_lib.from_dlpack(t.obj)
        assert bytes(arr) == t.expected

This module imports hypothesis; ``import dlpackshim`` and
``import dlpackshim.testing`` do not.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Tuple, Union

from hypothesis import strategies as st

from . import producers as _p
from .producers import DEFECTS, TensorSpec

__all__ = [
    "ALL_DTYPES",
    "AFTER_1_3_DTYPES",
    "Built",
    "Layout",
    "PROTOCOLS",
    "SUBBYTE_DTYPES",
    "dtypes",
    "hostile_producers",
    "hostile_specs",
    "layouts",
    "shapes",
    "tensor_specs",
    "tensors",
]

#: (code, bits, lanes) of every DLPack 1.3 dtype with one byte or more per element.
BYTE_DTYPES: Tuple[Tuple[int, int, int], ...] = tuple(
    [(0, b, 1) for b in (8, 16, 32, 64)]
    + [(1, b, 1) for b in (8, 16, 32, 64)]
    + [(2, b, 1) for b in (16, 32, 64)]
    + [(4, 16, 1), (5, 64, 1), (5, 128, 1), (6, 8, 1)]
    + [(c, 8, 1) for c in range(7, 15)])           # the fp8 family and e8m0
#: Sub-byte dtypes: int4, uint4, fp4 (e2m1fn), fp6 (e2m3fn, e3m2fn).
SUBBYTE_DTYPES: Tuple[Tuple[int, int, int], ...] = ((0, 4, 1), (1, 4, 1), (17, 4, 1),
                                                     (15, 6, 1), (16, 6, 1))
ALL_DTYPES = BYTE_DTYPES + SUBBYTE_DTYPES
#: Dtypes added by DLPack's main branch after 1.3 (minor still 3): kDLBcomplex,
#: two bfloat16. Drawn only when asked for (:func:`dtypes` ``after_1_3``): a
#: consumer written against 1.3 may rightly refuse them.
AFTER_1_3_DTYPES: Tuple[Tuple[int, int, int], ...] = ((18, 32, 1),)
#: The ``protocol`` values of a TensorSpec.
PROTOCOLS = ("both", "legacy", "capsule-versioned", "capsule-legacy")

_Strat = st.SearchStrategy


def _as_strategy(x: Any) -> _Strat:
    return x if isinstance(x, st.SearchStrategy) else st.just(x)


def dtypes(*, codes: Optional[Sequence[int]] = None, subbyte: bool = True,
           lanes: Union[int, Sequence[int]] = 1, after_1_3: bool = False) -> _Strat:
    """DLPack dtypes ``(code, bits, lanes)``.

    codes: restrict to these ``DLDataTypeCode`` values; subbyte: include int4,
    uint4, fp4 and fp6; lanes: the lane counts to draw (1 = scalars; vector types
    such as (2, 32, 4) are legal DLPack that most consumers refuse); after_1_3:
    include :data:`AFTER_1_3_DTYPES` (bcomplex32).
    """
    pool = [d for d in (ALL_DTYPES if subbyte else BYTE_DTYPES)
            + (AFTER_1_3_DTYPES if after_1_3 else ())
            if codes is None or d[0] in codes]
    if not pool:
        raise ValueError("no dtype matches")
    lanes_t = (lanes,) if isinstance(lanes, int) else tuple(lanes)
    base = st.sampled_from(pool)
    if lanes_t == (1,):
        return base
    return st.tuples(base, st.sampled_from(lanes_t)).map(
        lambda dl: (dl[0][0], dl[0][1], dl[1]))


def shapes(*, min_dims: int = 0, max_dims: int = 6, min_side: int = 0, max_side: int = 5,
           max_numel: int = 4096) -> _Strat:
    """Shapes (tuples of extents); extents of 0 give empty tensors, ``()`` 0-d ones."""
    def fit(shape: Sequence[int]) -> Tuple[int, ...]:
        shape = list(shape)
        while _p.numel(shape) > max_numel:
            i = shape.index(max(shape))
            shape[i] = max(min_side, shape[i] // 2)
            if shape[i] == min_side and _p.numel(shape) > max_numel and min_side > 0:
                break
        return tuple(shape)
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(fit)


class Layout(NamedTuple):
    """A view over one allocation: shape, strides (elements) and byte_offset."""

    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    byte_offset: int


@st.composite
def layouts(draw: Any, shape: Any = None, *, compact: bool = False,
            allow_negative: bool = True, allow_zero: bool = True, allow_huge: bool = True,
            max_offset: int = 64, max_span_elems: int = 1 << 16) -> Layout:
    """Strided views of one allocation: permuted dimensions, steps, negative and
    zero (broadcast) strides, huge strides on extent-1 dimensions (legal, never
    used) and a byte_offset in ``[0, max_offset]``.

    shape: a shape or a strategy of shapes (default :func:`shapes`).
    compact: only compact row-major strides (what packed sub-byte types need).
    """
    shape_t = tuple(draw(_as_strategy(shape) if shape is not None else shapes()))
    ndim = len(shape_t)
    offset = draw(st.integers(0, max_offset)) if max_offset else 0
    if compact or ndim == 0:
        return Layout(shape_t, _p.compact_strides(shape_t), offset)
    perm = draw(st.permutations(range(ndim)))
    choices = [1, 1, 1, 2, 3] + ([-1, -2] if allow_negative else []) + ([0] if allow_zero else [])
    steps = [draw(st.sampled_from(choices)) for _ in range(ndim)]
    strides = [0] * ndim
    acc = 1
    for k in reversed(perm):            # the last of perm is the innermost dimension
        strides[k] = acc * steps[k]
        acc *= max(shape_t[k], 1) * max(abs(steps[k]), 1)
    if acc > max_span_elems:            # keep allocations small: unit steps instead
        return draw(layouts(shape_t, compact=True, max_offset=max_offset))
    if allow_huge:
        for k in range(ndim):
            if shape_t[k] == 1 and draw(st.booleans()):
                strides[k] = draw(st.sampled_from([1 << 40, -(1 << 40), 1 << 50]))
    return Layout(shape_t, tuple(strides), offset)


# The module-level strategies, for tensor_specs, whose keyword arguments shadow them.
_default_dtypes = dtypes
_default_layouts = layouts


@st.composite
def tensor_specs(draw: Any, *, dtypes: Any = None, layouts: Any = None,
                 protocols: Sequence[str] = PROTOCOLS,
                 devices: Sequence[Tuple[int, int]] = ((1, 0),),
                 versions: Sequence[Tuple[int, int]] = ((1, 0), (1, 1), (1, 2), (1, 3)),
                 readonly: Optional[bool] = None, copied: Optional[bool] = None,
                 null_strides: Optional[bool] = None) -> TensorSpec:
    """Valid :class:`TensorSpec` values: every layout the standard allows.

    dtypes, layouts: strategies (default :func:`dtypes`, :func:`layouts`);
    protocols, devices, versions: the choices to draw; readonly, copied,
    null_strides: fix a flag (None draws it). Sub-byte dtypes are drawn packed
    (compact, versioned or legacy) or IS_SUBBYTE_TYPE_PADDED (any strides,
    versioned only); NULL strides only with compact layouts and versions < 1.2
    or legacy capsules; READ_ONLY and the other flags only where the protocol
    can carry them.
    """
    dtype = draw(_as_strategy(dtypes) if dtypes is not None else _default_dtypes())
    protocol = draw(st.sampled_from(tuple(protocols)))
    legacy = protocol in ("legacy", "capsule-legacy")
    sub = dtype[1] * dtype[2] < 8
    padded = sub and not legacy and draw(st.booleans())
    lay_s = layouts if layouts is not None else _default_layouts(compact=sub and not padded)
    lay = draw(_as_strategy(lay_s))
    if sub and not padded and lay.strides != _p.compact_strides(lay.shape):
        lay = Layout(lay.shape, _p.compact_strides(lay.shape), lay.byte_offset)
    version = draw(st.sampled_from(tuple(versions)))
    compact = lay.strides == _p.compact_strides(lay.shape)
    can_null = compact and len(lay.shape) > 0 and (legacy or version < (1, 2))
    ns = (draw(st.booleans()) if null_strides is None else null_strides) and can_null
    ro = (draw(st.booleans()) if readonly is None else readonly) and not legacy
    cp = (draw(st.booleans()) if copied is None else copied) and not legacy
    device = tuple(draw(st.sampled_from(tuple(devices))))
    return TensorSpec(dtype=tuple(dtype), shape=lay.shape, strides=lay.strides,
                      byte_offset=lay.byte_offset, device=device, version=version,
                      readonly=ro, copied=cp, padded=padded, null_strides=ns,
                      protocol=protocol, seed=draw(st.integers(0, 2**32 - 1)))


class Built:
    """A producer built from a spec: give :attr:`obj` to the consumer, compare with
    :attr:`expected`, read :attr:`deleter_calls` once the result died."""

    def __init__(self, spec: TensorSpec) -> None:
        self.spec = spec
        self.obj, self.holder = _p.make_producer(spec)

    @property
    def expected(self) -> bytes:
        """C-order bytes a correct consumer sees (see :func:`~.producers.expected_bytes`)."""
        return self.holder.mem.view_bytes(self.spec)

    @property
    def expect(self) -> str:
        """What the standard asks of the consumer ("accept", "raise:BufferError", ...)."""
        return self.spec.expect

    @property
    def deleter_calls(self) -> int:
        return self.holder.deleter_calls

    def __repr__(self) -> str:
        return f"Built({self.spec.describe()})"


def tensors(**kw: Any) -> _Strat:
    """Valid producers (:class:`Built`) with known expected contents; keyword
    arguments as :func:`tensor_specs`."""
    return tensor_specs(**kw).map(Built)


@st.composite
def hostile_specs(draw: Any, *, defects: Optional[Sequence[str]] = None,
                  protocols: Sequence[str] = PROTOCOLS, **kw: Any) -> TensorSpec:
    """Specs of broken producers (:data:`~.producers.DEFECTS`), each tagged with
    what the standard asks of a consumer (``spec.expect``). Keyword arguments go
    to :func:`tensor_specs` for the layout underneath."""
    names = tuple(defects) if defects is not None else tuple(DEFECTS)
    name = draw(st.sampled_from(names))
    protos = [p for p in protocols
              if _p.applicable(TensorSpec(shape=(2, 2), protocol=p, defect=name))]
    if not protos:
        protos = list(protocols)
    kw.setdefault("dtypes", dtypes(subbyte=False))
    spec = draw(tensor_specs(protocols=protos, **kw))
    if name in ("null-shape", "negative-extent", "overflowing-extents", "null-data"):
        shape = spec.shape + (2,) * max(0, 2 - len(spec.shape))
        shape = tuple(max(1, s) for s in shape)
        spec = spec.with_(shape=shape, strides=None, null_strides=False)
    spec = spec.with_(defect=name)
    if not _p.applicable(spec):
        spec = spec.with_(protocol="both", readonly=False)
    return spec


def hostile_producers(**kw: Any) -> _Strat:
    """Broken producers (:class:`Built`), each tagged (``.expect``) with the
    exception class the standard requires, "raise" (any exception), "accept" or
    "no-crash"; keyword arguments as :func:`hostile_specs`."""
    return hostile_specs(**kw).map(Built)
