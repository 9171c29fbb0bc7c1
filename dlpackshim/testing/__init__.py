"""dlpackshim.testing: fuzz other projects' DLPack consumers and producers.

- :mod:`dlpackshim.testing.producers`: producers on demand, built by the C
  library, for every layout the standard allows and every way to break it;
  each deleter counts its calls exactly.
- :mod:`dlpackshim.testing.strategies`: hypothesis strategies (``dtypes``,
  ``shapes``, ``layouts``, ``tensor_specs``, ``tensors``, ``hostile_producers``).
- :func:`check_consumer` (:mod:`.consumer`): fuzz a ``from_dlpack``;
  :func:`check_producer` (:mod:`.producer_check`): check an array library's
  ``__dlpack__`` (``python3 -m dlpackshim check``). Both report through
  :mod:`.report`; the consumer's cases run in :mod:`.worker`; ``MODULE:X``
  targets are parsed by :mod:`.targets`; :mod:`.capsules` looks into capsules.
- :func:`assert_consumer_conforms` / :func:`assert_producer_conforms`: the
  same, as one-line pytest assertions (see docs/testing.md).

hypothesis is needed by the strategies and the consumer checker only; this
package imports it lazily, and ``import dlpackshim`` never does. Without it,
importing the strategies raises ModuleNotFoundError naming the extra to
install (:data:`HYPOTHESIS_REMEDY`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .consumer import PROPERTIES, ConsumerReport, check_consumer
from .producer_check import check_producer
from .producers import (DEFECTS, LegacyProducer, ManagedTensor, Producer, TensorSpec,
                        expected_bytes, make_capsule, make_producer)

#: How to get hypothesis, which the strategies and ``check-consumer`` need.
HYPOTHESIS_REMEDY = "pip install 'dlpackshim[testing]' (or pip install hypothesis)"

__all__ = [
    "DEFECTS",
    "HYPOTHESIS_REMEDY",
    "PROPERTIES",
    "ConsumerReport",
    "LegacyProducer",
    "ManagedTensor",
    "Producer",
    "TensorSpec",
    "assert_consumer_conforms",
    "assert_producer_conforms",
    "check_consumer",
    "check_producer",
    "expected_bytes",
    "make_capsule",
    "make_producer",
]


def assert_consumer_conforms(from_dlpack: Any, *, examples: int = 50, seed: Optional[int] = None,
                             allow: Any = (), **kw: Any) -> ConsumerReport:
    """Run :func:`check_consumer` and raise AssertionError (with the table) when a
    property fails.

    allow: property ids whose failure is known and tolerated (they are still
    reported in the table). Other keyword arguments go to :func:`check_consumer`.
    """
    report = check_consumer(from_dlpack, examples=examples, seed=seed, **kw)
    bad = [r for r in report.rules if r.status in ("fail", "error") and r.id not in allow]
    if bad:
        raise AssertionError("DLPack consumer check failed:\n" + report.table(width=160))
    return report


def assert_producer_conforms(factory: Callable[[], Any], *, examples: int = 25,
                             seed: Optional[int] = None, allow: Any = ()) -> Any:
    """Run :func:`check_producer` on arrays made by ``factory()`` and raise
    AssertionError (with the table) when a rule fails (``allow``: rule ids tolerated)."""
    report = check_producer(factory, examples=examples, seed=seed)
    bad = [r for r in report.rules if r.status in ("fail", "error") and r.id not in allow]
    if bad:
        raise AssertionError("DLPack producer check failed:\n" + report.table(width=160))
    return report
