"""Tensors across processes (issue 33.4, 33.5): multiprocessing with spawn
and fork (Queue, Pool), the shared-memory recipe, and a Dask distributed
cluster of worker processes with the data in out-of-band frames. MPI runs
as examples/run-mpi.sh (make check).

Each Tensor crosses by pickle (test_pickle.py): it arrives as a Tensor that
owns a copy (IS_COPIED) with its dtype, shape, memory order and READ_ONLY.
"""
from __future__ import annotations

import gc
import multiprocessing as mp
import os
import sys

import pytest

import dlpackshim as ds
from conftest import run_python

np = pytest.importorskip("numpy")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
CONTEXTS = ["spawn", "fork"]


def sample(i):
    a = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4) * (i + 1))
    return ds.from_dlpack(a)


# Run in the worker processes (importable: spawn passes sys.path on).
def doubled(t):
    assert isinstance(t, ds.Tensor) and t.is_copied
    return ds.from_dlpack(np.from_dlpack(t) * 2)


def echo_through(q_in, q_out):
    t = q_in.get(timeout=60)
    q_out.put((t.shape, t.dtype.name, t.f_contiguous, t.readonly, t.tobytes()))
    q_out.put(t)


@pytest.mark.parametrize("method", CONTEXTS)
def test_a_queue_carries_tensors_both_ways(method):
    ctx = mp.get_context(method)
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=echo_through, args=(q_in, q_out))
    p.start()
    ro = np.arange(6, dtype=np.int16)
    ro.flags.writeable = False
    t = ds.from_dlpack(ro)
    q_in.put(t)
    shape, dtype, f_order, readonly, data = q_out.get(timeout=120)
    back = q_out.get(timeout=120)
    p.join(120)
    assert p.exitcode == 0
    assert (shape, dtype, f_order, readonly, data) == ((6,), "int16", True, True, ro.tobytes())
    assert back.readonly and back.tobytes() == ro.tobytes() and back.is_copied


@pytest.mark.parametrize("method", CONTEXTS)
def test_a_pool_maps_over_tensors(method):
    with mp.get_context(method).Pool(2) as pool:
        out = pool.map(doubled, [sample(i) for i in range(6)])
    for i, t in enumerate(out):
        assert isinstance(t, ds.Tensor)
        assert np.array_equal(np.from_dlpack(t), np.from_dlpack(sample(i)) * 2)


def test_the_shared_memory_recipe_shares_one_copy():
    r = run_python(os.path.join(ROOT, "examples", "shared_memory.py"), timeout=300)
    assert r.returncode == 0 and "shared memory: ok" in r.stdout, r.stdout + r.stderr


# ---- Dask distributed --------------------------------------------------------------

def test_dask_serializes_the_data_out_of_band():
    """Dask pickles with protocol 5 and a buffer callback: the Tensor's data
    is a frame of its own over the Tensor's memory, not a copy."""
    protocol = pytest.importorskip("distributed.protocol")
    t = ds.from_dlpack(np.arange(1 << 16, dtype=np.float64))
    header, frames = protocol.serialize(t)
    addresses = [np.frombuffer(memoryview(f).cast("B"), np.uint8).ctypes.data
                 for f in frames if memoryview(f).nbytes == t.nbytes]
    assert addresses == [t.data_ptr]
    back = protocol.deserialize(header, frames)
    assert isinstance(back, ds.Tensor) and back.tobytes() == t.tobytes()


def test_dask_serializes_a_tensor_of_65_dimensions():
    """More dimensions than a memoryview holds (64): Dask's frame of the data
    could not be read ("Could not serialize object of type Tensor")."""
    protocol = pytest.importorskip("distributed.protocol")
    a = np.arange(6, dtype=np.float32)
    t = ds.from_pointer(a.ctypes.data, (1,) * 64 + (6,), "float32", owner=a)
    header, frames = protocol.serialize(t)
    assert header["serializer"] != "error", header
    back = protocol.deserialize(header, frames)
    assert back.shape == t.shape and back.tobytes() == a.tobytes()


def test_dask_frames_keep_the_memory_of_a_closed_tensor():
    """Closing the Tensor (and dropping its source) while Dask's frames
    hold its memory frees nothing they still read (check-asan runs this)."""
    protocol = pytest.importorskip("distributed.protocol")
    source = np.arange(1 << 16, dtype=np.float64)
    expected = source.tobytes()
    t = ds.from_dlpack(source)
    header, frames = protocol.serialize(t)
    t.close()
    del t, source
    gc.collect()
    back = protocol.deserialize(header, frames)
    assert back.tobytes() == expected


