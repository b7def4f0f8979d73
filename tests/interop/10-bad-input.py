#!/usr/bin/python3
"""Bad input over raw sockets, while a well-behaved client on its own connection keeps
sending and receiving throughout (and must never see an error):
- garbage bytes instead of a protocol header: the socket is closed promptly (an AMQP
  header sent back first is allowed);
- a wrong protocol header (AMQP 1.1.0.10): mqd answers with a header it supports
  (AMQP 0/1.0.0 or SASL 3/1.0.0) and closes;
- a frame whose size field is smaller than a frame header (after SASL + open): an
  AMQP close carrying an error (amqp:connection:framing-error), then the socket closes;
- a frame truncated by EOF: the socket closes;
- a frame larger than the max-frame-size mqd announced: close with an error;
- a 100 KiB message with --set max_message_size=65536: refused (the attach states
  max-message-size 65536; the transfer is rejected or the link detached with
  amqp:link:message-size-exceeded);
- a config file with a typo'd key: `mqd --check-config -c FILE` and a plain start both
  fail, naming FILE:LINE."""

import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, fail, log  # noqa: E402

from proton import Connection, Delivery, Endpoint, Message, SASL, Transport  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached, SendException  # noqa: E402

PROMPT = 5.0  # seconds within which mqd must close a bad connection


def read_until_closed(s, timeout=PROMPT):
    """All bytes read until the peer closes; fails if it has not closed by `timeout`."""
    s.settimeout(0.2)
    data = b""
    deadline = time.monotonic() + timeout * mqdtest.SLOW
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return data, "reset"
        if not chunk:
            return data, "eof"
        data += chunk
    fail("connection not closed by mqd within %.0fs (read %d bytes: %r)" % (timeout, len(data), data[:64]))


class RawAmqp:
    """A proton Transport driven over our own socket, so that after a clean SASL +
    open exchange we can write arbitrary bytes and still decode what mqd sends back."""

    def __init__(self, port, source=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5,
                                             source_address=(source, 0) if source else None)
        self.t = Transport()
        self.c = Connection()
        self.c.container = "raw-client"
        self.c.hostname = "127.0.0.1"
        self.t.bind(self.c)
        sasl = self.t.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        self.c.open()
        self.closed_by_peer = None

    def pump(self, until, timeout=5.0):
        self.sock.settimeout(0.1)
        deadline = time.monotonic() + timeout * mqdtest.SLOW
        while time.monotonic() < deadline:
            while True:
                n = self.t.pending()
                if n <= 0:
                    break
                out = self.t.peek(n)
                self.sock.sendall(out)
                self.t.pop(len(out))
            if until():
                return True
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                self.closed_by_peer = "reset"
                self.t.close_tail()
                return until()
            if not data:
                self.closed_by_peer = "eof"
                self.t.close_tail()
                return until()
            self.t.push(data)
        return until()

    def open(self):
        ok = self.pump(lambda: self.c.state & Endpoint.REMOTE_ACTIVE)
        check(ok, "raw client: no open from mqd")
        return self.t.remote_max_frame_size

    def send_raw(self, b):
        self.sock.sendall(b)

    def expect_close(self, want_condition=None, what=""):
        """Reads until the socket closes; decodes any close frame."""
        self.pump(lambda: self.closed_by_peer is not None, timeout=PROMPT)
        check(self.closed_by_peer is not None, "%s: mqd did not close the connection within %.0fs" % (what, PROMPT))
        cond = self.c.remote_condition
        got_close = bool(self.c.state & Endpoint.REMOTE_CLOSED)
        if want_condition:
            check(got_close, "%s: socket closed (%s) without an AMQP close frame" % (what, self.closed_by_peer))
            check(cond is not None and cond.name == want_condition,
                  "%s: close carried %s, want %s" % (what, cond, want_condition))
        self.sock.close()
        return got_close, cond


def frame(body, ftype=0, channel=0):
    return struct.pack(">IBBH", 8 + len(body), 2, ftype, channel) + body


