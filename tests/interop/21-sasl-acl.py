#!/usr/bin/python3
"""SASL and authorization against a broker with allow_anonymous = off, users made by
mqd-passwd and an [acl] section.

SCRAM-SHA-256: Debian's python3-qpid-proton has no SCRAM client (Proton's built-in client
mechanisms are PLAIN, ANONYMOUS and EXTERNAL; SCRAM needs Cyrus), so this test carries a
small SCRAM client speaking the SASL frames over a raw socket (frames encoded with
proton.Data), which then continues as an AMQP peer through a proton Transport: a real
protocol peer, checking the server's signature too.
- SCRAM: good password -> outcome ok, server signature verifies, send accepted; wrong
  password and unknown user -> outcome auth (1).
- PLAIN (python3-qpid-proton): good; wrong password and unknown user fail with
  amqp:unauthorized-access; ANONYMOUS is refused.
- An AMQP frame before the SASL exchange completed, or no SASL at all: closed.
- ACL: bob (receive only) cannot attach a sender to orders.eu
  (amqp:unauthorized-access) and nothing is stored; a group grant (@producers) works; an
  anonymous-relay message to an address alice may not send to is refused; SIGHUP reloads
  the ACL (bob then may send).
- Limits: handshake timeout closes an idle connection; max_connections_per_ip refuses a
  third connection; max_connections_per_user refuses a second login."""

import base64
import hashlib
import hmac
import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, fail, log, skip  # noqa: E402

from proton import (ConnectionException, Connection, Data, Delivery, Described, Endpoint, Message,  # noqa: E402
                    Transport, symbol, ulong)
from proton.utils import BlockingConnection, LinkDetached, SendException  # noqa: E402

PW = {"alice": "alice-pw", "bob": "bob-pw"}
ACL = """[acl]
allow @producers send,receive,browse,create orders.*
allow bob receive,browse orders.*
%s
"""


def mqd_passwd(user, pw):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--both", "--iterations", "4096", user], input=pw + "\n",
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return r.stdout


def write_conf(path, users, extra_acl="", extra=""):
    with open(path, "w") as f:
        f.write("allow_anonymous = off\n%s\n" % extra)
        f.write(users)
        f.write(ACL % extra_acl)


# ---------------------------------------------------------------- raw SASL client

def frame(body, ftype=1):
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, 0) + body


def encode(descriptor, fields):
    d = Data()
    d.put_object(Described(ulong(descriptor), fields))
    return d.encode()


class RawSasl:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5 * mqdtest.SLOW)
        self.buf = b""

    def read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("closed by mqd")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self):
        size, doff, ftype, _ = struct.unpack(">IBBH", self.read(8))
        body = self.read(size - 8)[(doff - 2) * 4:]
        d = Data()
        d.decode(body)
        d.rewind()
        d.next()
        obj = d.get_object()
        return int(obj.descriptor), list(obj.value)

    def start(self):
        self.sock.sendall(b"AMQP\x03\x01\x00\x00")
        check(self.read(8) == b"AMQP\x03\x01\x00\x00", "no SASL header from mqd")
        desc, fields = self.read_frame()
        check(desc == 0x40, "want sasl-mechanisms, got descriptor 0x%x" % desc)
        mechs = fields[0]
        mechs = getattr(mechs, "elements", mechs)  # a proton Array of symbols
        return [str(m) for m in (mechs if isinstance(mechs, (list, tuple)) else [mechs])]


