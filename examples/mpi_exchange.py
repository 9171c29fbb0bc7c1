#!/usr/bin/env python3
"""dlpackshim.Tensor objects as MPI message buffers, through mpi4py.

mpi4py (>= 3.1) takes any object with ``__dlpack__``/``__dlpack_device__`` as
a buffer: it asks ``__dlpack_device__()``, calls
``__dlpack__(max_version=(1, 0), copy=False)`` (host data; for device data it
adds ``stream=-1``), reads the address, size and element type from the
capsule, and keeps the capsule -- unconsumed -- until the operation is done.
A tensor whose capsule carries the READ_ONLY flag is refused wherever MPI
would write (receive buffers) with ``BufferError: dlpack: buffer is not
writable``; non-contiguous tensors are refused everywhere. mpi4py asks for
the buffer protocol first, and a Tensor is a buffer (``memoryview(t)``) when
its dtype has a struct format: such a host Tensor goes that way, the others
(bfloat16, float8, GPU memory) through DLPack. A Tensor also pickles, so the
lower-case ``comm.send`` hands over a Tensor that owns a copy of the data.

Run with two or more ranks (loopback only, see run-mpi.sh)::

    mpirun -n 2 python examples/mpi_exchange.py

Each rank checks what it received; rank 0 prints a short report. Exit status
0 when every check on every rank holds, 1 otherwise.
"""
import ctypes
import gc
import sys
import traceback
import weakref

import numpy as np
from mpi4py import MPI

import dlpackshim as ds

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = []  # this rank's failed checks
report = []  # rank 0's lines


def check(ok, what):
    if not ok:
        failures.append(f"rank {rank}: {what}")
    return ok


def note(line):
    if rank == 0:
        report.append(line)


def row(op, buf, how):
    note(f"  {op:<11} {buf:<14} {how}")


def ctypes_tensor(ctype, n, readonly=False, fill=None):
    """A Tensor over memory dlpackshim knows nothing about: a ctypes array."""
    buf = (ctype * n)()
    if fill is not None:
        buf[:] = fill
    dtype = {ctypes.c_int32: "int32", ctypes.c_float: "float32", ctypes.c_double: "float64"}[ctype]
    t = ds.from_pointer(ctypes.addressof(buf), (n,), dtype, readonly=readonly, owner=buf)
    return t, buf


def refused_for_writing(call, what):
    """`call` must raise BufferError before any data moves (so no rank hangs)."""
    try:
        call()
    except BufferError as e:
        check("not writable" in str(e), f"{what}: unexpected message {e!r}")
        return str(e)
    check(False, f"{what}: a read-only tensor was accepted as a receive buffer")
    return None


def send_recv():
    """Point to point: NumPy-backed tensors 0 -> 1, ctypes-backed 1 -> 0."""
    n = 1000
    if rank == 0:
        src = ds.from_dlpack(np.arange(n, dtype=np.float64))
        comm.Send(src, dest=1, tag=1)
    elif rank == 1:
        out = np.zeros(n)
        dst = ds.from_dlpack(out)
        comm.Recv(dst, source=0, tag=1)
        check(np.array_equal(out, np.arange(n, dtype=np.float64)), "Send/Recv float64: data differs")
        check(np.array_equal(np.from_dlpack(dst), out), "Send/Recv: the tensor does not see the data")
    row("Send/Recv", f"float64[{n}]", "NumPy tensor -> NumPy tensor (MPI datatype from the dtype: DOUBLE)")

    # The other way, between two from_pointer tensors over ctypes memory; the
    # MPI datatype is inferred from the tensor's dtype (int32 -> MPI_INT).
    if rank == 1:
        src, _keep = ctypes_tensor(ctypes.c_int32, 16, fill=[i * i for i in range(16)])
        comm.Send(src, dest=0, tag=2)
    elif rank == 0:
        dst, buf = ctypes_tensor(ctypes.c_int32, 16)
        status = MPI.Status()
        comm.Recv(dst, source=1, tag=2, status=status)
        check(list(buf) == [i * i for i in range(16)], "Send/Recv int32 from_pointer: data differs")
        check(status.Get_count(MPI.INT) == 16, f"Recv count {status.Get_count(MPI.INT)} != 16")
    row("Send/Recv", "int32[16]", "from_pointer -> from_pointer (MPI datatype from the dtype: INT)")

    # Explicit [buffer, datatype] messages work too.
    if rank == 0:
        comm.Send([ds.from_dlpack(np.full(4, 7, dtype=np.uint8)), MPI.BYTE], dest=1, tag=3)
    elif rank == 1:
        out = np.zeros(4, dtype=np.uint8)
        comm.Recv([ds.from_dlpack(out), MPI.BYTE], source=0, tag=3)
        check(out.tolist() == [7] * 4, "Send/Recv [tensor, MPI.BYTE]: data differs")
    row("Send/Recv", "uint8[4]", "[tensor, MPI.BYTE]: explicit datatype")


