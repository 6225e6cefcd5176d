"""A pytest plugin that runs kazoo's own tests (kazoo/tests of kazoo 2.11.0's source
distribution) against servers this file starts, in place of kazoo.testing's cluster.

kazoo's tests reach their servers only through ``kazoo.testing.harness.
get_global_cluster()``: its members' ``address``, ``secure_address`` and ``host``,
``run()`` and ``stop()`` of one member (kill one, start it again on the same
address with its data), and the cluster's ``start()``, ``terminate()`` (after every
test class: stop all and forget their data) and ``get_ssl_client_configuration()``.
This plugin replaces that function with one that returns a ``Cluster`` of

- ``concord`` members (the default, ``KAZOO_SHIM_BACKEND=concord``): the binary
  $CONCORD_BIN (target/debug/concord of the repository by default) with
  ``--zookeeper-addr 127.0.0.1:0``, as sdk-python/tests/conftest.py starts servers (a
  fresh data folder, a 50 ms tick); three voters by default; or
- ``zookeeper`` members: Debian's ZooKeeper (/usr/share/java/zookeeper.jar), configured
  as kazoo's own harness configures it, for the baseline.

KAZOO_SHIM_SIZE sets the number of members (3, as kazoo's harness). Every process
started here is killed at exit, whatever happened (atexit, pytest_unconfigure, and the
runner kills the process group). With KAZOO_SHIM_RESULTS set, each test's outcome is
written there as JSON (kazoo_suite.py reads it).
"""

from __future__ import annotations

import atexit
import datetime
import itertools
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[2]
CONCORD_BIN = Path(os.environ.get("CONCORD_BIN", REPO / "target" / "debug" / "concord"))
# Debian's zookeeper.jar names most of its dependencies in its manifest, not the parts
# of Netty its Netty connection factory (which secureClientPort needs) loads, nor a
# logger: slf4j-simple writes ZooKeeper's log to stderr, into the member's log file.
ZOOKEEPER_CLASSPATH = os.environ.get(
    "KAZOO_SHIM_ZOOKEEPER_CLASSPATH",
    ":".join(
        f"/usr/share/java/{jar}.jar"
        for jar in (
            "zookeeper", "netty-codec", "netty-resolver", "netty-transport-native-unix-common",
            "slf4j-simple",
        )
    ),
)
BACKEND = os.environ.get("KAZOO_SHIM_BACKEND", "concord")
SIZE = int(os.environ.get("KAZOO_SHIM_SIZE", "3"))
#: The longest one member may take to answer a ZooKeeper client after its start.
START_TIMEOUT_S = 60.0
#: The longest a stopped member may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0

#: After this many failed cluster starts in a row, start() fails at once (a server
#: that cannot start must not cost every test a minute).
FAILED_STARTS_MAX = 3
_FAILED_STARTS = 0

#: Every member ever made here, so that exit stops them all.
_MEMBERS: list["Member"] = []
#: Other folders made here, removed at exit.
_FOLDERS: list[Path] = []

_FIRST_PORT, _PORT_COUNT = 20_000, 12_000
_next_port = itertools.count(random.randrange(_PORT_COUNT))


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now and no earlier call returned, below
    the kernel's ephemeral range (as sdk-python/tests/conftest.py free_port)."""
    for _ in range(_PORT_COUNT):
        port = _FIRST_PORT + next(_next_port) % _PORT_COUNT
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def _answers(address: str, timeout_s: float) -> bool:
    """Whether a ZooKeeper client connects to ``address`` within ``timeout_s`` and
    reads ``/`` there (kazoo's client: the suite's own, so it proves the same)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=address, timeout=timeout_s, connection_retry={"max_tries": 0})
    try:
        client.start(timeout=timeout_s)
        client.exists("/")
        return True
    except Exception:
        return False
    finally:
        try:
            client.stop()
            client.close()
        except Exception:
            pass


class Member:
    """One server of the cluster, with kazoo's ManagedZooKeeper's interface."""

    host = "127.0.0.1"

    def __init__(self, index: int) -> None:
        self.index = index
        self.server_id = index + 1
        self.working_path = Path(tempfile.mkdtemp(prefix=f"kazoo-shim-{BACKEND}-{self.server_id}-"))
        self.log_path = self.working_path / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        #: host:port of the ZooKeeper-protocol port ("" until first bound).
        self.zk_addr = ""
        #: host:port of the TLS ZooKeeper port ("" when there is none).
        self.secure_addr = ""
        _MEMBERS.append(self)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def address(self) -> str:
        return self.zk_addr

    @property
    def secure_address(self) -> str:
        return self.secure_addr or self.zk_addr

    @property
    def client_port(self) -> int:
        return int(self.zk_addr.rsplit(":", 1)[1])

    def _spawn(self, args: list[str], stdout: int) -> None:
        self.working_path.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        log.write(f"\n==== {datetime.datetime.now().isoformat()} {' '.join(args)}\n".encode())
        log.flush()
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=stdout, stderr=log)
        log.close()

    def stop(self) -> None:
        """Ends the process (SIGTERM, then SIGKILL after STOP_TIMEOUT_S), keeping its
        data and addresses, so that run() starts it again as it was."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
        self.process = None

    def reset(self) -> None:
        """Stops it and forgets its data (its addresses stay)."""
        self.stop()
        shutil.rmtree(self.working_path / "data", ignore_errors=True)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.working_path, ignore_errors=True)

    def get_logs(self, num_lines: int = 100) -> list[str]:
        if not self.log_path.exists():
            return []
        return self.log_path.read_text(errors="replace").splitlines(keepends=True)[-num_lines:]

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"server {self.server_id} exited:\n{''.join(self.get_logs(40))}")
            if _answers(self.address, 2.0):
                return
            time.sleep(0.1)
        raise RuntimeError(
            f"server {self.server_id} ({self.address}) did not answer a ZooKeeper client "
            f"within {START_TIMEOUT_S} s:\n{''.join(self.get_logs(40))}"
        )


