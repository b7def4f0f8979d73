"""Shared helpers of the cluster tests (70, 80-83): a real etcd on loopback free ports,
its JSON gateway read directly, and Proton clients that report per-message outcomes."""

import base64
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import mqdtest
from mqdtest import SLOW, fail, log

try:
    from proton import Message, symbol
    from proton.reactor import LinkOption
except ImportError:  # pragma: no cover
    Message = symbol = None
    LinkOption = object


class Etcd:
    """One etcd member on 127.0.0.1 (client port, peer port, data dir fixed across restarts)."""

    def __init__(self, t):
        self.t = t
        self.port = mqdtest.free_port()
        self.peer = mqdtest.free_port()
        self.data = os.path.join(t.tmpdir, "etcd-data")
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        cu = "http://127.0.0.1:%d" % self.port
        pu = "http://127.0.0.1:%d" % self.peer
        argv = ["etcd", "--name", "default", "--data-dir", self.data,
                "--listen-client-urls", cu, "--advertise-client-urls", cu,
                "--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
                "--initial-cluster", "default=" + pu,
                "--experimental-watch-progress-notify-interval=2s"]
        lf = open(os.path.join(self.t.tmpdir, "etcd.%d.log" % self.starts), "wb")
        self.proc = self.t.spawn(argv, stdout=lf, stderr=subprocess.STDOUT)
        lf.close()
        deadline = time.monotonic() + 20 * SLOW
        while True:
            try:
                post(self.port, "/v3/kv/range", {"key": b64("/")})
                break
            except (OSError, urllib.error.URLError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    fail("etcd did not start (%s)" % mqdtest.describe_status(self.proc.poll()))
                time.sleep(0.1)
        log("etcd %d up on port %d (pid %d)" % (self.starts, self.port, self.proc.pid))

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        log("etcd SIGKILLed")

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port


def fetch_conn(c):
    """Is c (a row of mqctl connection list --json) a follower's fetch connection (container
    mqd-node-<id>), not a node's pooled forwarding connection (mqd-fwd-<id>, src/fwd: a node
    keeps one to itself too, for the sends to partitions it leads)?"""
    return str(c.get("container", "")).startswith("mqd-node-")


def b64(s):
    return base64.b64encode(s.encode()).decode()


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5 * SLOW) as r:
        return json.loads(r.read())


def read_keys(port, prefix):
    """{key: (value bytes, lease int, create_revision int)} of every key under prefix."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    r = post(port, "/v3/kv/range", {"key": b64(prefix), "range_end": b64(end)})
    out = {}
    for kv in r.get("kvs", []):
        out[base64.b64decode(kv["key"]).decode()] = (
            base64.b64decode(kv.get("value", "")), int(kv.get("lease", "0")),
            int(kv.get("create_revision", "0")))
    return out


def get_json(port, key):
    """The JSON value of key, or None."""
    v = read_keys(port, key).get(key)
    return json.loads(v[0]) if v else None


def wait_for(what, pred, timeout):
    deadline = time.monotonic() + timeout * SLOW
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            fail("timed out after %.1fs waiting for %s" % (timeout * SLOW, what))
        time.sleep(0.05)


TTL_MS = int(3000 * SLOW)  # lease_ttl_ms of the cluster tests: longer on a slow machine


def cluster_sets(etcd, node_id, rack, **extra):
    s = {"cluster": "etcd", "etcd_endpoints": etcd.endpoint, "node_id": str(node_id),
         "rack": rack, "lease_ttl_ms": str(TTL_MS)}
    s.update({k: str(v) for k, v in extra.items()})
    return s


def repl_user_sets():
    """The settings of a [user repl] (its mqd-passwd hash) that followers log in as with
    SASL PLAIN: replication_user repl, replication_password s3cret (tests 38, 80, 99, 100)."""
    passwd = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(passwd, os.X_OK):
        mqdtest.skip("mqd-passwd not built")
    r = subprocess.run([passwd, "--plain", "--iterations", "1000", "repl"], input=b"s3cret\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    mqdtest.check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    h = [ln.split("=", 1)[1].strip() for ln in r.stdout.decode().splitlines()
         if ln.startswith("password_hash")]
    return {"user.repl.password_hash": h[0], "replication_user": "repl",
            "replication_password": "s3cret"}


def start_nodes(t, etcd, racks, sets_of=lambda i: {}, via=None):
    """One broker per rack (node i with cluster_sets plus sets_of(i), reaching etcd
    through via[i] when given, else etcd itself), started; returned once every node is
    registered in etcd."""
    brokers = {i: t.broker("n%d" % i, start=False,
                           sets=cluster_sets(via[i] if via else etcd, i, r, **sets_of(i)))
               for i, r in racks.items()}
    for b in brokers.values():
        b.start()
    wait_for("%d nodes in etcd" % len(racks),
             lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == len(racks), 20)
    return brokers


def create_rf3(etcd, broker, topic="r3"):
    """mqctl topic create TOPIC with 1 partition and replication_factor 3 on broker; the
    partition state the controller then writes in etcd."""
    rc, out, err = mqdtest.mqctl(broker.url, "topic", "create", topic, "--partitions", "1",
                                 "--config", "replication_factor=3")
    if rc != 0:
        fail("topic create %s: %s" % (topic, out + err))
    key = "/mqd/partitions/%s/0" % topic
    return wait_for(key, lambda: get_json(etcd.port, key), 10)


def records(path):
    """The whole records of a segment file as bytes (a pre-zeroed tail left out): each is
    len u32 LE (bytes after itself) | crc | offset | ... as the store writes them."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + 4 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "little")
        if n == 0 or pos + 4 + n > len(data):
            break
        pos += 4 + n
    return data[:pos]


