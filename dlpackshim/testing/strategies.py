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

This module imports hypothesis (without it, the ModuleNotFoundError says
which extra to install); ``import dlpackshim`` and ``import dlpackshim.testing``
do not.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional, Sequence, Tuple, Union

from . import HYPOTHESIS_REMEDY

try:
    from hypothesis import strategies as st
    from hypothesis.errors import InvalidArgument
except ModuleNotFoundError as e:
    if e.name != "hypothesis":
        raise
    raise ModuleNotFoundError(f"dlpackshim.testing.strategies needs hypothesis: "
                              f"{HYPOTHESIS_REMEDY}", name="hypothesis") from None

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


# Every strategy a draw uses is built once, when the public function is called, not
# in each draw: hypothesis validates each new strategy object on its first draw,
# which cost more than half of check-consumer's time when they were rebuilt per draw.

def _as_strategy(x: Any) -> _Strat:
    return x if isinstance(x, st.SearchStrategy) else st.just(x)


@functools.lru_cache(maxsize=None)
def _permutations(ndim: int) -> _Strat:
    return st.permutations(range(ndim))


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
    """Shapes (tuples of extents) of at most `max_numel` elements; extents of 0
    give empty tensors, ``()`` 0-d ones. Raises hypothesis's InvalidArgument
    when no shape fits (``min_side ** min_dims > max_numel``)."""
    if min_side > 0 and min_side ** min_dims > max_numel:
        raise InvalidArgument(f"shapes: {min_dims} dims of at least {min_side} make more "
                              f"than max_numel={max_numel} elements")

    def fit(shape: Sequence[int]) -> Tuple[int, ...]:
        shape = list(shape)
        while _p.numel(shape) > max_numel:  # halve the largest extent that can shrink
            i = max((k for k in range(len(shape)) if shape[k] > min_side), key=shape.__getitem__,
                    default=None)
            if i is None:  # every extent at min_side: drop dimensions above min_dims
                shape.pop()
                continue
            shape[i] = max(min_side, shape[i] // 2)
        return tuple(shape)
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(fit)


class Layout(NamedTuple):
    """A view over one allocation: shape, strides (elements) and byte_offset."""

    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    byte_offset: int


def layouts(shape: Any = None, *, compact: bool = False,
            allow_negative: bool = True, allow_zero: bool = True, allow_huge: bool = True,
            max_offset: int = 64, max_span_elems: int = 1 << 16) -> _Strat:
    """Strided views of one allocation: permuted dimensions, steps, negative and
    zero (broadcast) strides, huge strides on extent-1 dimensions (legal, never
    used) and a byte_offset in ``[0, max_offset]``.

    shape: a shape or a strategy of shapes (default :func:`shapes`).
    compact: only compact row-major strides (what packed sub-byte types need).
    """
    shape_s = _as_strategy(shape) if shape is not None else shapes()
    offset_s = st.integers(0, max_offset)
    choices = [1, 1, 1, 2, 3] + ([-1, -2] if allow_negative else []) + ([0] if allow_zero else [])
    step_s = st.sampled_from(choices)
    huge_s = st.sampled_from([1 << 40, -(1 << 40), 1 << 50])

    @st.composite
    def draw_layout(draw: Any) -> Layout:
        shape_t = tuple(draw(shape_s))
        ndim = len(shape_t)
        offset = draw(offset_s) if max_offset else 0
        compact_strides = _p.compact_strides(shape_t)
        if compact or ndim == 0:
            return Layout(shape_t, compact_strides, offset)
        perm = draw(_permutations(ndim))
        steps = [draw(step_s) for _ in range(ndim)]
        strides = [0] * ndim
        acc = 1
        for k in reversed(perm):            # the last of perm is the innermost dimension
            strides[k] = acc * steps[k]
            acc *= max(shape_t[k], 1) * max(abs(steps[k]), 1)
        if acc > max_span_elems:            # keep allocations small: unit steps instead
            return Layout(shape_t, compact_strides, offset)
        if allow_huge:
            for k in range(ndim):
                if shape_t[k] == 1 and draw(st.booleans()):
                    strides[k] = draw(huge_s)
        return Layout(shape_t, tuple(strides), offset)

    return draw_layout()


# The module-level strategies, for tensor_specs, whose keyword arguments shadow them.
_default_dtypes = dtypes
_default_layouts = layouts


def tensor_specs(*, dtypes: Any = None, layouts: Any = None,
                 protocols: Sequence[str] = PROTOCOLS,
                 devices: Sequence[Tuple[int, int]] = ((1, 0),),
                 versions: Sequence[Tuple[int, int]] = ((1, 0), (1, 1), (1, 2), (1, 3)),
                 readonly: Optional[bool] = None, copied: Optional[bool] = None,
                 null_strides: Optional[bool] = None) -> _Strat:
    """Valid :class:`TensorSpec` values: every layout the standard allows.

    dtypes, layouts: strategies (default :func:`dtypes`, :func:`layouts`);
    protocols, devices, versions: the choices to draw; readonly, copied,
    null_strides: fix a flag (None draws it). Sub-byte dtypes are drawn packed
    (compact, versioned or legacy) or IS_SUBBYTE_TYPE_PADDED (any strides,
    versioned only); NULL strides only with compact layouts and versions < 1.2
    or legacy capsules; READ_ONLY and the other flags only where the protocol
    can carry them.
    """
    dtype_s = _as_strategy(dtypes) if dtypes is not None else _default_dtypes()
    protocol_s = st.sampled_from(tuple(protocols))
    if layouts is not None:
        packed_s = any_s = _as_strategy(layouts)
    else:
        packed_s, any_s = _default_layouts(compact=True), _default_layouts()
    version_s = st.sampled_from(tuple(versions))
    device_s = st.sampled_from(tuple(devices))
    seed_s = st.integers(0, 2**32 - 1)

    @st.composite
    def draw_spec(draw: Any) -> TensorSpec:
        dtype = draw(dtype_s)
        protocol = draw(protocol_s)
        legacy = protocol in ("legacy", "capsule-legacy")
        sub = dtype[1] * dtype[2] < 8
        padded = sub and not legacy and draw(st.booleans())
        lay = draw(packed_s if sub and not padded else any_s)
        if sub and not padded and lay.strides != _p.compact_strides(lay.shape):
            lay = Layout(lay.shape, _p.compact_strides(lay.shape), lay.byte_offset)
        version = draw(version_s)
        compact = lay.strides == _p.compact_strides(lay.shape)
        can_null = compact and len(lay.shape) > 0 and (legacy or version < (1, 2))
        ns = (draw(st.booleans()) if null_strides is None else null_strides) and can_null
        ro = (draw(st.booleans()) if readonly is None else readonly) and not legacy
        cp = (draw(st.booleans()) if copied is None else copied) and not legacy
        device = tuple(draw(device_s))
        return TensorSpec(dtype=tuple(dtype), shape=lay.shape, strides=lay.strides,
                          byte_offset=lay.byte_offset, device=device, version=version,
                          readonly=ro, copied=cp, padded=padded, null_strides=ns,
                          protocol=protocol, seed=draw(seed_s))

    return draw_spec()


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
        """What the standard asks of the consumer: a tag of :data:`~.producers.DEFECTS`."""
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


def hostile_specs(*, defects: Optional[Sequence[str]] = None,
                  protocols: Sequence[str] = PROTOCOLS, **kw: Any) -> _Strat:
    """Specs of broken producers (:data:`~.producers.DEFECTS`), each tagged with
    what the standard asks of a consumer (``spec.expect``). Keyword arguments go
    to :func:`tensor_specs` for the layout underneath."""
    names = tuple(defects) if defects is not None else tuple(DEFECTS)
    name_s = st.sampled_from(names)
    kw.setdefault("dtypes", dtypes(subbyte=False))
    by_protocols = {}   # the protocols a defect applies to -> the strategy of its layout
    underneath = {}
    for name in names:
        protos = tuple(p for p in protocols
                       if _p.applicable(TensorSpec(shape=(2, 2), protocol=p, defect=name)))
        protos = protos or tuple(protocols)
        if protos not in by_protocols:
            by_protocols[protos] = tensor_specs(protocols=protos, **kw)
        underneath[name] = by_protocols[protos]

    @st.composite
    def draw_hostile(draw: Any) -> TensorSpec:
        name = draw(name_s)
        spec = draw(underneath[name])
        if name in ("null-shape", "negative-extent", "overflowing-extents", "null-data"):
            shape = spec.shape + (2,) * max(0, 2 - len(spec.shape))
            shape = tuple(max(1, s) for s in shape)
            spec = spec.with_(shape=shape, strides=None, null_strides=False)
        spec = spec.with_(defect=name)
        if not _p.applicable(spec):
            spec = spec.with_(protocol="both", readonly=False)
        return spec

    return draw_hostile()


def hostile_producers(**kw: Any) -> _Strat:
    """Broken producers (:class:`Built`), each tagged (``.expect``) with what the
    standard asks of a consumer: "raise:<classes>" (one of these exception
    classes), "raise-or-cuda:<classes>" (the same, or an import that says
    (kDLCUDA, 0)), "raise" (any exception), "accept" or "no-crash"; keyword
    arguments as :func:`hostile_specs`."""
    return hostile_specs(**kw).map(Built)
