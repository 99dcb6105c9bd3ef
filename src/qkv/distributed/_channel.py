"""The ring's communication, made safe against failures: no hang, no freed buffer, no silent result.

Three dangers of a collective algorithm built from point-to-point messages, and what this module
does about each:

* **One rank fails alone** (bad input, a mask that raises for its rows only, memory): the others
  would wait forever for its messages, and its own pending requests would point into buffers
  Python is about to free (a segfault when MPI later writes there). So a failing rank tells every
  other rank on an *abort line* (a message with its error, tag ``TAG_ABORT``), cancels what it
  can, and keeps every request that has not completed alive, with its buffer, in ``_ORPHANS``
  for the life of the process. Waits poll their requests *and* the abort line, so the others stop
  at their next wait. Every call ends with an agreement (a non-blocking all-reduce of an
  ok/failed flag): either every rank returns its result or every rank raises.
* **Stray messages**: a failed call leaves messages in flight. Every call runs on its own
  duplicate of the communicator (``comm.Dup()``), so nothing of a failed call can ever be
  matched by a later one.
* **A rank dies or its link is cut** (SIGKILL, a host down): no message will ever come. Every
  wait has a deadline (``timeout`` seconds plus twice the longest compute step seen so far, so a
  slow neighbour is not taken for a dead one); past it the rank calls ``comm.Abort`` with a
  message naming the rank it waited for, which ends the whole job with a non-zero exit code.
  (OpenMPI's ``mpirun`` also ends the job by itself when a rank is killed.)
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import fields, is_dataclass

import numpy as np

TAG_ABORT = 73
MESSAGE_BYTES = 4096  # an error message on the abort line or in the agreement, utf-8
DEFAULT_TIMEOUT = 60.0  # seconds; QKV_RING_TIMEOUT overrides
POLL_EVERY = 0.0002  # seconds between MPI_Testall calls of Channel.progressing's thread

# Requests that never completed after a failure, with the buffers MPI may still write into:
# kept alive for the life of the process (freeing them would let MPI write into freed memory).
_ORPHANS: list = []


class RingError(RuntimeError):
    """Ring attention failed on another rank; this rank stopped too (the message says why)."""


def default_timeout(timeout) -> float:
    """``timeout`` checked, or ``$QKV_RING_TIMEOUT``, or 60 s."""
    if timeout is None:
        env = os.environ.get("QKV_RING_TIMEOUT")
        try:
            timeout = float(env) if env else DEFAULT_TIMEOUT
        except ValueError:
            raise ValueError(f"QKV_RING_TIMEOUT must be a number of seconds, got {env!r}") from None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


# --------------------------------------------------------------------------------------------
# What must agree across ranks
# --------------------------------------------------------------------------------------------
def fingerprint(obj) -> str:
    """A digest of an argument's *value*, equal on two ranks iff they passed the same thing.

    Masks and biases are frozen dataclasses holding numbers, arrays and callables: walk their
    fields. A callable is identified by its module, name and compiled code (two lambdas with the
    same text on two ranks agree); arrays by dtype, shape and bytes.
    """
    h = hashlib.sha256()

    def walk(x, depth=0):
        if depth > 50:
            h.update(b"deep")
        elif x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
            h.update(repr((type(x).__name__, x)).encode())
        elif isinstance(x, np.generic):
            walk(x.item(), depth + 1)
        elif isinstance(x, np.ndarray):
            h.update(f"ndarray{x.dtype.str}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        elif isinstance(x, (tuple, list)):
            h.update(f"{type(x).__name__}{len(x)}".encode())
            for item in x:
                walk(item, depth + 1)
        elif isinstance(x, dict):
            h.update(f"dict{len(x)}".encode())
            for key in sorted(x, key=repr):
                walk(key, depth + 1)
                walk(x[key], depth + 1)
        elif is_dataclass(x):
            h.update(f"{type(x).__module__}.{type(x).__qualname__}".encode())
            for f in fields(x):
                h.update(f.name.encode())
                walk(getattr(x, f.name), depth + 1)
        elif callable(x):
            code = getattr(x, "__code__", None)
            h.update(f"{getattr(x, '__module__', '')}.{getattr(x, '__qualname__', '')}".encode())
            if code is not None:
                h.update(code.co_code)
                walk(tuple(c for c in code.co_consts if not hasattr(c, "co_code")), depth + 1)
                walk([cell.cell_contents for cell in (x.__closure__ or ())], depth + 1)
        else:
            h.update(f"{type(x).__module__}.{type(x).__qualname__}".encode())
            try:
                h.update(pickle.dumps(x))
            except Exception:  # unpicklable and unknown: its repr is the best we have
                h.update(repr(x).encode())

    walk(obj)
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Waiting with a deadline and an ear on the abort line
# --------------------------------------------------------------------------------------------
def _poll(done, deadline: float, comm, what: str) -> None:
    """Call ``done()`` until it is True; past ``deadline`` abort the whole job with a message.

    Sleeps grow from 0 to 1 ms so that a rank waiting on an oversubscribed machine leaves the
    core to the rank computing (MPI's own Wait spins).
    """
    pause = 0.0
    while not done():
        if time.monotonic() > deadline:
            rank = comm.Get_rank()
            # A wait on one rank names it; a collective cannot tell which rank is missing.
            who = "that rank is" if "from rank" in what else "one of them is"
            print(f"qkv.distributed: rank {rank} waited past its deadline for {what}: {who} "
                  f"dead, stopped or cut off. Aborting the job (QKV_RING_TIMEOUT / "
                  f"timeout= sets the deadline).", file=sys.stderr, flush=True)
            comm.Abort(14)
        time.sleep(pause)
        pause = min(0.001, pause + 0.0001)


def _encode(obj) -> np.ndarray:
    data = pickle.dumps(obj)
    if len(data) > MESSAGE_BYTES - 4:  # an error message too long: keep its beginning
        data = pickle.dumps(("truncated", repr(obj)[: MESSAGE_BYTES // 2]))
    buf = np.zeros(MESSAGE_BYTES, np.uint8)
    buf[:4] = np.frombuffer(np.uint32(len(data)).tobytes(), np.uint8)
    buf[4:4 + len(data)] = np.frombuffer(data, np.uint8)
    return buf


def _decode(buf: np.ndarray):
    n = int(np.frombuffer(buf[:4].tobytes(), np.uint32)[0])
    return pickle.loads(buf[4:4 + n].tobytes())


def allgather(comm, obj, timeout: float) -> list:
    """``comm.allgather(obj)`` for small objects, bounded in time (Iallgather, polled)."""
    send = _encode(obj)
    recv = np.empty(comm.Get_size() * MESSAGE_BYTES, np.uint8)
    req = comm.Iallgather(send, recv)
    _poll(req.Test, time.monotonic() + timeout, comm, "the other ranks to join ring attention")
    return [_decode(part) for part in recv.reshape(comm.Get_size(), MESSAGE_BYTES)]


class Aborted(Exception):
    """Raised inside a wait when another rank has announced a failure on the abort line."""

    def __init__(self, rank: int, message: str):
        super().__init__(f"ring attention failed on rank {rank}: {message}")
        self.rank, self.message = rank, message


class Channel:
    """Point-to-point for one ring call, on a private duplicate of ``comm``.

    ``isend``/``irecv`` track their requests and buffers; ``wait`` polls them and the abort line
    with a deadline; ``finish`` is the closing agreement.
    """

    def __init__(self, comm, timeout: float):
        from ._mpi import mpi

        self.MPI = mpi()
        self.comm = comm.Dup()  # collective: a failed call's strays can never match a later call
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.timeout = timeout
        self.slowest = 0.0  # longest compute step seen on this rank, s
        self.pending: list = []  # (request, buffer) not yet known complete
        self.abort_buf = np.zeros(MESSAGE_BYTES, np.uint8)
        self.abort_req = self.comm.Irecv(self.abort_buf, source=self.MPI.ANY_SOURCE,
                                         tag=TAG_ABORT)
        self.aborted = None  # the (rank, message) announced on the abort line
        self.polled = 0  # blocks of compute during which a thread moved the transfers
        self._poller, self._lock, self._wake = None, threading.Lock(), threading.Event()
        self._polling, self._closing, self._poll_error = None, False, []

    def computed(self, seconds: float) -> None:
        self.slowest = max(self.slowest, seconds)

    def deadline(self) -> float:
        return time.monotonic() + self.timeout + 2 * self.slowest

    def isend(self, buf, dest: int, tag: int):
        req = self.comm.Isend(buf, dest=dest, tag=tag)
        self.pending.append((req, buf))
        return req

    def irecv(self, buf, source: int, tag: int):
        req = self.comm.Irecv(buf, source=source, tag=tag)
        self.pending.append((req, buf))
        return req

    @property
    def can_progress(self) -> bool:
        """Whether a second thread may call MPI (``MPI_THREAD_SERIALIZED`` or better)."""
        return self.MPI.Query_thread() >= self.MPI.THREAD_SERIALIZED

    @contextmanager
    def progressing(self):
        """Move this call's pending transfers while the block computes: a thread calls
        ``MPI_Testall`` on them every ``POLL_EVERY`` seconds until they complete or the block
        ends. The ring computes every step inside it, forward and backward (ring.py,
        ``_computing``): the one way its transfers progress.

        Why a thread: over TCP, OpenMPI moves a large message (rendezvous: handshake, then
        fragments through the socket buffers) only inside MPI calls, and an engine call (a ring
        step: seconds at large shards) makes none; the compute releases the GIL in its GEMMs and
        compiled steps, so the thread gets to run. (The forward used to call ``MPI_Testall``
        itself between blocks of queries instead; beside the thread, in one interleaved run over
        1 Gbit/s TCP, it waited the same per transfer.) Thread safety: the block must make no
        MPI call itself, and the thread tests only under ``self._lock``, which leaving the block
        takes — so the thread is the process's only MPI caller while it runs, which
        ``MPI_THREAD_SERIALIZED`` allows (mpi4py asks for ``MPI_THREAD_MULTIPLE``; OpenMPI 4
        grants it). One thread serves the whole call, parked between blocks: a thread started
        and joined per block cost 1–16 ms per step on the loaded 2-core machine (the caller
        waiting to be scheduled again after ``start``/``join``), as much as a small step
        computes. Below ``MPI_THREAD_SERIALIZED`` (``mpi4py.rc.thread_level`` set lower) no
        thread runs and the transfers move at the next wait; ``polled`` counts the blocks a
        thread served. An MPI error in the thread is raised when the block ends.
        """
        reqs = [r for r, _ in self.pending]
        if not reqs or not self.can_progress:
            yield
            return
        if self._poller is None:
            self._poller = threading.Thread(target=self._poll_loop, name="qkv-ring-progress",
                                            daemon=True)
            self._poller.start()
        with self._lock:
            self._polling = reqs
        self._wake.set()
        try:
            yield
        finally:
            with self._lock:  # waits only for a Testall under way (microseconds)
                self._polling = None
                self._wake.clear()
            self.polled += 1
        if self._poll_error:
            raise self._poll_error.pop()

    def _poll_loop(self) -> None:
        while True:
            self._wake.wait()
            with self._lock:
                if self._closing:
                    return
                try:
                    if self._polling is not None and self.MPI.Request.Testall(self._polling):
                        self._polling = None  # all complete: park until the next block
                        self._wake.clear()
                except Exception as exc:  # raised in the caller's thread (progressing)
                    self._poll_error.append(exc)
                    self._polling = None
                    self._wake.clear()
            time.sleep(POLL_EVERY)

    def _stop_poller(self) -> None:
        if self._poller is not None:
            with self._lock:
                self._closing = True
                self._wake.set()
            self._poller.join()
            self._poller = None

    def _heard_abort(self) -> bool:
        if self.aborted is None and self.abort_req.Test():
            self.aborted = _decode(self.abort_buf)
        return self.aborted is not None

    def wait(self, reqs, what: str) -> None:
        """Wait for ``reqs``; raise :class:`Aborted` as soon as another rank announces failure."""
        reqs = [r for r in reqs if r is not None]

        def done():
            if self._heard_abort():
                raise Aborted(*self.aborted)
            return self.MPI.Request.Testall(reqs)

        _poll(done, self.deadline(), self.comm, what)
        self.pending = [(r, b) for r, b in self.pending if r not in reqs]

    def fail(self, exc: BaseException) -> None:
        """This rank failed: announce it to every other rank (unless it heard it from one)."""
        if self.aborted is not None:
            return
        message = _encode((self.rank, f"{type(exc).__name__}: {exc}"))
        for dest in range(self.size):
            if dest != self.rank:
                self.pending.append((self.comm.Isend(message, dest=dest, tag=TAG_ABORT),
                                     message))

    def finish(self, failed: bool) -> None:
        """Closing agreement: every rank learns whether any rank failed.

        A rank that failed has already sent its message on the abort line, so a rank that
        learns of a failure here can read who failed and why.
        """
        flag = np.array([1 if failed else 0], np.int32)
        result = np.zeros(1, np.int32)
        req = self.comm.Iallreduce(flag, result, op=self.MPI.MAX)
        _poll(req.Test, self.deadline(), self.comm, "the other ranks to finish the ring")
        try:
            if result[0] and not failed:
                _poll(self._heard_abort, self.deadline(), self.comm,
                      "the failing rank's error message")
                raise RingError(Aborted(*self.aborted).args[0])
        finally:
            self.close(clean=not result[0])

    def close(self, clean: bool) -> None:
        self._stop_poller()
        if clean:  # everything completed: the ordinary path
            self.abort_req.Cancel()
            self.abort_req.Wait()
            self.comm.Free()
            return
        # After a failure: cancel receives still posted; what does not complete is orphaned.
        for req, _ in self.pending:
            try:
                if not req.Test():
                    req.Cancel()
            except Exception:  # a request MPI already released
                pass
        self.pending = [(r, b) for r, b in self.pending if not _completes(r)]
        if not self.abort_req.Test():
            self.abort_req.Cancel()
            self.pending.append((self.abort_req, self.abort_buf))
        _ORPHANS.extend(self.pending)
        _ORPHANS.append(self.comm)  # not freed: requests may still refer to it
        self.pending = []


def _completes(req, tries: int = 20) -> bool:
    """Whether a (possibly cancelled) request completes within a few milliseconds."""
    for _ in range(tries):
        if req.Test():
            return True
        time.sleep(0.0005)
    return False
