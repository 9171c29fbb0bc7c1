#!/usr/bin/env python3
"""A Tensor over multiprocessing.shared_memory that another process maps
without a copy (docs/distributed.md).

The parent makes a block of shared memory and a Tensor over it; a child
process attaches to the block by name and makes its own Tensor over the same
pages, typed and shaped through memoryview.cast: no byte is copied on either
side. The child doubles every element in place; the parent sees it.

    python3 examples/shared_memory.py        # prints "shared memory: ok"

(with the package installed; from a built source tree, run it with
``PYTHONPATH=$PWD``, as the README's test command does).

Pickling a Tensor copies its data (it must: the receiver may be another
machine); shared memory is how processes of one machine share one copy.
Nothing but the standard library and dlpackshim is needed.
"""
import multiprocessing as mp
from multiprocessing import shared_memory

import dlpackshim as ds


def attach(name, fmt, shape):
    """A Tensor over the shared block `name` (no copy), and the block: keep
    the block open while the Tensor lives, close it after."""
    shm = shared_memory.SharedMemory(name=name)
    return ds.from_dlpack(shm.buf.cast(fmt, shape)), shm


def double_in_place(name, fmt, shape):
    t, shm = attach(name, fmt, shape)
    view = memoryview(t)  # the Tensor's own buffer: the same shared pages
    for i in range(shape[0]):
        for j in range(shape[1]):
            view[i, j] *= 2
    view.release()
    t.close()
    shm.close()


def main():
    shape, fmt = (3, 4), "d"
    shm = shared_memory.SharedMemory(create=True, size=3 * 4 * 8)
    try:
        t = ds.from_dlpack(shm.buf.cast(fmt, shape))
        view = memoryview(t)
        for i in range(3):
            for j in range(4):
                view[i, j] = 4 * i + j
        child = mp.get_context("spawn").Process(target=double_in_place, args=(shm.name, fmt, shape))
        child.start()
        child.join(120)
        assert child.exitcode == 0, child.exitcode
        assert view.tolist() == [[2.0 * (4 * i + j) for j in range(4)] for i in range(3)], view.tolist()
        view.release()
        t.close()
    finally:
        shm.close()
        shm.unlink()
    print("shared memory: ok")


if __name__ == "__main__":
    main()