def partition_bytes(broker, topic, part):
    """Every record of a partition's segments, in segment order, and the count of records."""
    d = os.path.join(broker.data_dir, "topics", topic, str(part))
    out = b""
    for name in sorted(os.listdir(d)):
        if name.endswith(".log"):
            out += records(os.path.join(d, name))
    return out


def stopped_logs_equal(brokers, topic, part, leader, want):
    """After a quiet moment stops every broker (SIGTERM) and checks that the leader's log of
    topic/part holds `want` data records and every node's log equals it byte for byte;
    returns the raw logs by node id."""
    time.sleep(1.0 * SLOW)
    for b in brokers.values():
        b.stop()
    raw = {i: partition_bytes(b, topic, part) for i, b in brokers.items()}
    n = {i: count_records(v) for i, v in raw.items()}
    log("records per node %r" % n)
    mqdtest.check(n[leader] == want, "leader %d holds %d data records, want %d" % (leader, n[leader], want))
    for i in brokers:
        mqdtest.check(raw[i] == raw[leader], "node %d differs from the leader (%d vs %d bytes)"
                      % (i, len(raw[i]), len(raw[leader])))
    return raw


def count_records(raw):
    """The data records (kind 0 in the flags' low byte) of raw: not the control records
    (transaction markers, the committed offsets a group's consumers leave, gstate.c)."""
    n = pos = 0
    while pos + 4 <= len(raw):
        n += raw[pos + 28] == 0 if pos + 29 <= len(raw) else 0
        pos += 4 + int.from_bytes(raw[pos:pos + 4], "little")
    return n


class Props(LinkOption):
    def __init__(self, props):
        self.props = props

    def apply(self, link):
        link.properties = {symbol(k): v for k, v in self.props.items()}


class Sender(mqdtest.Client):
    """Sends n durable messages ("<prefix>-<i>") to url/address with credit-driven
    pipelining; records each outcome (accepted count, rejected conditions) or the link's
    refusal (link_cond: name, description, info)."""

    def __init__(self, url, address, n, prefix, props=None, window=200):
        super().__init__(auto_settle=True)
        self.url, self.address, self.n, self.prefix = url, address, n, prefix
        self.props, self.window = props, window
        self.sent = self.accepted = 0
        self.rejected = []
        self.link_cond = None

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        opts = [Props(self.props)] if self.props else None
        e.container.create_sender(c, self.address, options=opts)

    def on_sendable(self, e):
        self.snd = e.sender
        self._send()

    def _send(self):
        snd = getattr(self, "snd", None)
        while snd is not None and snd.credit and self.sent < self.n and \
                self.sent - self.accepted - len(self.rejected) < self.window:
            snd.send(Message(body="%s-%d" % (self.prefix, self.sent), durable=True))
            self.sent += 1

    def _settled(self):
        if self.accepted + len(self.rejected) == self.n:
            self.finish()
        else:
            self._send()

    def on_accepted(self, e):
        self.accepted += 1
        self._settled()

    def on_rejected(self, e):
        c = e.delivery.remote.condition
        self.rejected.append((c.name, c.description) if c else (None, None))
        self._settled()

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description, dict(c.info or {})) if c else (None, None, {})
        self.finish()

    def status(self):
        return "sent %d accepted %d rejected %d" % (self.sent, self.accepted, len(self.rejected))