class ConcordMember(Member):
    """A `concord` process serving ZooKeeper's protocol on --zookeeper-addr."""

    def __init__(self, index: int, cluster: "Cluster", tls: bool = False) -> None:
        super().__init__(index)
        self.cluster = cluster
        #: Serves TLS with client certificates (both ports), alone, not a member of
        #: the ensemble: the secure address of every member (below).
        self.tls = tls
        self.grpc_addr = f"127.0.0.1:{free_port()}"
        self.peer_addr = f"127.0.0.1:{free_port()}"

    @property
    def secure_address(self) -> str:
        """A Concord server serves TLS on its ZooKeeper port when its client port
        does, and then TLS only, so kazoo's secureClientPort of each member is one
        more server of this cluster, started on first use, that serves TLS and
        takes kazoo's client certificate (CN "client") as an admin's."""
        if self.tls:
            return self.zk_addr
        return self.cluster.secure_member().address

    def config(self) -> str:
        # ZooKeeper's session bounds at kazoo's tickTime of 2 s (2 and 20 ticks), and
        # every four-letter word (kazoo's harness allows them all).
        text = (
            'zookeeper_four_letter_words = ["*"]\n'
            "session_ttl_min_ms = 4000\nsession_ttl_max_ms = 40000\n"
        )
        if self.tls:
            return text + 'admins = ["client"]\n'
        members = self.cluster.members
        if len(members) > 1:
            text += f'server_id = {self.server_id}\nclient_addr = "{self.grpc_addr}"\n'
            text += f'peer_addr = "{self.peer_addr}"\ncluster_id = 7\n'
            for m in members:
                text += (
                    f'[[members]]\nid = {m.server_id}\nclient_addr = "{m.grpc_addr}"\n'
                    f'peer_addr = "{m.peer_addr}"\nrole = "voter"\n'
                )
        return text

    def run(self) -> None:
        if self.running:
            return
        if not CONCORD_BIN.exists():
            raise RuntimeError(f"{CONCORD_BIN} is missing: build it or set CONCORD_BIN")
        (self.working_path / "concord.toml").write_text(self.config())
        args = [
            str(CONCORD_BIN),
            "--config", str(self.working_path / "concord.toml"),
            "--listen", self.grpc_addr,
            "--data-dir", str(self.working_path / "data"),
            "--tick-ms", "50",
            # Port 0 the first time; the same port when started again, as a
            # ZooKeeper server keeps its clientPort.
            "--zookeeper-addr", self.zk_addr or "127.0.0.1:0",
        ]
        if self.tls:
            ssl = self.cluster.ssl_files()
            args += [
                "--cert-file", ssl["server_cert"],
                "--key-file", ssl["server_key"],
                "--trusted-ca-file", ssl["ca_cert"],
            ]
        self._spawn(args, subprocess.PIPE)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, args=(self.process, lines), daemon=True).start()
        try:
            self.zk_addr = lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            self.kill()
            raise RuntimeError(
                f"{CONCORD_BIN} printed no 'zookeeper listening ADDR' within {START_TIMEOUT_S} s:\n"
                + "".join(self.get_logs(40))
            )

    @staticmethod
    def _drain(process: subprocess.Popen[bytes], lines: queue.Queue[str]) -> None:
        assert process.stdout is not None
        try:
            for raw in process.stdout:
                line = raw.decode(errors="replace").strip()
                if line.startswith("zookeeper listening "):
                    lines.put(line[len("zookeeper listening ") :].strip())
        except ValueError:  # closed by stop()
            pass


