"""mpi4py, imported only when a distributed function is called.

``import qkv.distributed`` works without mpi4py; calling into it without the extra says how to
install it.
"""

from __future__ import annotations

from .._install import install_hint

INSTALL = (
    f"qkv.distributed needs mpi4py and an MPI library: {install_hint('mpi')} and, on "
    "Debian/Ubuntu, apt-get install -y openmpi-bin libopenmpi-dev; then launch with "
    "mpirun -n 4 python your_script.py"
)


def mpi():
    """The ``mpi4py.MPI`` module, or ModuleNotFoundError saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ModuleNotFoundError(INSTALL, name="mpi4py") from exc
    return MPI


def communicator(comm=None):
    """``comm``, or ``MPI.COMM_WORLD`` when None; TypeError for anything else."""
    if comm is None:
        return mpi().COMM_WORLD
    needed = ("Get_rank", "Get_size", "Isend", "Irecv", "allgather")
    if not all(hasattr(comm, name) for name in needed):
        raise TypeError(
            f"comm must be an mpi4py communicator such as MPI.COMM_WORLD (or None for it), "
            f"got {type(comm).__name__}"
        )
    return comm
