"""Hosts on one machine: Linux network namespaces joined by a private bridge, for MPI over TCP.

    with Hosts(2, rate="1gbit") as hosts:
        subprocess.run(hosts.mpirun(2, [sys.executable, "-m", "qkv.distributed", "--n", "4096"]))

Each "host" is a network namespace ``qkv<id>h<i>`` holding one end of a veth pair with the
private address ``10.231.<x>.<i>/24``; the other ends join a bridge ``qkv<id>br`` in the root
namespace at ``10.231.<x>.254`` (where mpirun itself runs and its daemons call back). mpirun
starts one daemon per host through a launch agent that is ``ip netns exec <host> sh -c``
instead of ssh, and the ranks talk over TCP only (``--mca btl tcp,self``: no shared memory)
on that subnet. ``rate`` shapes every host's link with a token bucket (``tc qdisc … tbf``);
``tc … netem`` (delay) is not in this kernel. Everything is removed on exit, and traffic never
leaves the namespaces and bridge made here. Needs root (CAP_NET_ADMIN) and iproute2.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

AGENT = """#!/bin/sh
# ssh-like launch agent for mpirun: $1 is the "host" (a network namespace), the rest a command
host=$1; shift
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
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    name = f"qkvprobe{os.getpid()}"
    run = _ip("netns", "add", name, check=False)
    if run.returncode:
        return f"`ip netns add {name}` failed: {run.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


class Hosts:
    """``n`` namespaces on a bridge; a context manager that tears everything down."""

    _made = 0  # instances so far in this process

    def __init__(self, n: int = 2, rate: str | None = None):
        self.n, self.rate = n, rate
        # a fresh name per instance: one process never reuses a just-deleted bridge or veth name
        Hosts._made += 1
        ident = (os.getpid() % 10000) * 10 + Hosts._made % 10
        self.prefix = f"qkv{ident}"  # interface names ≤ 15 characters
        self.subnet = f"10.231.{ident % 250}"
        self.names = [f"{self.prefix}h{i}" for i in range(1, n + 1)]
        self.bridge = f"{self.prefix}br"
        self.dir = Path(tempfile.mkdtemp(prefix="qkv-netns-"))

    def __enter__(self) -> Hosts:
        try:
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
        shutil.rmtree(self.dir, ignore_errors=True)

    def mpirun(self, ranks: int, command: list[str], *, per_host: int = 1) -> list[str]:
        """An mpirun line placing ``per_host`` ranks on each namespace, TCP only."""
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