class ZooKeeperMember(Member):
    """Debian's ZooKeeper, configured as kazoo.testing.common.ManagedZooKeeper does
    (ports drawn free here instead of from a fixed offset)."""

    def __init__(self, index: int, cluster: "Cluster") -> None:
        super().__init__(index)
        self.cluster = cluster
        port = free_port()
        self.zk_addr = f"127.0.0.1:{port}"
        self.secure_addr = f"127.0.0.1:{free_port()}"
        self.quorum_port = free_port()
        self.election_port = free_port()

    def run(self) -> None:
        if self.running:
            return
        data = self.working_path / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(str(self.server_id))
        ssl = self.cluster.ssl_files()
        lines = [
            "tickTime=2000",
            f"dataDir={data}",
            f"clientPort={self.client_port}",
            "clientPortAddress=127.0.0.1",
            f"secureClientPort={self.secure_addr.rsplit(':', 1)[1]}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
            f"ssl.keyStore.location={ssl['server_pem']}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={ssl['ca_cert']}",
            "ssl.trustStore.type=PEM",
            "4lw.commands.whitelist=*",
            "reconfigEnabled=true",
            f"localSessionsEnabled={self.cluster.local_session_ro}",
            f"localSessionsUpgradingEnabled={self.cluster.local_session_ro}",
        ]
        if len(self.cluster.members) > 1:
            lines += ["initLimit=4", "syncLimit=2", "peerType=participant"]
            lines += [
                f"server.{m.server_id}=127.0.0.1:{m.quorum_port}:{m.election_port}:participant"
                for m in self.cluster.members
            ]
        (self.working_path / "zoo.cfg").write_text("\n".join(lines) + "\n")
        args = [
            "java",
            "-cp", ZOOKEEPER_CLASSPATH,
            "-Dfile.encoding=UTF-8",
            "-Dreadonlymode.enabled=true",
            f"-Dzookeeper.log.dir={self.working_path}",
            "-Dzookeeper.root.logger=INFO,CONSOLE",
            "-Djava.awt.headless=true",
            f"-Djava.security.auth.login.config={self.working_path / 'jaas.conf'}",
            "-Dzookeeper.DigestAuthenticationProvider.superDigest=super:D/InIHSb7yEEbrWz8b9l71RjZJU=",
            "-Xmx256m",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.working_path / "zoo.cfg"),
        ]
        (self.working_path / "jaas.conf").write_text(JAAS_DIGEST if self.cluster.jaas == "digest" else "")
        log = open(self.log_path, "ab")
        self._spawn(args, log.fileno())
        log.close()


#: The JAAS section ZooKeeper reads for SASL DIGEST-MD5 when a test sets
#: ZOOKEEPER_JAAS_AUTH=digest (the users kazoo's test_sasl.py logs in as). Kerberos
#: (gssapi) is not set up here: those tests skip themselves without it.
JAAS_DIGEST = """Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="super_secret"
    user_jaasuser="jaas_password";
};
"""


class Cluster:
    """kazoo.testing.common.ZookeeperCluster's interface over this plugin's members."""

    def __init__(self, local_session_ro: str = "false", jaas: str = "") -> None:
        self.local_session_ro = local_session_ro
        self.jaas = jaas
        self.members: list[Member] = []
        self._ssl: dict[str, Any] | None = None
        #: The Concord server behind every member's secure_address (ConcordMember).
        self._secure: ConcordMember | None = None
        kind = ConcordMember if BACKEND == "concord" else ZooKeeperMember
        for i in range(SIZE):
            self.members.append(kind(i, self))

    def __getitem__(self, k: int) -> Member:
        return self.members[k]

    def __iter__(self) -> Iterator[Member]:
        return iter(self.members)

    def start(self) -> None:
        # Started in reverse order as kazoo's harness does, then waited on: every
        # member answers a ZooKeeper client (kazoo sleeps 2 s instead).
        global _FAILED_STARTS
        if _FAILED_STARTS >= FAILED_STARTS_MAX:
            raise RuntimeError(
                f"the cluster failed to start {_FAILED_STARTS} times in a row: not tried again"
            )
        try:
            for m in reversed(self.members):
                m.run()
            deadline = time.monotonic() + START_TIMEOUT_S
            for m in self.members:
                m.wait_ready(deadline)
        except BaseException:
            _FAILED_STARTS += 1
            raise
        _FAILED_STARTS = 0

    def secure_member(self) -> "ConcordMember":
        if self._secure is None:
            self._secure = ConcordMember(len(self.members), self, tls=True)
        if not self._secure.running:
            self._secure.run()
        return self._secure

    def _all(self) -> list[Member]:
        return self.members + ([self._secure] if self._secure is not None else [])

    def stop(self) -> None:
        for m in self._all():
            m.stop()

    def terminate(self) -> None:
        """Stops every member and forgets their data: the next start() begins empty."""
        for m in self._all():
            m.reset()

    def reset(self) -> None:
        self.terminate()

    def destroy(self) -> None:
        for m in self._all():
            m.destroy()

    def get_logs(self) -> list[str]:
        logs: list[str] = []
        for m in self._all():
            logs += m.get_logs()
        return logs

    def ssl_files(self) -> dict[str, Any]:
        """A CA, a server certificate for 127.0.0.1 and localhost, and a client
        certificate (PEM files in a temporary folder), made once per cluster."""
        if self._ssl is None:
            folder = Path(tempfile.mkdtemp(prefix="kazoo-shim-tls-"))
            _FOLDERS.append(folder)
            self._ssl = _make_certificates(folder)
        return self._ssl

    def get_ssl_client_configuration(self) -> dict[str, bytes]:
        ssl = self.ssl_files()
        return {
            "client_key": Path(ssl["client_key"]).read_bytes(),
            "client_cert": Path(ssl["client_cert"]).read_bytes(),
            "ca_cert": Path(ssl["ca_cert"]).read_bytes(),
        }