class Receiver(mqdtest.Client):
    """Receives until n messages (bodies in order) or, with n None, until idle_s passes
    without one after the first; or the link's refusal in link_cond."""

    def __init__(self, url, address, n, idle_s=2.0):
        super().__init__()
        self.url, self.address, self.n, self.idle_s = url, address, n, idle_s
        self.bodies = []
        self.link_cond = None
        self.last = time.monotonic()

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        e.container.create_receiver(c, self.address)
        e.container.schedule(0.2, self)

    def on_timer_task(self, e):
        if self.done or self.error:
            return
        if time.monotonic() - self.last > self.idle_s * SLOW:
            self.finish()
        else:
            e.container.schedule(0.2, self)

    def on_message(self, e):
        self.bodies.append(e.message.body)
        self.last = time.monotonic()
        if self.n is not None and len(self.bodies) >= self.n:
            self.finish()

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description, dict(c.info or {})) if c else (None, None, {})
        self.finish()

    def status(self):
        return "received %d" % len(self.bodies)


class EtcdProxy:
    """A TCP relay on 127.0.0.1 in front of etcd for one node, that the test can cut
    (block: bytes stop flowing both ways, connections stay open, like a dropped route)
    and heal. Threads relay; stop() closes everything."""

    def __init__(self, etcd):
        import socket
        self.target = ("127.0.0.1", etcd.port)
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.open = __import__("threading").Event()
        self.open.set()
        self.stopped = False
        self.socks = []
        self._thread(self._accept)

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def _thread(self, fn, *a):
        import threading
        t = threading.Thread(target=fn, args=a, daemon=True)
        t.start()

    def _accept(self):
        import socket
        while not self.stopped:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=5)
            except OSError:
                c.close()
                continue
            self.socks += [c, u]
            self._thread(self._pump, c, u)
            self._thread(self._pump, u, c)

    def _pump(self, a, b):
        import select
        while not self.stopped:
            if not self.open.wait(0.05):
                continue
            try:
                r, _, _ = select.select([a], [], [], 0.05)
                if not r:
                    continue
                if not self.open.is_set():
                    continue  # cut while waiting: leave it in the kernel's buffer
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
            except (OSError, ValueError):  # ValueError: the other pump closed it (fd -1)
                break
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def block(self):
        self.open.clear()
        log("etcd proxy %d: cut" % self.port)

    def heal(self):
        self.open.set()
        log("etcd proxy %d: healed" % self.port)

    def stop(self):
        self.stopped = True
        self.open.set()
        try:
            self.ls.close()
        except OSError:
            pass


def create_spread(etcd, url, topic="orders", nparts=6):
    """mqctl topic create TOPIC with nparts partitions and replication_factor 3 through url
    (which may carry USER:PASS@); returns {partition: its etcd state} once every partition
    has 3 replicas in sync (tests 130-132: leaders spread over the nodes)."""
    rc, out, err = mqdtest.mqctl(url, "topic", "create", topic, "--partitions", str(nparts),
                                 "--config", "replication_factor=3")
    if rc != 0:
        fail("topic create %s: %s" % (topic, out + err))
    key = "/mqd/partitions/%s/%%d" % topic
    wait_for("%d partitions with 3 in sync" % nparts, lambda: all(
        len((get_json(etcd.port, key % p) or {}).get("isr", [])) == 3 for p in range(nparts)), 30)
    ps = {p: get_json(etcd.port, key % p) for p in range(nparts)}
    log("%s: leaders %r" % (topic, [ps[p]["leader"] for p in range(nparts)]))
    return ps


def route_read(url, topic="orders"):
    """$management READ of com.mqd:route for topic over a new connection: (status, body)."""
    from proton.utils import BlockingConnection
    c = BlockingConnection(url, timeout=10 * SLOW)
    r = c.create_receiver(None, dynamic=True, credit=10)
    s = c.create_sender("$management")
    s.send(Message(reply_to=r.remote_source.address, id="route-read",
                   properties={"operation": "READ", "type": "com.mqd:route", "name": topic}))
    m = r.receive(timeout=10 * SLOW)
    r.accept()
    c.close()
    return {str(k): v for k, v in (m.properties or {}).items()}.get("status-code"), m.body


def metrics_text(port):
    """The /metrics page of the node whose metrics_listen is 127.0.0.1:port."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10 * SLOW) as h:
        return h.read().decode()