def scram_login(port, user, pw):
    """Returns (outcome code, RawSasl, server signature ok)."""
    r = RawSasl(port)
    mechs = r.start()
    check("SCRAM-SHA-256" in mechs, "SCRAM-SHA-256 not offered: %s" % mechs)
    cnonce = base64.b64encode(os.urandom(18)).decode()
    first_bare = "n=%s,r=%s" % (user.replace("=", "=3D").replace(",", "=2C"), cnonce)
    r.sock.sendall(frame(encode(0x41, [symbol("SCRAM-SHA-256"), ("n,," + first_bare).encode(), None])))
    desc, fields = r.read_frame()
    if desc == 0x44:
        return fields[0], r, False
    check(desc == 0x42, "want sasl-challenge, got 0x%x" % desc)
    server_first = bytes(fields[0]).decode()
    attrs = dict(kv.split("=", 1) for kv in server_first.split(","))
    check(attrs["r"].startswith(cnonce) and len(attrs["r"]) > len(cnonce), "server nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac("sha256", pw.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored = hashlib.sha256(client_key).digest()
    without_proof = "c=biws,r=" + attrs["r"]
    auth_msg = ",".join([first_bare, server_first, without_proof]).encode()
    sig = hmac.new(stored, auth_msg, "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, sig))
    final = without_proof + ",p=" + base64.b64encode(proof).decode()
    r.sock.sendall(frame(encode(0x43, [final.encode()])))
    desc, fields = r.read_frame()
    check(desc == 0x44, "want sasl-outcome, got 0x%x" % desc)
    code = fields[0]
    server_ok = False
    if code == 0:
        server_key = hmac.new(salted, b"Server Key", "sha256").digest()
        want = "v=" + base64.b64encode(hmac.new(server_key, auth_msg, "sha256").digest()).decode()
        got = bytes(fields[1]).decode() if len(fields) > 1 and fields[1] is not None else ""
        server_ok = got == want
    return code, r, server_ok


def amqp_after_sasl(r, address, body):
    """Continues a raw connection after SASL as an AMQP peer; returns the remote state of
    the one delivery sent (or the link's remote condition)."""
    t = Transport()
    c = Connection()
    t.bind(c)
    c.open()
    ssn = c.session()
    ssn.open()
    snd = ssn.sender("raw-scram")
    snd.target.address = address
    snd.open()
    sock = r.sock
    sock.settimeout(0.1)
    if r.buf:
        t.push(r.buf)
    dlv = None
    deadline = time.monotonic() + 10 * mqdtest.SLOW
    while time.monotonic() < deadline:
        if dlv is None and snd.credit > 0:
            dlv = snd.delivery("1")
            snd.send(Message(body=body).encode())
            snd.advance()
        if dlv is not None and dlv.remote_state:
            return dlv.remote_state
        if snd.state & Endpoint.REMOTE_CLOSED:
            return snd.remote_condition
        n = t.pending()
        if n > 0:
            sock.sendall(t.peek(n))
            t.pop(n)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        if not data:
            break
        t.push(data)
    fail("no disposition for the SCRAM client's message")


# ---------------------------------------------------------------- helpers

def connect(url, **kw):
    return BlockingConnection(url, timeout=10 * mqdtest.SLOW, **kw)


def refused(what, url, address="orders.eu", **kw):
    try:
        c = connect(url, **kw)
        s = c.create_sender(address)
        s.send(Message(body="must not arrive"))
        c.close()
    except (ConnectionException, LinkDetached, SendException) as e:
        log("%s: refused: %s" % (what, e))
        return str(e)
    fail("%s: connection and send succeeded" % what)


def stored(url, topic):
    """Messages in `topic` (browsed as alice)."""
    from proton.reactor import Copy
    c = connect(url, user="alice", password=PW["alice"], allowed_mechs="PLAIN")
    r = c.create_receiver(topic, options=Copy(), credit=100)
    bodies = []
    try:
        while True:
            bodies.append(r.receive(timeout=1).body)
            r.accept()
    except Exception:  # noqa: B902 - receive timeout: nothing more
        pass
    c.close()
    return bodies


def closed_within(sock, seconds):
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            continue
        except ConnectionResetError:
            return True
    return False


def body(t):
    users = mqd_passwd("alice", PW["alice"]) + "groups = producers\n" + mqd_passwd("bob", PW["bob"])
    conf = os.path.join(t.tmpdir, "mqd.conf")
    write_conf(conf, users, "allow alice send,create relay.*")
    # handshake_timeout_ms: the backstop that closes an open sent inside SASL (below)
    b = t.broker("acl", conf=conf, sets={"handshake_timeout_ms": "3s"})
    coll = mqdtest.Collect()

    with coll.case("SCRAM-SHA-256 good password"):
        code, r, server_ok = scram_login(b.port, "alice", PW["alice"])
        check(code == 0, "outcome %s, want 0 (ok)" % code)
        check(server_ok, "server-final v= does not verify")
        st = amqp_after_sasl(r, "orders.scram", "via scram")
        check(st == Delivery.ACCEPTED, "send after SCRAM: %r" % st)
        r.sock.close()

    for what, user, pw in (("SCRAM wrong password", "alice", "nope"), ("SCRAM unknown user", "mallory", "x"),
                           ("SCRAM user without scram credentials", "nobody", "x")):
        with coll.case(what):
            code, r, _ = scram_login(b.port, user, pw)
            check(code == 1, "outcome %s, want 1 (auth)" % code)
            check(closed_within(r.sock, 5 * mqdtest.SLOW), "connection not closed after a failed SCRAM")

    with coll.case("PLAIN good"):
        c = connect(b.url, user="alice", password=PW["alice"], allowed_mechs="PLAIN")
        c.create_sender("orders.plain").send(Message(body="via plain"))
        c.close()

    for what, kw in (("PLAIN wrong password", dict(user="alice", password="nope", allowed_mechs="PLAIN")),
                     ("PLAIN unknown user", dict(user="mallory", password="x", allowed_mechs="PLAIN")),
                     ("ANONYMOUS refused", dict(allowed_mechs="ANONYMOUS"))):
        with coll.case(what):
            err = refused(what, b.url, address="orders.bad", **kw)
            check("unauthorized-access" in err, "want amqp:unauthorized-access, got %s" % err)

    with coll.case("AMQP frame before SASL completed"):
        r = RawSasl(b.port)
        r.start()
        # an AMQP open frame (type 0) where sasl-init belongs
        r.sock.sendall(frame(encode(0x10, ["early-bird"]), ftype=0))
        check(closed_within(r.sock, 5 * mqdtest.SLOW), "not closed after an AMQP frame during SASL")
        s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
        s.sendall(b"AMQP\x00\x01\x00\x00" + frame(encode(0x10, ["no-sasl"]), ftype=0))
        check(closed_within(s, 5 * mqdtest.SLOW), "not closed when skipping SASL")

    with coll.case("ACL: no send right"):
        err = refused("bob sends", b.url, user="bob", password=PW["bob"], allowed_mechs="PLAIN")
        check("unauthorized-access" in err, "want amqp:unauthorized-access, got %s" % err)
        check("orders.eu" in err, "the error does not name the address: %s" % err)
        check(stored(b.url, "orders.eu") == [], "a refused send stored something")

    with coll.case("ACL: anonymous relay per message"):
        c = connect(b.url, user="alice", password=PW["alice"], allowed_mechs="PLAIN")
        s = c.create_sender(None)
        s.send(Message(address="relay.ok", body="relayed"))
        try:
            s.send(Message(address="secret.x", body="must not arrive"))
            fail("relay to secret.x accepted")
        except (SendException, LinkDetached, ConnectionException) as e:
            log("relay to secret.x refused: %s" % e)
        c.close()

    with coll.case("ACL reload on SIGHUP"):
        write_conf(conf, users, "allow bob send orders.*")
        os.kill(b.pid, signal.SIGHUP)
        time.sleep(1.0 * mqdtest.SLOW)
        c = connect(b.url, user="bob", password=PW["bob"], allowed_mechs="PLAIN")
        c.create_sender("orders.eu").send(Message(body="bob may now"))
        c.close()
    b.check_alive()

    # ---------------- limits ----------------
    lim = t.broker("lim", conf=conf, sets={"handshake_timeout_ms": "2s", "max_connections_per_ip": "3",
                                           "max_connections_per_user": "1"})
    with coll.case("max_connections_per_user"):
        c1 = connect(lim.url, user="alice", password=PW["alice"], allowed_mechs="PLAIN")
        err = refused("second alice", lim.url, address="orders.x", user="alice", password=PW["alice"],
                      allowed_mechs="PLAIN")
        check("unauthorized-access" in err, "want amqp:unauthorized-access, got %s" % err)
        c1.close()

    with coll.case("max_connections_per_ip"):
        time.sleep(0.5)
        socks = [socket.create_connection(("127.0.0.1", lim.port), timeout=5) for _ in range(3)]
        extra = socket.create_connection(("127.0.0.1", lim.port), timeout=5)
        check(closed_within(extra, 1.0 * mqdtest.SLOW), "a 4th connection from 127.0.0.1 was not refused")
        t0 = time.monotonic()
        check(closed_within(socks[0], 6 * mqdtest.SLOW), "idle connection not closed by the handshake timeout")
        log("handshake timeout closed an idle connection after %.1fs" % (time.monotonic() - t0))
        for s in socks:
            s.close()
    lim.check_alive()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