class Bystander(threading.Thread):
    """A normal client doing send/receive round trips on its own connection."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.rounds = 0
        self.error = None
        self.stop_flag = False

    def run(self):
        try:
            conn = BlockingConnection(self.url, timeout=20)
            snd = conn.create_sender("bystander")
            rcv = conn.create_receiver("bystander", credit=10)
            deadline = time.monotonic() + 300
            while not self.stop_flag and time.monotonic() < deadline:
                body = "round-%d" % self.rounds
                snd.send(Message(body=body))
                m = rcv.receive(timeout=20)
                if m.body != body:
                    raise Exception("bystander: got %r, want %r" % (m.body, body))
                rcv.accept()
                self.rounds += 1
                time.sleep(0.01)
            conn.close()
        except Exception as e:  # reported by the main thread
            self.error = "%s: %s" % (type(e).__name__, e)


def case_garbage(b):
    s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(64))
    data, how = read_until_closed(s)
    check(data == b"" or data.startswith(b"AMQP"), "garbage: mqd answered %r (not an AMQP header)" % data[:16])
    s.close()
    log("garbage: closed (%s) after %r" % (how, data[:8]))


def case_wrong_header(b):
    s = socket.create_connection(("127.0.0.1", b.port), timeout=5)
    s.sendall(b"AMQP\x01\x01\x00\x0a")
    data, how = read_until_closed(s)
    check(data[:8] in (b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00"),
          "wrong header: mqd answered %r, want its own protocol header then close" % data[:16])
    s.close()
    log("wrong protocol header: answered %r, closed (%s)" % (data[:8], how))


def case_bad_frame_size(b):
    r = RawAmqp(b.port)
    r.open()
    r.send_raw(struct.pack(">IBBH", 4, 2, 0, 0))
    got_close, cond = r.expect_close("amqp:connection:framing-error", "bad frame size")
    log("frame size 4: close with %s" % cond)


def case_truncated(b):
    r = RawAmqp(b.port)
    r.open()
    r.send_raw(struct.pack(">IBBH", 1000, 2, 0, 0) + b"\x00S\x10" + b"\x00" * 20)
    r.sock.shutdown(socket.SHUT_WR)
    got_close, cond = r.expect_close(None, "truncated frame then EOF")
    log("truncated frame + EOF: closed (close frame: %s, %s)" % (got_close, cond))


def case_oversized_frame(b):
    r = RawAmqp(b.port)
    mfs = r.open()
    check(mfs and 512 < mfs < (1 << 30), "mqd announced max-frame-size %r, want a real limit" % mfs)
    big = 2 * mfs + 1000
    try:
        r.send_raw(struct.pack(">IBBH", big, 2, 0, 0) + b"\x00" * (big - 8))
    except (BrokenPipeError, ConnectionResetError):
        pass  # mqd closed while we were still writing: fine, check what it said
    got_close, cond = r.expect_close("amqp:connection:framing-error", "oversized frame")
    log("frame of %d bytes (max %d): close with %s" % (big, mfs, cond))


def oversize_message(t, bystander_url):
    b = t.broker(name="small", sets={"max_message_size": 65536})
    conn = BlockingConnection(b.url, timeout=20)
    snd = conn.create_sender("sizes")
    check(snd.remote_max_message_size == 65536,
          "attach states max-message-size %r, want 65536" % snd.remote_max_message_size)
    snd.send(Message(body=b"x" * 1000, inferred=True))  # fits
    outcome = None
    try:
        dlv = snd.send(Message(body=os.urandom(100 * 1024), inferred=True))
        outcome = "settled with %s" % dlv.remote_state
        fail("100 KiB message with max_message_size=65536 was %s, want rejected or link detached" % outcome)
    except SendException as e:
        check(e.state == Delivery.REJECTED, "100 KiB message: outcome %s, want rejected" % e)
        outcome = "rejected (%s)" % e
    except LinkDetached as e:
        check(e.condition == "amqp:link:message-size-exceeded",
              "100 KiB message: link detached with %s, want amqp:link:message-size-exceeded" % e.condition)
        outcome = "link detached (%s)" % e.condition
    log("100 KiB message refused: %s" % outcome)
    try:
        conn.close()
    except Exception:
        pass
    # the small message is there, the big one is not
    r = mqdtest.receive(b.url, "sizes", idle=1.5, timeout=30)
    check(len(r.got) == 1 and len(r.got[0].body) == 1000,
          "after the refused message, topic holds %s" % [len(m.body) for m in r.got])
    b.check_alive("after an oversized message")


def bad_config(t, b):
    conf = os.path.join(t.tmpdir, "typo.conf")
    with open(conf, "w") as f:
        f.write("# mqd test config with a typo on line 3\n")
        f.write("log_level = info\n")
        f.write("defualt_partitions = 2\n")
    p = subprocess.run([b.bin, "--check-config", "-c", conf], capture_output=True, timeout=30)
    out = (p.stdout + p.stderr).decode("utf-8", "replace")
    check(p.returncode != 0, "--check-config accepted a typo'd key (exit 0): %s" % out)
    check("%s:3" % conf in out, "--check-config output does not name %s:3: %r" % (conf, out))
    log("--check-config: exit %d: %s" % (p.returncode, out.strip()))
    port = mqdtest.free_port()
    data = os.path.join(t.tmpdir, "typo-data")
    os.makedirs(data)
    p = t.spawn([b.bin, "--foreground", "-c", conf, "--data-dir", data, "--listen", "127.0.0.1:%d" % port],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        fail("mqd started with a typo'd config key and kept running")
    out = out.decode("utf-8", "replace")
    check(p.returncode != 0, "mqd with a typo'd config exited 0: %s" % out)
    check("%s:3" % conf in out, "mqd start output does not name %s:3: %r" % (conf, out))
    log("plain start: exit %d: %s" % (p.returncode, out.strip()[-200:]))


def body(t):
    b = t.broker()
    by = Bystander(b.url)
    by.start()
    t0 = time.monotonic()
    while by.rounds < 3 and by.error is None and time.monotonic() - t0 < 20:
        time.sleep(0.05)
    check(by.error is None and by.rounds >= 3, "bystander did not get going: %s" % by.error)
    coll = mqdtest.Collect()
    for name, fn in (("garbage bytes", case_garbage), ("wrong protocol header", case_wrong_header),
                     ("frame size < 8", case_bad_frame_size), ("frame > max-frame-size", case_oversized_frame)):
        with coll.case(name):
            fn(b)
        b.check_alive("after case %s" % name)
    with coll.case("message > max_message_size"):
        oversize_message(t, b.url)
    with coll.case("config typo"):
        bad_config(t, b)
    # last: a broker that mishandles it may stop serving everyone
    with coll.case("truncated frame + EOF"):
        case_truncated(b)
    time.sleep(0.5)
    with coll.case("new connection after all bad input"):
        r = RawAmqp(b.port)
        r.open()
        r.sock.close()
    before = by.rounds
    time.sleep(0.5)
    by.stop_flag = True
    by.join(30)
    with coll.case("well-behaved client throughout"):
        check(by.error is None, "the well-behaved client failed during the bad input: %s" % by.error)
        check(by.rounds > before, "the well-behaved client stopped making progress (%d rounds)" % by.rounds)
        log("bystander completed %d round trips undisturbed" % by.rounds)
    b.check_alive("at the end")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=150)
