#!/usr/bin/python3
"""Unfinished handshakes cannot shut real clients out (issue 32 point 7c). Before, at a
1,024-descriptor limit 1,000 unfinished TLS or SCRAM handshakes took every descriptor
connections may use, and every real client was refused until their timeouts.

mqd runs under `prlimit --nofile=512` with a plain and an amqps:// listener, a user with
SCRAM credentials, allow_anonymous on, both handshake timeouts at 60 s and the defaults
max_handshakes_per_ip = 64 and handshake_fd_percent = 50 (of the descriptors connections
may use here, 512 less 224 for partition files, 32 spare and mqd's own: about 120).
Stalled handshakes are TCP connections that send an AMQP SASL header and a SCRAM
client-first and never the final, or a TLS ClientHello and nothing more.

(a) one address: 300 stalled handshakes from 127.0.0.1 (SCRAM and TLS in turn): mqd
    holds at most 64 of them (counted from its descriptors in /proc), every other one is
    closed at once; a client at 127.0.0.2 connects over both listeners and does a round
    trip each, and keeps doing so; the refusals are logged once a second at most.
(b) many addresses: 40 addresses (127.0.3.x) keep 8 stalled handshakes each (320, more
    than their share, and more than all the descriptors connections may use), reopening
    each one mqd closes, for 10 s: mqd holds at most their share (+ those it is
    closing); for each new one it closes the oldest stalled handshake of an address with
    the most (or, while a quarter of the share is being closed, the new one at once);
    and a client at 127.0.0.2 connects (plain and TLS in turn) every half second and
    does a round trip, none failing (with the oldest handshake of all as the victim, the
    real client's own was closed too); the evictions are logged once a second at most.
    Afterwards mqd still serves."""

import importlib.util
import os
import resource
import selectors
import shutil
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402

from proton import Message, symbol  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402


def _load(name, file):
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(os.path.abspath(__file__)), file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tls20 = _load("tls20", "20-tls.py")
sasl21 = _load("sasl21", "21-sasl-acl.py")

NOFILE = 512
PER_IP = 64       # max_handshakes_per_ip's default
ROOM = 224        # kept for partition files: (512 - 64) / 2
ONE_ADDR = 300
ADDRS = 40
PER_ADDR = 8
SPREAD_S = 10


