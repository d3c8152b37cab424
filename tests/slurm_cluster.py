"""A throwaway multi-node Slurm cluster on this one machine, for the cross-process tests.

`SlurmCluster(nodes=2).start()` builds, in a fresh temporary directory and without systemd:

- munged with its own key, socket, pid, log and seed files;
- a Linux bridge on the host with an address from a free 10.X.Y.0/24 and, per compute node, a
  network namespace joined to the bridge by a veth pair, with its own address;
- slurmctld on the host (listening on the bridge address), and one slurmd per node, each in
  its node's network namespace and in its own UTS and mount namespaces: `hostname` says the
  node's name, and /etc/hosts (bind-mounted, private to the node) resolves every node name, so
  a job can use `scontrol show hostnames` output as MASTER_ADDR;
- slurm.conf with munge authentication through that socket, proctrack/linuxproc and task/none
  (no cgroups), select/cons_tres, ReturnToService=2, short timeouts, no accounting database,
  and job completion records in a text file (jobcomp/filetxt).

Clients (sbatch, srun, squeue, scontrol, scancel) need `cluster.env` (SLURM_CONF).

`take_down(node)` kills every process in the node's network namespace with SIGKILL (slurmd,
slurmstepd and the job's ranks: what a power loss looks like to the controller), or with
`how="scontrol"` sets the node DOWN through scontrol. `restore(node)` brings it back.
`stop()` kills everything the cluster started and removes the namespaces, the bridge and the
directory. A guardian process does the same if this process dies without calling stop().

Needs root (namespaces, bridge, mounts) and Debian's slurm-wlm and munge packages
(scripts/install-deps). Debian's slurmd is built with --enable-multiple-slurmd, but nodes
sharing one address, hostname and process table would not look like separate machines;
namespaces give each node its own (docs/slurm-test-cluster.md).
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import time
from pathlib import Path

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20
REQUIRED_TOOLS = ("munged", "mungekey", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun",
                  "squeue", "scontrol", "scancel", "ip", "unshare", "mount")

# Kills every process of each network namespace, then removes namespaces, bridge and directory.
_CLEANUP = r"""
dir=$1; bridge=$2; shift 2
for ns in "$@"; do
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
done
for f in "$dir"/run/*.pid; do
  [ -f "$f" ] && pid=$(cat "$f") && [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
done
for ns in "$@"; do ip netns del "$ns" 2>/dev/null; done
ip link del "$bridge" 2>/dev/null
rm -rf "$dir"
"""

# Waits for end of file on a pipe only the test process holds, then cleans up.
_GUARDIAN = r"""
fd=$1; shift
while read -r -u "$fd" _; do :; done
""" + _CLEANUP


class SlurmClusterError(RuntimeError):
    pass


_CLUSTER_SERIAL = itertools.count()

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    return text if len(text) <= limit else "..." + text[-limit:]


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if check and r.returncode != 0:
        raise SlurmClusterError(f"{' '.join(argv)} exited with {r.returncode}: "
                                f"{r.stderr.strip() or r.stdout.strip()}")
    return r


def check_prerequisites() -> None:
    """Raises SlurmClusterError naming what is missing; the tests fail (not skip) on it."""
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None and
               not os.access(f"/usr/sbin/{t}", os.X_OK)]
    if missing:
        raise SlurmClusterError(
            f"the Slurm test cluster needs {', '.join(missing)}: run scripts/install-deps "
            "(Debian packages slurm-wlm, slurmctld, slurmd, slurm-client, munge, iproute2)")
    if os.geteuid() != 0:
        raise SlurmClusterError("the Slurm test cluster needs root (network namespaces, a bridge, "
                                "bind mounts); run the tests as root as CI does")


def _pick_subnet() -> ipaddress.IPv4Network:
    used = []
    for line in _sh("ip", "-4", "-o", "addr", "show").stdout.splitlines():
        m = re.search(r"inet (\S+)", line)
        if m:
            used.append(ipaddress.ip_network(m.group(1), strict=False))
    for line in _sh("ip", "-4", "route", "show").stdout.splitlines():
        tok = line.split()[0] if line.split() else ""
        if tok and tok != "default":
            try:
                used.append(ipaddress.ip_network(tok, strict=False))
            except ValueError:
                pass
    start = os.getpid() % 250
    for i in range(250 * 4):
        x, y = 200 + (i // 250) % 50, (start + i) % 250
        net = ipaddress.ip_network(f"10.{x}.{y}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise SlurmClusterError("no free 10.x.y.0/24 subnet for the test cluster's bridge")


class SlurmCluster:
    def __init__(self, nodes: int = 2, cpus_per_node: int | None = None,
                 real_memory_mb: int = 1000, extra_conf: str = "") -> None:
        if nodes < 1:
            raise ValueError("nodes must be >= 1")
        self.node_count = nodes
        self.cpus_per_node = cpus_per_node or os.cpu_count() or 1
        self.real_memory_mb = real_memory_mb
        self.extra_conf = extra_conf
        # Unique per process and per cluster (several may run at once in one test process);
        # interface names must stay within 15 characters.
        tag = f"{os.getpid() % 100000}{string.ascii_lowercase[next(_CLUSTER_SERIAL) % 26]}"
        self.node_names = [f"node{i + 1}" for i in range(nodes)]
        self.netns = {n: f"ty{tag}-{n}" for n in self.node_names}
        self.bridge = f"tyb{tag}"
        self._veth = {n: (f"tyv{tag}h{i + 1}", f"tyv{tag}n{i + 1}")
                      for i, n in enumerate(self.node_names)}
        self.dir: Path | None = None
        self.conf_path: Path | None = None
        self.partition = "main"
        self.controller_host = socket.gethostname().split(".")[0]
        self.controller_addr = ""
        self.node_addrs: dict[str, str] = {}
        self.ctld_port = 0
        self.slurmd_port = 0
        self._munged: subprocess.Popen | None = None
        self._ctld: subprocess.Popen | None = None
        self._slurmd: dict[str, subprocess.Popen] = {}
        self._guardian: subprocess.Popen | None = None
        self._guard_fd: int | None = None
        self._netns_made: list[str] = []

    # --- lifecycle

    def start(self) -> "SlurmCluster":
        check_prerequisites()
        self.dir = Path(tempfile.mkdtemp(prefix="trainyard-slurm-"))
        os.chmod(self.dir, 0o755)  # job steps read the config; munge checks parent permissions
        for sub in ("etc", "run", "log", "state", "spool", "munge", "shared"):
            (self.dir / sub).mkdir()
        os.chmod(self.dir / "munge", 0o711)  # munged wants its socket's directory traversable
        os.chmod(self.dir / "shared", 0o777)
        self._start_guardian()
        try:
            self._start_munge()
            self._make_network()
            self._write_config()
            self._start_slurmctld()
            for n in self.node_names:
                self._start_slurmd(n)
            self.wait_for(self._all_nodes_idle, START_TIMEOUT_S, "all nodes idle")
        except BaseException:
            logs = self.logs_text()
            self.stop()
            raise SlurmClusterError(f"the Slurm test cluster did not start:\n{logs}")
        return self

    def stop(self) -> None:
        for n in list(self._slurmd):
            self._kill_node_processes(n)
        for proc in (self._ctld, self._munged):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._ctld = self._munged = None
        for p in self._slurmd.values():
            try:
                p.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self._slurmd.clear()
        if self.dir is not None:
            subprocess.run(["bash", "-c", _CLEANUP, "cleanup", str(self.dir), self.bridge,
                            *self.netns.values()], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=STOP_TIMEOUT_S)
        if self._guard_fd is not None:
            os.close(self._guard_fd)
            self._guard_fd = None
            if self._guardian is not None:
                self._guardian.wait(timeout=STOP_TIMEOUT_S)
                self._guardian = None
        self.dir = None

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- what clients need

    @property
    def env(self) -> dict[str, str]:
        """The environment for sbatch/srun/squeue/scontrol/scancel: os.environ + SLURM_CONF."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf_path)
        return env

    @property
    def shared_dir(self) -> Path:
        """A directory every node sees at the same path (the nodes share this filesystem)."""
        assert self.dir is not None
        return self.dir / "shared"

    def run(self, *argv: str, check: bool = True, timeout: float = 60,
            **kwargs) -> subprocess.CompletedProcess:
        r = subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=timeout, **kwargs)
        if check and r.returncode != 0:
            raise SlurmClusterError(f"{' '.join(argv)} exited with {r.returncode}:\n"
                                    f"{r.stdout}\n{r.stderr}")
        return r

    def job(self, job_id: str | int) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict (JobState, Reason, ExitCode, NodeList, ...);
        {} when the controller no longer knows the job."""
        r = self.run("scontrol", "show", "job", "-o", str(job_id), check=False)
        if r.returncode != 0:
            return {}
        return parse_scontrol_record(r.stdout)

    def node(self, name: str) -> dict[str, str]:
        return parse_scontrol_record(self.run("scontrol", "show", "node", "-o", name).stdout)

    def wait_for(self, predicate, timeout: float, what: str, interval: float = 0.1):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise SlurmClusterError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)

    def wait_job_state(self, job_id, states: set[str], timeout: float = 60) -> dict[str, str]:
        def reached():
            j = self.job(job_id)
            return j if j.get("JobState") in states else None
        return self.wait_for(reached, timeout, f"job {job_id} in {sorted(states)}")

    # --- failures

    def take_down(self, node: str, how: str = "kill") -> None:
        """how="kill": SIGKILL every process in the node's network namespace (slurmd,
        slurmstepd, ranks); the controller marks the node DOWN after SlurmdTimeout.
        how="scontrol": `scontrol update nodename=NODE state=down`; the controller kills the
        node's jobs at once and they end as NODE_FAIL."""
        if how == "kill":
            self._kill_node_processes(node)
            self._slurmd.pop(node, None)
        elif how == "scontrol":
            self.run("scontrol", "update", f"nodename={node}", "state=down",
                     "reason=trainyard-test-take-down")
        else:
            raise ValueError(f"take_down: how must be kill or scontrol (got {how!r})")

    def restore(self, node: str, timeout: float = START_TIMEOUT_S) -> None:
        """Brings a node back to IDLE (restarting its slurmd if it was killed)."""
        p = self._slurmd.get(node)
        if p is None or p.poll() is not None:
            self._start_slurmd(node)
        state = self.node(node).get("State", "")
        if "DOWN" in state or "DRAIN" in state:
            self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)

        def idle():
            s = self.node(node).get("State", "")
            return s.startswith("IDLE") and "DRAIN" not in s and "NOT_RESPONDING" not in s
        self.wait_for(idle, timeout, f"node {node} idle")

    def logs_text(self) -> str:
        if self.dir is None:
            return ""
        parts = []
        for f in sorted((self.dir / "log").glob("*.log")):
            parts.append(f"--- {f.name}\n{_tail(f)}")
        return "\n".join(parts)

    # --- internals

    def _start_guardian(self) -> None:
        read_fd, write_fd = os.pipe()
        os.set_inheritable(read_fd, True)
        self._guardian = subprocess.Popen(
            ["bash", "-c", _GUARDIAN, "guardian",
             str(read_fd), str(self.dir), self.bridge, *self.netns.values()],
            pass_fds=(read_fd,), stdin=subprocess.DEVNULL, start_new_session=True)
        os.close(read_fd)
        self._guard_fd = write_fd

    def _spawn(self, argv: list[str], log_name: str) -> subprocess.Popen:
        assert self.dir is not None
        out = open(self.dir / "log" / log_name, "ab")
        try:
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=self.env if self.conf_path else None)
        finally:
            out.close()

    def _start_munge(self) -> None:
        assert self.dir is not None
        m = self.dir / "munge"
        _sh("mungekey", "--create", f"--keyfile={m / 'munge.key'}", "--force")
        self.munge_socket = m / "munge.socket"
        self._munged = self._spawn(
            ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
             f"--key-file={m / 'munge.key'}", f"--pid-file={self.dir / 'run' / 'munged.pid'}",
             f"--log-file={self.dir / 'log' / 'munged.log'}",
             f"--seed-file={m / 'munged.seed'}"], "munged.out.log")
        self.wait_for(lambda: self.munge_socket.exists() or self._munged.poll() is not None,
                      START_TIMEOUT_S, "munged's socket")
        if self._munged.poll() is not None:
            raise SlurmClusterError(f"munged exited with {self._munged.returncode}")

    def _make_network(self) -> None:
        net = _pick_subnet()
        hosts = list(net.hosts())
        self.controller_addr = str(hosts[0])
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"{self.controller_addr}/{net.prefixlen}", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        for i, n in enumerate(self.node_names):
            ns = self.netns[n]
            host_if, node_if = self._veth[n]
            addr = str(hosts[10 + i])
            self.node_addrs[n] = addr
            _sh("ip", "netns", "add", ns)
            self._netns_made.append(ns)
            _sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if)
            _sh("ip", "link", "set", node_if, "netns", ns)
            _sh("ip", "link", "set", host_if, "master", self.bridge)
            _sh("ip", "link", "set", host_if, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{addr}/{net.prefixlen}", "dev", node_if)
            _sh("ip", "-n", ns, "link", "set", node_if, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
        # Each node's private /etc/hosts: the system's plus the cluster's names.
        assert self.dir is not None
        base = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
        lines = [f"{self.controller_addr} {self.controller_host}-ctl"]
        lines += [f"{self.node_addrs[n]} {n}" for n in self.node_names]
        (self.dir / "etc" / "hosts").write_text(base.rstrip("\n") + "\n" + "\n".join(lines) + "\n")

    def _write_config(self) -> None:
        assert self.dir is not None
        d = self.dir
        self.ctld_port = _free_port()
        self.slurmd_port = _free_port()
        nodes = ",".join(self.node_names)
        node_lines = "\n".join(
            f"NodeName={n} NodeAddr={self.node_addrs[n]} NodeHostname={n} "
            f"CPUs={self.cpus_per_node} RealMemory={self.real_memory_mb} State=UNKNOWN"
            for n in self.node_names)
        conf = f"""\
# Written by tests/slurm_cluster.py; lives only as long as the test cluster.
ClusterName=trainyard-test
SlurmctldHost={self.controller_host}({self.controller_addr})
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}/%n
SlurmctldPidFile={d / 'run'}/slurmctld.pid
SlurmdPidFile={d / 'run'}/slurmd-%n.pid
SlurmctldLogFile={d / 'log'}/slurmctld.log
SlurmdLogFile={d / 'log'}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={d / 'log'}/jobcomp.txt
PropagateResourceLimits=NONE
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=6
MessageTimeout=5
KillWait=2
InactiveLimit=0
MinJobAge=300
TCPTimeout=3
{node_lines}
PartitionName={self.partition} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP
{self.extra_conf}
"""
        self.conf_path = d / "etc" / "slurm.conf"
        self.conf_path.write_text(conf)
        # slurmd 22.05 always loads a cgroup plugin, even with proctrack/linuxproc and task/none.
        # Autodetect would pick cgroup/v2 on a unified host, which needs systemd (dbus); and in a
        # network namespace entered with `ip netns exec`, /sys is a fresh sysfs with no cgroup
        # mount at all. cgroup/v1 under an empty mount point of our own initializes without
        # touching the host's cgroups, and nothing configured here asks it to create any.
        (d / "cgroup").mkdir(exist_ok=True)
        (d / "etc" / "cgroup.conf").write_text(
            f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={d / 'cgroup'}\n")

    def _start_slurmctld(self) -> None:
        self._ctld = self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf_path)],
                                 "slurmctld.out.log")

        def up():
            if self._ctld.poll() is not None:
                raise SlurmClusterError(f"slurmctld exited with {self._ctld.returncode}")
            return self.run("scontrol", "ping", check=False).stdout.find("is UP") >= 0
        self.wait_for(up, START_TIMEOUT_S, "slurmctld to answer scontrol ping", interval=0.2)

    def _start_slurmd(self, node: str) -> None:
        assert self.dir is not None
        (self.dir / "spool" / node).mkdir(exist_ok=True)
        script = (f'hostname {node} && mount --bind "$1" /etc/hosts && '
                  f'exec slurmd -D -N {node} -f "$2"')
        self._slurmd[node] = self._spawn(
            ["ip", "netns", "exec", self.netns[node], "unshare", "--uts", "--mount",
             "--propagation", "private", "sh", "-c", script, "slurmd-start",
             str(self.dir / "etc" / "hosts"), str(self.conf_path)],
            f"slurmd-{node}.out.log")

    def _kill_node_processes(self, node: str) -> None:
        pids = _sh("ip", "netns", "pids", self.netns[node], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        p = self._slurmd.get(node)
        if p is not None:
            try:
                p.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass

    def _all_nodes_idle(self) -> bool:
        for n, p in self._slurmd.items():
            if p.poll() is not None:
                raise SlurmClusterError(f"slurmd of {n} exited with {p.returncode}")
        r = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        return len(states) == self.node_count and all(s == "idle" for s in states.values())


def parse_scontrol_record(text: str) -> dict[str, str]:
    """Parses one `scontrol show ... -o` line: space-separated Key=Value pairs, where a value
    may itself contain spaces only in known trailing keys (Command, WorkDir, Reason...).
    Keys are matched as words followed by '='; everything up to the next such key is the
    value."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    out: dict[str, str] = {}
    # A key starts at the beginning or after a space, and is [A-Za-z:/_]+ followed by '='.
    matches = list(re.finditer(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_:/]*)=", line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def _serve(argv: list[str]) -> int:
    """`python3 tests/slurm_cluster.py [--nodes N]`: starts a cluster, prints one JSON line
    (slurm_conf, shared_dir, nodes, node_addrs), and stops it when stdin reaches end of file.
    For tests in other languages (the C++ Slurm executor's)."""
    import argparse
    import json
    import sys
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args(argv)
    cluster = SlurmCluster(nodes=args.nodes)
    try:
        cluster.start()
    except SlurmClusterError as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 1
    try:
        print(json.dumps({"slurm_conf": str(cluster.conf_path),
                          "shared_dir": str(cluster.shared_dir),
                          "nodes": cluster.node_names,
                          "node_addrs": cluster.node_addrs}), flush=True)
        for _ in sys.stdin:
            pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(_serve(sys.argv[1:]))
