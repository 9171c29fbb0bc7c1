"""Dask's ``dask.sizeof`` entry point for dlpackshim (pyproject.toml).

A module of its own, outside the package: Dask loads every sizeof entry
point when it is imported, and importing ``dlpackshim`` would load the C
library (~30 ms, and an error that would break ``import dask`` where the
library cannot load). This registers lazily instead: Dask calls
:func:`dlpackshim._dask.register_sizeof` the first time it sizes an object of
the ``dlpackshim`` package."""

from typing import Any


def register(sizeof: Any) -> None:
    @sizeof.register_lazy("dlpackshim")
    def _register_dlpackshim() -> None:
        from dlpackshim._dask import register_sizeof

        register_sizeof(sizeof)
