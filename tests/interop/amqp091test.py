"""Helpers shared by the AMQP 0-9-1 interop tests (140-146): users made by mqd-passwd,
pika connection parameters, a Proton connection with PLAIN, a raw 0-9-1 frame client,
and the test PKI of tests/interop/20-tls.py."""

import importlib.util
import os
import socket
import ssl
import struct
import subprocess
import time

import mqdtest
from mqdtest import check, skip

try:
    import pika
    import pika.exceptions
except ImportError:
    pika = None


def need_pika():
    if pika is None:
        skip("python3-pika is not installed")
    return pika


def mqd_passwd(user, pw):
    """The [user] section mqd-passwd prints for user/pw (PBKDF2 and SCRAM)."""
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--both", "--iterations", "4096", user], input=pw + "\n",
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return r.stdout


def params(port, user, pw, ca=None):
    """pika parameters for 127.0.0.1:port (TLS with the CA file ca, server name localhost)."""
    kw = {}
    if ca:
        kw["ssl_options"] = pika.SSLOptions(ssl.create_default_context(cafile=ca), "localhost")
    return pika.ConnectionParameters(host="127.0.0.1", port=port, virtual_host="/",
                                     credentials=pika.PlainCredentials(user, pw),
                                     heartbeat=30, blocked_connection_timeout=30 * mqdtest.SLOW,
                                     socket_timeout=10 * mqdtest.SLOW, connection_attempts=1, **kw)


def connect(port, user, pw, ca=None):
    return pika.BlockingConnection(params(port, user, pw, ca))


def consume_acked(ch, q, n, wait):
    """Consumes up to n messages of q on channel ch (its qos already set) for at most `wait`
    seconds (x SLOW), acking in batches of 10 (multiple): ([(method, props, body)], the
    most deliveries unacked at once)."""
    got, unacked, max_unacked = [], [], 0
    deadline = time.monotonic() + wait * mqdtest.SLOW
    for method, props, body in ch.consume(q, auto_ack=False,
                                          inactivity_timeout=0.5 * mqdtest.SLOW):
        if method is None:
            if time.monotonic() > deadline:
                break
            continue
        got.append((method, props, body))
        unacked.append(method.delivery_tag)
        max_unacked = max(max_unacked, len(unacked))
        if len(unacked) >= 10 or len(got) >= n:  # the prefetch window is what limits
            ch.basic_ack(unacked[-1], multiple=True)
            unacked = []
        if len(got) >= n:
            break
    if unacked:
        ch.basic_ack(unacked[-1], multiple=True)
    ch.cancel()
    return got, max_unacked


def proton_conn(url, user, pw, **kw):
    from proton.utils import BlockingConnection
    return BlockingConnection(url, timeout=10 * mqdtest.SLOW, user=user, password=pw,
                              allowed_mechs="PLAIN", **kw)


def make_pki(d):
    """The CA and server certificates of tests/interop/20-tls.py, made in d."""
    spec = importlib.util.spec_from_file_location(
        "tls20", os.path.join(os.path.dirname(os.path.abspath(__file__)), "20-tls.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_pki(d)


# ---- a raw 0-9-1 client: frames as bytes ----

def shortstr(s):
    b = s.encode()
    return bytes([len(b)]) + b


def longstr(b):
    return struct.pack(">I", len(b)) + b


def frame(t, ch, payload, end=0xCE):
    return struct.pack(">BHI", t, ch, len(payload)) + payload + bytes([end])


def method(ch, cls, mid, args):
    return frame(1, ch, struct.pack(">HH", cls, mid) + args)


class Raw:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10 * mqdtest.SLOW)
        self.buf = b""

    def read(self, n):
        while len(self.buf) < n:
            k = self.s.recv(65536)
            if not k:
                raise EOFError("closed by mqd")
            self.buf += k
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self):
        t, ch, size = struct.unpack(">BHI", self.read(7))
        payload = self.read(size)
        check(self.read(1) == b"\xce", "mqd sent a frame without frame-end")
        return t, ch, payload

    def method(self):
        while True:
            t, ch, p = self.frame()
            if t == 1:
                cls, mid = struct.unpack(">HH", p[:4])
                return ch, cls, mid, p[4:]

    def login(self, user, pw):
        self.s.sendall(b"AMQP\x00\x00\x09\x01")
        ch, cls, mid, _ = self.method()
        check((cls, mid) == (10, 10), "want connection.start, got %d.%d" % (cls, mid))
        self.s.sendall(method(0, 10, 11, struct.pack(">I", 0) + shortstr("PLAIN") +
                              longstr(b"\0" + user.encode() + b"\0" + pw.encode()) + shortstr("en_US")))
        ch, cls, mid, _ = self.method()
        check((cls, mid) == (10, 30), "want connection.tune, got %d.%d" % (cls, mid))
        self.s.sendall(method(0, 10, 31, struct.pack(">HIH", 16, 4096, 0)))
        self.s.sendall(method(0, 10, 40, shortstr("/") + shortstr("") + b"\0"))
        ch, cls, mid, _ = self.method()
        check((cls, mid) == (10, 41), "want connection.open-ok, got %d.%d" % (cls, mid))
        self.s.sendall(method(1, 20, 10, shortstr("")))
        ch, cls, mid, _ = self.method()
        check((cls, mid) == (20, 11), "want channel.open-ok, got %d.%d" % (cls, mid))