def packed_sub_byte():
    """Packed int4 (two to a byte) goes as its bytes: mpi4py sizes a DLPack
    buffer as elements x whole bytes, twice these, and would read and write
    past the tensor (docs/mpi.md)."""
    n = 8
    buf = np.full(n // 2 + 4, 0xAA, dtype=np.uint8)  # 4 bytes of int4, 4 of canary
    if rank == 0:
        buf[: n // 2] = [0x21, 0x43, 0x65, 0x87]
    t = ds.from_pointer(buf.ctypes.data, (n,), "int4", owner=buf)
    as_bytes = ds.from_pointer(t.data_ptr, (t.nbytes,), "uint8", owner=t, readonly=t.readonly)
    if rank == 0:
        comm.Send(as_bytes, dest=1, tag=9)
    elif rank == 1:
        comm.Recv(as_bytes, source=0, tag=9)
        check(buf[: n // 2].tolist() == [0x21, 0x43, 0x65, 0x87], "packed int4: data differs")
        check(buf[n // 2:].tolist() == [0xAA] * 4, "packed int4: bytes past the tensor written")
    row("Send/Recv", f"int4[{n}]", f"packed: as its {t.nbytes} bytes (mpi4py would size the "
        f"tensor itself {MPI.buffer(t).nbytes})")


def pickled():
    """Lower-case send/recv pickle the object: a Tensor arrives as a Tensor
    that owns a copy (IS_COPIED), with its dtype, shape, memory order and
    READ_ONLY flag. The buffer protocol carries the bytes of a memoryview."""
    a = np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4))
    if rank == 0:
        ro_src = np.arange(5.0)
        ro_src.flags.writeable = False
        comm.send([ds.from_dlpack(a), ds.from_dlpack(ro_src)], dest=1, tag=20)
        comm.Send(memoryview(ds.from_dlpack(np.arange(6, dtype=np.uint8))), dest=1, tag=21)
    elif rank == 1:
        f, r = comm.recv(source=0, tag=20)
        check(isinstance(f, ds.Tensor) and f.is_copied, "send(Tensor): not a Tensor owning its data")
        check(np.array_equal(np.from_dlpack(f), a) and f.f_contiguous and not f.c_contiguous,
              "send(Tensor): data or memory order differs")
        check(r.readonly and np.from_dlpack(r).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0],
              "send(read-only Tensor): READ_ONLY or data lost")
        out = bytearray(6)
        comm.Recv(memoryview(out), source=0, tag=21)
        check(bytes(out) == bytes(range(6)), "Send(memoryview(Tensor)): data differs")
    row("send/recv", "int16[3, 4]", "pickled: a Tensor again, F order and READ_ONLY kept")
    row("Send/Recv", "uint8[6]", "memoryview(Tensor): the buffer protocol")


def bcast():
    n = 64
    expect = np.linspace(0, 1, n, dtype=np.float32)
    if rank == 0:
        # The root only reads: a read-only tensor is fine there.
        src = expect.copy()
        src.flags.writeable = False
        t = ds.from_dlpack(src)
        check(t.readonly, "from_dlpack of a read-only array is not read-only")
        comm.Bcast(t, root=0)
    else:
        ro, _ = ctypes_tensor(ctypes.c_float, n, readonly=True)
        refused_for_writing(lambda: comm.Bcast(ro, root=0), "Bcast into from_pointer(readonly=True)")
        t, buf = ctypes_tensor(ctypes.c_float, n)
        comm.Bcast(t, root=0)
        check(np.array_equal(np.frombuffer(buf, dtype=np.float32), expect), "Bcast: data differs")
    row("Bcast", f"float32[{n}]", "read-only NumPy tensor (root) -> from_pointer; read-only non-root refused")


def allreduce():
    n = 1 << 18  # 1 MiB of int32: big enough for the shared-memory fragment path
    send = ds.from_dlpack(np.full(n, rank + 1, dtype=np.int32))
    out = np.zeros(n, dtype=np.int32)
    comm.Allreduce(send, ds.from_dlpack(out), op=MPI.SUM)
    total = size * (size + 1) // 2
    check(bool((out == total).all()), f"Allreduce SUM: expected {total} everywhere")

    # A read-only receive buffer is refused on every rank, before MPI is entered.
    ro = np.zeros(4, dtype=np.float64)
    ro.flags.writeable = False
    msg = refused_for_writing(
        lambda: comm.Allreduce(ds.from_dlpack(np.ones(4)), ds.from_dlpack(ro), op=MPI.SUM),
        "Allreduce into a read-only tensor")

    # In place, into a from_pointer tensor.
    t, buf = ctypes_tensor(ctypes.c_double, 8, fill=[float(rank)] * 8)
    comm.Allreduce(MPI.IN_PLACE, t, op=MPI.MAX)
    check(list(buf) == [float(size - 1)] * 8, "Allreduce IN_PLACE MAX: data differs")
    row("Allreduce", f"int32[{n}]", "SUM, NumPy tensors")
    row("Allreduce", "float64[8]", "IN_PLACE MAX into a from_pointer tensor")
    row("Allreduce", "float64[4]", f"into a read-only tensor: BufferError({msg!r})")


def read_only_recv():
    """Recv into a read-only tensor fails on the spot; the message is then
    received into a writable one, so the ranks stay matched."""
    if rank == 0:
        src = np.arange(5, dtype=np.int64)
        src.flags.writeable = False
        comm.Send(ds.from_dlpack(src), dest=1, tag=5)  # sending from read-only data is fine
    elif rank == 1:
        frozen = np.full(5, -1, dtype=np.int64)
        frozen.flags.writeable = False
        ro = ds.from_dlpack(frozen)
        check(ro.readonly, "tensor over a read-only array is not read-only")
        refused_for_writing(lambda: comm.Recv(ro, source=0, tag=5), "Recv into a read-only tensor")
        check(frozen.tolist() == [-1] * 5, "a refused Recv wrote into read-only memory")
        out = np.zeros(5, dtype=np.int64)
        comm.Recv(ds.from_dlpack(out), source=0, tag=5)
        check(out.tolist() == list(range(5)), "Recv after the refused one: data differs")
    row("Send/Recv", "int64[5]", "read-only tensor sends fine; Recv into one: BufferError")


def non_contiguous():
    t = ds.from_dlpack(np.arange(10.0)[::2])
    try:
        comm.Send(t, dest=(rank + 1) % size, tag=6)
    except BufferError as e:
        check("contiguous" in str(e), f"non-contiguous Send: unexpected message {e!r}")
        row("Send", "float64[5]", f"non-contiguous view: BufferError({str(e)!r})")
        return
    check(False, "a non-contiguous tensor was accepted as an MPI buffer")


def lifetimes():
    """mpi4py drops the capsule after the call: the memory is freed once the
    user's references are gone."""
    arr = np.arange(32, dtype=np.float64) * (rank + 1)
    alive = weakref.ref(arr)
    t = ds.from_dlpack(arr)
    del arr
    got = np.empty(32)
    comm.Sendrecv(t, dest=(rank + 1) % size, sendtag=7,
                  recvbuf=ds.from_dlpack(got), source=(rank - 1) % size, recvtag=7)
    check(np.array_equal(got, np.arange(32.0) * (((rank - 1) % size) + 1)), "Sendrecv ring: data differs")
    check(alive() is not None, "the array died while its tensor lives")
    del t
    gc.collect()
    check(alive() is None, "the array outlived its tensor: a capsule was leaked")
    row("Sendrecv", "float64[32]", "ring; the array is freed with its tensor (no capsule kept)")


def nonblocking():
    """Isend keeps mpi4py's capsule in the Request: closing the Tensor and
    dropping the array while the send is in flight is safe."""
    n = 4096
    if rank == 0:
        arr = np.arange(n, dtype=np.float64)
        alive = weakref.ref(arr)
        t = ds.from_dlpack(arr)
        del arr
        req = comm.Isend(t, dest=1, tag=8)
        t.close()
        gc.collect()
        check(alive() is not None, "Isend in flight, but the array was freed")
        req.Wait()
        del req
        gc.collect()
        check(alive() is None, "the array outlived the completed Isend")
    elif rank == 1:
        out = np.zeros(n)
        req = comm.Irecv(ds.from_dlpack(out), source=0, tag=8)
        req.Wait()
        check(np.array_equal(out, np.arange(n, dtype=np.float64)), "Isend/Irecv: data differs")
    row("Isend/Irecv", f"float64[{n}]", "Tensor closed while in flight: the Request keeps the memory")


def cuda_aware():
    """Open MPI's MPIX_Query_cuda_support(), where the MPI library has it."""
    try:
        return "yes" if ctypes.CDLL(None).MPIX_Query_cuda_support() else "no"
    except (AttributeError, OSError):
        return "unknown"


class Recorder:
    """A DLPack producer that records what mpi4py asks of the Tensor it wraps."""

    def __init__(self, tensor):
        self.tensor, self.asked = tensor, None

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.asked = kwargs
        return self.tensor.__dlpack__(**kwargs)


def gpu_path():
    """What mpi4py asks of a tensor on a CUDA device, without a GPU: host memory
    *labelled* (kDLCUDA, 0), given to MPI.buffer only, never sent."""
    keep = (ctypes.c_float * 8)()
    try:
        t = ds.from_pointer(ctypes.addressof(keep), (8,), "float32", device=(2, 0), owner=keep)
    except (BufferError, ValueError, OSError) as e:  # a build that checks CUDA pointers
        row("(CUDA)", "float32[8]", f"not checked: from_pointer refused the label ({e})")
        return
    probe = Recorder(t)
    view = MPI.buffer(probe)
    check(probe.asked == {"stream": -1, "max_version": (1, 0), "copy": False},
          f"mpi4py asked {probe.asked!r} of a CUDA tensor")
    check(view.address == t.data_ptr and view.nbytes == 32, "MPI.buffer: wrong address or size")
    try:
        view.tobytes()
        check(False, "mpi4py read a CUDA-labelled buffer from the host")
    except BufferError:
        pass
    ro = ds.from_pointer(ctypes.addressof(keep), (8,), "float32", device=(2, 0), owner=keep,
                         readonly=True)
    refused_for_writing(lambda: MPI.buffer.frombuffer(ro), "writable view of a read-only CUDA tensor")
    row("(CUDA)", "float32[8]", f"mpi4py asks __dlpack__(**{probe.asked}); "
        f"this MPI is CUDA-aware: {cuda_aware()}")


def main():
    if size < 2:
        print("mpi_exchange: run with at least 2 ranks (mpirun -n 2 ...)", file=sys.stderr)
        return 2
    note(f"mpi4py {__import__('mpi4py').__version__}, {MPI.Get_library_version().splitlines()[0].strip()}")
    note(f"dlpackshim {ds.__version__}, {size} ranks; dlpackshim.Tensor as MPI buffers:")
    for step in (send_recv, packed_sub_byte, pickled, bcast, allreduce, read_only_recv, non_contiguous, lifetimes,
                 nonblocking, gpu_path):
        step()
        comm.Barrier()
    everyone = comm.gather(failures, root=0)
    bad = comm.bcast(sum(len(f) for f in everyone) if rank == 0 else None, root=0)
    if rank == 0:
        print("\n".join(report))
        for f in (f for fs in everyone for f in fs):
            print("FAIL:", f)
        print("mpi example:", "all checks passed on every rank" if not bad else f"{bad} check(s) FAILED")
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        status = main()
    except BaseException:
        # One rank failing unexpectedly must not leave the others waiting forever.
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(3)
    sys.exit(status)
