"""Hosts on one machine: Linux network namespaces joined by a private bridge, for MPI over TCP.

    with Hosts(2, rate="1gbit") as hosts:
        run = hosts.run(2, [sys.executable, "-m", "qkv.distributed", "--n", "4096"], timeout=600)

The one launcher of the ring's TCP runs: benchmarks/ring_tcp.py, benchmarks/ring_timeline.py
and tests/test_distributed.py (which imports it from here, as tests/test_gpt.py imports its
torch twin from benchmarks/) — not part of the qkv package, as `qkv ring` never uses it.

Each "host" is a network namespace ``qkv<id>h<i>`` holding one end of a veth pair with the
private address ``10.231.<x>.<i>/24``; the other ends join a bridge ``qkv<id>br`` in the root
namespace at ``10.231.<x>.254`` (where mpirun itself runs and its daemons call back). mpirun
starts one daemon per host through a launch agent that is ``ip netns exec <host> sh -c``
instead of ssh, and the ranks talk over TCP only (``--mca btl tcp,self``: no shared memory)
on that subnet. ``rate`` shapes every host's link with a token bucket (``tc qdisc … tbf``);
``tc … netem`` (delay) is not in this kernel. Needs root (CAP_NET_ADMIN) and iproute2.

Bounded and contained: at most ``MAX_HOSTS`` namespaces per instance; every ``ip``/``tc``
call and every run has a timeout; on exit (error and Ctrl-C included) every process left in
the namespaces is killed and the namespaces, veths and bridge are removed. The subnet is one
no interface on this machine has (chosen under a lock file, so two runs at once never pick the
same): traffic stays inside the namespaces and bridge made here.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

MAX_HOSTS = 8  # namespaces per instance (the tests use 2–4, the benchmarks 2)
SUBNETS = 250  # 10.231.0.0/24 … 10.231.249.0/24

AGENT = """#!/bin/sh
# ssh-like launch agent for mpirun: $1 is the "host" (a network namespace), the rest a command.
# Each host's daemon keeps its session files in a folder of its own, as real hosts each have
# their own /tmp: here the namespaces share one, and daemons of one job racing to make the same
# /tmp/ompi.<hostname>.<uid>/jf.<job> folder failed a run ("mkdir ... File exists").
host=$1; shift
tmp="$(dirname "$0")/tmp-$host"
mkdir -p "$tmp"
export OMPI_MCA_orte_tmpdir_base="$tmp"
exec ip netns exec "$host" sh -c "$*"
"""


# mpirun notices a daemon behind a cut link only through TCP keepalive on its control
# connection: 300 s + 9 × 20 s by default. Probing after 3 s idle, every 1 s, 3 times bounds it.
KEEPALIVE = ["--mca", "oob_tcp_keepalive_time", "3", "--mca", "oob_tcp_keepalive_intvl", "1",
             "--mca", "oob_tcp_keepalive_probes", "3"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20,
                          check=check)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (the failing command and its error), or None."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) not found"
    if shutil.which("mpirun") is None:
        return "mpirun not found: apt-get install openmpi-bin libopenmpi-dev"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    name = f"qkvprobe{os.getpid()}"
    run = _ip("netns", "add", name, check=False)
    if run.returncode:
        return f"`ip netns add {name}` failed: {run.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def _free_subnet() -> int:
    """``x`` of a ``10.231.<x>.0/24`` that no interface on this machine has an address in."""
    used = _ip("-4", "-o", "addr", "show").stdout
    for x in range(SUBNETS):
        if f" 10.231.{x}." not in used:
            return x
    raise RuntimeError(f"no free subnet among 10.231.0–{SUBNETS - 1}.0/24: remove the qkv* "
                       "bridges and namespaces left by killed runs (ip link, ip netns)")


class Hosts:
    """``n`` namespaces on a bridge; a context manager that tears everything down."""

    _made = 0  # instances so far in this process

    def __init__(self, n: int = 2, rate: str | None = None):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_HOSTS:
            raise ValueError(f"Hosts(n): n must be an int from 1 to {MAX_HOSTS} (namespaces "
                             f"to make), got {n!r}")
        self.n, self.rate = n, rate
        # a fresh name per instance: one process never reuses a just-deleted bridge or veth name
        Hosts._made += 1
        ident = (os.getpid() % 10000) * 10 + Hosts._made % 10
        self.prefix = f"qkv{ident}"  # interface names ≤ 15 characters
        self.names = [f"{self.prefix}h{i}" for i in range(1, n + 1)]
        self.bridge = f"{self.prefix}br"
        self.subnet, self.dir = None, None

    def __enter__(self) -> Hosts:
        try:
            self.dir = Path(tempfile.mkdtemp(prefix="qkv-netns-"))
            # One instance at a time picks a subnet and puts it on its bridge, so two runs at
            # once (two test sessions) never share one: the lock is held until the bridge has
            # its address, which is what the next instance's choice looks at.
            with open(Path(tempfile.gettempdir()) / "qkv-netns.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                self.subnet = f"10.231.{_free_subnet()}"
                self._up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _up(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.names, start=1):
            outer, inner = f"{self.prefix}v{i}", f"{self.prefix}p{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", self.bridge)
            _ip("link", "set", outer, "up")
            _ip("-n", ns, "addr", "add", f"{self.subnet}.{i}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            if self.rate:  # shape what each host sends (its egress) and receives (bridge side)
                for args in (["ip", "netns", "exec", ns, "tc"], ["tc"]):
                    dev = inner if len(args) > 1 else outer
                    subprocess.run([*args, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                                    self.rate, "burst", "256kb", "latency", "100ms"],
                                   check=True, capture_output=True, timeout=20)
        agent = self.dir / "agent.sh"
        agent.write_text(AGENT)
        agent.chmod(0o755)
        (self.dir / "hostfile").write_text("".join(f"{h} slots=8\n" for h in self.names))

    def cut(self, host: int) -> None:
        """Take host ``host``'s link down (0-based; rank r runs on host r): a cable pulled."""
        _ip("-n", self.names[host], "link", "set", f"{self.prefix}p{host + 1}", "down")

    def __exit__(self, *exc) -> None:
        for ns in self.names:  # what still runs in a namespace (e.g. behind a cut link): end it
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for i, ns in enumerate(self.names, start=1):
            _ip("netns", "del", ns, check=False)  # takes its veth ends with it
            _ip("link", "del", f"{self.prefix}v{i}", check=False)
        _ip("link", "del", self.bridge, check=False)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def mpirun(self, ranks: int, command: list[str], *, per_host: int = 1) -> list[str]:
        """An mpirun line placing ``per_host`` ranks on each namespace, TCP only."""
        if self.subnet is None:
            raise RuntimeError("Hosts.mpirun: enter the Hosts first (with Hosts(n) as hosts:)")
        net = f"{self.subnet}.0/24"
        cmd = ["mpirun", "-n", str(ranks), "--hostfile", str(self.dir / "hostfile"),
               "--map-by", f"ppr:{per_host}:node", "--bind-to", "none",
               "--mca", "plm_rsh_agent", str(self.dir / "agent.sh"),
               "--mca", "plm_rsh_no_tree_spawn", "1",
               "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", net,
               "--mca", "oob_tcp_if_include", net,
               *KEEPALIVE,
               # A daemon started inside a namespace sometimes segfaulted in hwloc while
               # writing the node's topology into a shared-memory "VM hole"
               # (hwloc_shmem_topology_write, from mca_rtc_hwloc); the ranks do not need that
               # shared copy, so no hole is used.
               "--mca", "rtc_hwloc_vmhole", "none",
               # Daemons stay children of their launch agent instead of daemonizing, so a
               # daemon that dies at launch is an exit mpirun reports. Daemonized, the crash
               # above left mpirun waiting forever for it.
               "--leave-session-attached",
               "-x", "PYTHONPATH", "-x", "QKV_NUM_THREADS=1", "-x", "OMP_NUM_THREADS=1"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        return [*cmd, *command]

    def run(self, ranks: int, command: list[str], *, timeout: float, env: dict | None = None,
            cwd: str | Path | None = None) -> subprocess.CompletedProcess:
        """Run ``command`` on ``ranks`` ranks, one per namespace, and return what it printed.

        ``timeout`` (seconds) is required: past it mpirun is killed and
        ``subprocess.TimeoutExpired`` raised (leaving the ``with`` then ends what still runs in
        the namespaces)."""
        return subprocess.run(self.mpirun(ranks, command), capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=cwd)