def held_by(pid, ports, prefix):
    """mqd's sockets on `ports` whose peer address starts with `prefix`: {inode: peer}."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            t = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            x = line.split()
            if x[3] != "01" or x[9] not in inodes or int(x[1].split(":")[1], 16) not in ports:
                continue
            peer = socket.inet_ntoa(int(x[2].split(":")[0], 16).to_bytes(4, "little"))
            if peer.startswith(prefix):
                out[x[9]] = peer
    return out


class Stalls:
    """Stalled handshakes: opened, their first bytes sent, never finished."""

    def __init__(self, port, tls_port, hello):
        self.port, self.tls_port = port, tls_port
        sasl_init = sasl21.encode(0x41, [symbol("SCRAM-SHA-256"), b"n,,n=alice,r=" + os.urandom(9).hex().encode(), None])
        self.scram = b"AMQP\x03\x01\x00\x00" + sasl21.frame(sasl_init, ftype=1)
        self.hello = hello
        self.sel = selectors.DefaultSelector()
        self.socks = {}  # socket -> source
        self.closed = 0
        self.n = 0
        self.first_seen = {}
        self.most = 0
        self.most_now = 0
        self.most_per_addr = 0

    def open(self, src):
        tls = self.n % 2 == 1
        self.n += 1
        s = socket.socket()
        s.bind((src, 0))
        s.settimeout(5 * mqdtest.SLOW)
        try:
            s.connect(("127.0.0.1", self.tls_port if tls else self.port))
            s.sendall(self.hello if tls else self.scram)
        except OSError:
            s.close()
            self.closed += 1
            return
        s.setblocking(False)
        self.socks[s] = src
        self.sel.register(s, selectors.EVENT_READ)

    def poll(self, pid, timeout=0.05):
        for key, _ in self.sel.select(timeout=timeout):
            s = key.fileobj
            try:
                if s.recv(65536):
                    continue  # mqd's side of the handshake: read and ignored
            except BlockingIOError:
                continue
            except OSError:
                pass
            self.sel.unregister(s)
            del self.socks[s]
            s.close()
            self.closed += 1
        now = time.monotonic()
        seen = held_by(pid, (self.port, self.tls_port), "127.0.")
        seen = {i: p for i, p in seen.items() if p != "127.0.0.2"}
        self.first_seen = {i: self.first_seen.get(i, now) for i in seen}
        held = [p for i, p in seen.items() if now - self.first_seen[i] >= 0.5]
        self.most = max(self.most, len(held))
        self.most_now = max(self.most_now, len(seen))  # those being closed included
        if held:
            self.most_per_addr = max(self.most_per_addr, max(held.count(p) for p in set(held)))
        return len(held)

    def close_all(self):
        for s in list(self.socks):
            self.sel.unregister(s)
            s.close()
        self.socks.clear()


class Client(threading.Thread):
    """A real client at 127.0.0.2: a new connection every half second, over the plain and
    the TLS listener in turn, each sending a message and reading it back."""

    def __init__(self, url, tls_url, domain):
        super().__init__(daemon=True)
        self.url, self.tls_url, self.domain = url, tls_url, domain
        self.ok = {"plain": 0, "tls": 0}
        self.failures = []
        self.stop_flag = False

    def one(self, tls):
        kw = {"ssl_domain": self.domain} if tls else {}
        body = "real-%d" % (sum(self.ok.values()) + len(self.failures))
        conn = BlockingConnection(self.tls_url if tls else self.url, timeout=15 * mqdtest.SLOW,
                                  **kw)
        try:
            conn.create_sender("real").send(Message(body=body))
            r = conn.create_receiver("real", credit=1)
            m = r.receive(timeout=15 * mqdtest.SLOW)
            r.accept()
            check(m.body == body, "got %r, want %r" % (m.body, body))
        finally:
            conn.close()

    def run(self):
        deadline = time.monotonic() + 300
        i = 0
        while not self.stop_flag and time.monotonic() < deadline:
            tls = i % 2 == 1
            i += 1
            try:
                self.one(tls)
                self.ok["tls" if tls else "plain"] += 1
            except Exception as e:
                self.failures.append("%s: %s: %s" % ("tls" if tls else "plain", type(e).__name__, e))
            time.sleep(0.5)


def proton_from(source):
    """Proton's clients in this process connect from `source` (a loopback address): its
    BlockingConnection takes no source address, so its socket set-up binds one."""
    from proton._io import IO
    orig = IO._setupsocket

    def setup(sock):
        orig(sock)
        if sock.family == socket.AF_INET:
            sock.bind((source, 0))
    IO._setupsocket = staticmethod(setup)


def body(t):
    if not shutil.which("openssl"):
        skip("openssl CLI not installed")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    pkidir = os.path.join(t.tmpdir, "pki")
    os.makedirs(pkidir)
    pki = tls20.make_pki(pkidir)
    passwd = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(passwd, os.X_OK):
        skip("mqd-passwd not built")
    import subprocess
    r = subprocess.run([passwd, "--both", "--iterations", "4096", "alice"], input="alice-pw\n",
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = on\ntls_cert = %s\ntls_key = %s\nhandshake_timeout_ms = 60s\n"
                "tls_handshake_timeout_ms = 60s\n%s" % (pki["server.crt"], pki["server.key"], r.stdout))
    tls_port = mqdtest.free_port()
    b = t.broker(start=False, conf=conf, args=["--listen", "amqps://127.0.0.1:%d" % tls_port])
    plain_argv = b.argv
    b.argv = lambda: ["prlimit", "--nofile=%d" % NOFILE, "--"] + plain_argv()
    b.start()
    mqdtest.wait_port(tls_port, 15 * mqdtest.SLOW)
    time.sleep(0.5)
    base = len(os.listdir("/proc/%d/fd" % b.pid))
    share = (NOFILE - ROOM - 32 - base) // 2  # handshake_fd_percent = 50
    log("mqd holds %d descriptors of its own: the handshakes' share is about %d" % (base, share))
    check(share > PER_IP, "the share (%d) must be above max_handshakes_per_ip here" % share)
    tls_url = "amqps://127.0.0.1:%d" % tls_port
    proton_from("127.0.0.2")
    domain = tls20.client_domain(pki)
    hello = tls20.client_hello(pki)
    coll = mqdtest.Collect()

    with coll.case("(a) 300 stalled handshakes from one address"):
        st = Stalls(b.port, tls_port, hello)
        for _ in range(ONE_ADDR):
            st.open("127.0.0.1")
        deadline = time.monotonic() + 3 * mqdtest.SLOW
        while time.monotonic() < deadline:
            st.poll(b.pid)
        cl = Client(b.url, tls_url, domain)
        cl.one(False)
        cl.one(True)
        for _ in range(10):
            st.poll(b.pid)
        log("(a) %d stalled handshakes opened from 127.0.0.1: %d closed by mqd, %d open; mqd "
            "held at most %d" % (ONE_ADDR, st.closed, len(st.socks), st.most))
        check(st.most <= PER_IP, "mqd held %d unfinished handshakes from one address (max %d)"
              % (st.most, PER_IP))
        check(len(st.socks) <= PER_IP and st.closed >= ONE_ADDR - PER_IP,
              "%d stalled connections open, %d closed (want at most %d open)"
              % (len(st.socks), st.closed, PER_IP))
        st.close_all()
        text = b.log_text()
        n = text.count("max_handshakes_per_ip (64) reached")
        log("(a) %d refusal lines" % n)
        check(1 <= n <= 10 * mqdtest.SLOW, "%d refusal lines (once a second at most)" % n)
    b.check_alive("after (a)")

    with coll.case("(b) stalled handshakes from 40 addresses"):
        time.sleep(1.0)
        st = Stalls(b.port, tls_port, hello)
        srcs = ["127.0.3.%d" % (i + 1) for i in range(ADDRS)]
        for src in srcs:
            for _ in range(PER_ADDR):
                st.open(src)
        cl = Client(b.url, tls_url, domain)
        cl.start()
        t0 = time.monotonic()
        reopened = 0
        while time.monotonic() - t0 < SPREAD_S * mqdtest.SLOW:
            st.poll(b.pid)
            for src in srcs:  # a persistent attacker: what mqd closed comes back
                have = sum(1 for s in st.socks.values() if s == src)
                for _ in range(min(PER_ADDR - have, 1)):
                    st.open(src)
                    reopened += 1
        cl.stop_flag = True
        cl.join(60 * mqdtest.SLOW)
        log("(b) %d stalled handshakes from %d addresses, %d reopened, %d closed by mqd; mqd "
            "had at most %d at a time (%d for half a second or more, %d from one address); "
            "real client: %r ok, %d failed"
            % (ADDRS * PER_ADDR, ADDRS, reopened, st.closed, st.most_now, st.most,
               st.most_per_addr, cl.ok, len(cl.failures)))
        st.close_all()
        check(not cl.failures, "the real client failed: %r" % cl.failures[:3])
        check(cl.ok["plain"] >= 3 and cl.ok["tls"] >= 3, "real client round trips: %r" % cl.ok)
        # at a time: their share, those closed to make room that mqd is still closing (a
        # quarter of it, then only first handshakes of an address), and those refused at
        # accept that mqd is closing: well below the descriptors connections may use
        check(st.most_now <= share + share // 2 + 16, "mqd had %d unfinished handshakes at "
              "once (their share: %d)" % (st.most_now, share))
        check(st.closed > 0, "no stalled handshake was closed to make room")
        text = b.log_text()
        n = text.count("handshake_fd_percent")
        log("(b) %d eviction lines" % n)
        check(1 <= n <= 2 * (SPREAD_S * mqdtest.SLOW + 5),
              "%d eviction lines (once a second at most, for each of its two lines)" % n)
    b.check_alive("after (b)")
    with coll.case("mqd serves afterwards"):
        cl = Client(b.url, tls_url, domain)
        cl.one(False)
        cl.one(True)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