def _make_certificates(folder: Path) -> dict[str, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def pem_key(key: Any) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("ca.kazoo.test"))
        .issuer_name(name("ca.kazoo.test"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, server: bool) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), pem_key(key)

    files: dict[str, Any] = {}
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    server_cert, server_key = leaf("localhost", True)
    client_cert, client_key = leaf("client", False)
    for label, content in [
        ("ca_cert", ca_pem),
        ("server_cert", server_cert),
        ("server_key", server_key),
        # ZooKeeper's PEM key store: the key and its certificate in one file.
        ("server_pem", server_key + server_cert),
        ("client_cert", client_cert),
        ("client_key", client_key),
    ]:
        path = folder / f"{label}.pem"
        path.write_bytes(content)
        files[label] = str(path)
    return files


# -- kazoo.testing.harness.get_global_cluster, replaced ----------------------------

_CLUSTER: Cluster | None = None
_CLUSTER_CONF: str | None = None


def get_global_cluster() -> Cluster:
    """As kazoo's: one cluster for the run, made again when the configuration the tests
    set through the environment changes (ZOOKEEPER_LOCAL_SESSION_RO, which the
    read-only test sets: ZooKeeper's local sessions; ZOOKEEPER_JAAS_AUTH, which the
    SASL tests set). Concord's members take neither."""
    global _CLUSTER, _CLUSTER_CONF
    local_session_ro = os.environ.get("ZOOKEEPER_LOCAL_SESSION_RO", "false")
    jaas = os.environ.get("ZOOKEEPER_JAAS_AUTH", "")
    conf = f"{local_session_ro} {jaas}"
    if _CLUSTER is not None and _CLUSTER_CONF == conf:
        return _CLUSTER
    if _CLUSTER is not None:
        _CLUSTER.destroy()
    _CLUSTER = Cluster(local_session_ro=local_session_ro, jaas=jaas)
    _CLUSTER_CONF = conf
    return _CLUSTER


def _stop_all() -> None:
    for m in _MEMBERS:
        try:
            m.kill()
            shutil.rmtree(m.working_path, ignore_errors=True)
        except Exception:
            pass
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(_stop_all)


# -- pytest hooks -------------------------------------------------------------------

_OUTCOMES: dict[str, dict[str, Any]] = {}


def pytest_configure(config: Any) -> None:
    import kazoo.testing.harness as harness

    harness.get_global_cluster = get_global_cluster
    # A SIGTERM to the run (the runner's overall timeout) still stops every server.
    signal.signal(signal.SIGTERM, lambda *_: (_stop_all(), os._exit(143)))


def pytest_unconfigure(config: Any) -> None:
    _stop_all()
    path = os.environ.get("KAZOO_SHIM_RESULTS")
    if path:
        Path(path).write_text(json.dumps(_OUTCOMES, indent=1, sort_keys=True))


def pytest_runtest_logreport(report: Any) -> None:
    """One outcome per test: failed if any phase failed, skipped if setup skipped it,
    passed when its call passed and nothing failed."""
    entry = _OUTCOMES.setdefault(report.nodeid, {"outcome": "passed", "duration_s": 0.0})
    entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
    if report.failed:
        if entry["outcome"] != "failed":
            entry["outcome"] = "failed"
            entry["phase"] = report.when
            text = report.longreprtext or ""
            entry["error"] = text.strip().splitlines()[-1][:300] if text.strip() else ""
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        if isinstance(report.longrepr, tuple):
            entry["reason"] = str(report.longrepr[2])[:300]
