#!/bin/sh
# make check: run examples/mpi_exchange.py on 2 ranks of this machine, over
# loopback only. Exit 77 (skip) with a message when mpirun or mpi4py is missing.
#
# Open MPI (Debian 12 ships 4.1): shared memory between the ranks ("vader",
# called "sm" from Open MPI 5), "self" for a rank talking to itself, the ob1
# PML (so UCX never probes InfiniBand/RoCE devices), and the runtime's own
# out-of-band TCP pinned to the loopback interface. No TCP BTL at all.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/.." && pwd)}
python=${PYTHON:-python3}
mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null || command -v mpiexec 2>/dev/null || true)}

if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null 2>&1; then
  echo "SKIP: mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev): the MPI example does not run"
  exit 77
fi
if ! "$python" -c 'import mpi4py' >/dev/null 2>&1; then
  echo "SKIP: mpi4py is not installed for $python (pip install mpi4py): the MPI example does not run"
  exit 77
fi
# mpi4py must also find an MPI library it can load (without starting MPI here).
if ! "$python" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI' >/dev/null 2>&1; then
  echo "SKIP: mpi4py cannot load an MPI library:"
  "$python" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI' 2>&1 | tail -n 3
  exit 77
fi

set -- -n 2
if "$mpirun" --version 2>/dev/null | grep -q "Open MPI"; then
  shm=vader
  if command -v ompi_info >/dev/null 2>&1 && ! ompi_info --parsable 2>/dev/null | grep -q '^mca:btl:vader:'; then
    shm=sm  # Open MPI 5 renamed vader to sm
  fi
  # The same settings as environment variables reach every rank and the runtime.
  OMPI_MCA_btl=self,$shm
  OMPI_MCA_pml=ob1
  OMPI_MCA_oob_tcp_if_include=lo
  OMPI_MCA_btl_tcp_if_include=lo
  # Single-copy (CMA) needs ptrace rights that containers often lack; plain
  # copies through the shared segment work everywhere.
  eval "OMPI_MCA_btl_${shm}_single_copy_mechanism=none; export OMPI_MCA_btl_${shm}_single_copy_mechanism"
  OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_MCA_hwloc_base_binding_policy=none
  export OMPI_MCA_btl OMPI_MCA_pml OMPI_MCA_oob_tcp_if_include OMPI_MCA_btl_tcp_if_include \
    OMPI_MCA_rmaps_base_oversubscribe OMPI_MCA_hwloc_base_binding_policy
  # Debian's Open MPI refuses root without these (containers often run as root).
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
  set -- --oversubscribe --allow-run-as-root --bind-to none --mca btl "self,$shm" --mca pml ob1 "$@"
fi

# Under ASan (--enable-sanitizers), Open MPI leaks from plugins it has already
# unloaded: frames without a module, which no suppression can name. Leak
# checking stays on for every other test; the ranks run without it.
if [ -n "${SAN_PRELOAD:-}" ] || case "${LD_PRELOAD:-}" in *libasan*) true ;; *) false ;; esac; then
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  export ASAN_OPTIONS
fi

# A rank that dies leaves mpirun waiting: bound the whole run.
limit=""
command -v timeout >/dev/null 2>&1 && limit="timeout 300"
echo "== $mpirun $* $python examples/mpi_exchange.py"
# The example imports the package from the source tree and its library from the
# build tree (DLPACKSHIM_LIBRARY, PYTHONPATH: set by make check; mpirun passes
# the environment on to the ranks it starts on this host).
exec $limit "$mpirun" "$@" "$python" "$srcdir/examples/mpi_exchange.py"