def test_dask_sizes_a_tensor_as_a_numpy_array():
    """The dask.sizeof entry point: a Tensor counts the bytes its layout spans,
    a broadcast dim's once, whoever owns them (as Dask counts NumPy arrays)."""
    utils = pytest.importorskip("dask.utils")
    from dlpackshim._dask import register_sizeof
    sizeof = utils.Dispatch("sizeof")
    sizeof.register(object, sys.getsizeof)
    register_sizeof(sizeof)
    a = np.full(1 << 20, 3, np.uint8)
    t = ds.from_dlpack(a)
    assert not t.is_copied and sys.getsizeof(t) < 1000  # Python's rule: not its memory
    header = object.__sizeof__(t)
    assert sizeof(t) == header + a.nbytes  # Dask's: what the worker holds
    wide = ds.from_dlpack(np.broadcast_to(np.arange(4.0), (1000, 4)))
    assert sizeof(wide) == object.__sizeof__(wide) + 32
    t.close()
    assert sizeof(t) == header


def _entry_point_dist(where):
    """A .dist-info in `where` declaring pyproject.toml's dask.sizeof entry
    point (an installed package has it in its own)."""
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        value = f.read().split('[project.entry-points."dask.sizeof"]')[1].split('"')[1]
    info = where / "dlpackshim_under_test-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dlpackshim-under-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[dask.sizeof]\ndlpackshim = {value}\n")
    return os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")]))


def test_the_dask_entry_point_imports_nothing_until_dask_meets_a_tensor(tmp_path):
    """import dask loads the entry point, which imports neither dlpackshim
    nor its library (a library that cannot load must not break Dask); the
    first Tensor Dask sizes registers the rule."""
    pytest.importorskip("dask")
    path = _entry_point_dist(tmp_path)
    r = run_python("-c", "import sys, dask.sizeof; print('dlpackshim' in sys.modules)",
                   env={"PYTHONPATH": path, "DLPACKSHIM_LIBRARY": "/nonexistent/libdlpackshim.so"})
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr
    r = run_python("-c", "import numpy as np, dask.sizeof, dlpackshim as ds; "
                   "print(dask.sizeof.sizeof(ds.from_dlpack(np.zeros(1 << 20, np.uint8))))",
                   env={"PYTHONPATH": path})
    assert r.returncode == 0 and int(r.stdout) >= 1 << 20, r.stdout + r.stderr


def test_dask_cluster_of_worker_processes(tmp_path):
    """A LocalCluster of 2 worker processes: client.submit(f, tensor) and
    back, in a child interpreter (the cluster's processes and threads end
    with it). The package's dask.sizeof entry point is put where the workers
    find it (an installed package has it in its own .dist-info)."""
    pytest.importorskip("distributed")
    r = run_python("-c", DASK_RUN, env={"PYTHONPATH": _entry_point_dist(tmp_path)}, timeout=300)
    assert r.returncode == 0 and "dask: ok" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


DASK_RUN = """
import numpy as np
import dlpackshim as ds
from distributed import Client, LocalCluster

def doubled(t):
    assert isinstance(t, ds.Tensor) and t.is_copied  # a frame of its own
    return ds.from_dlpack(np.from_dlpack(t) * 2)

if __name__ == "__main__":
    a = np.asfortranarray(np.arange(1 << 18, dtype=np.float32).reshape(512, 512))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster:
        # results through the scheduler (pickle protocol 4, in band) and
        # straight from the workers (protocol 5, out of band)
        for direct in (False, True):
            with Client(cluster, direct_to_workers=direct) as client:
                remote = client.scatter(ds.from_dlpack(a))
                futures = [client.submit(doubled, remote, pure=False) for _ in range(4)]
                results = client.gather(futures)
                assert all(isinstance(t, ds.Tensor) and t.f_contiguous for t in results)
                assert all(np.array_equal(np.from_dlpack(t), a * 2) for t in results)
                one = client.submit(doubled, ds.from_dlpack(a[:3, :3])).result()
                assert np.array_equal(np.from_dlpack(one), a[:3, :3] * 2)
                # the workers see the data they hold (the dask.sizeof entry point)
                held = client.run(lambda dask_worker: dask_worker.data.fast.total_weight)
                assert max(held.values()) >= a.nbytes, held  # the scattered Tensor
                del remote, futures, results, one
                # a Tensor made on a worker over its NumPy result: counted too
                made = client.submit(lambda: ds.from_dlpack(np.full(1 << 24, 1, np.uint8)))
                made.result()
                held = client.run(lambda dask_worker: dask_worker.data.fast.total_weight)
                assert max(held.values()) >= 1 << 24, held
                del made
    print("dask: ok")
"""
