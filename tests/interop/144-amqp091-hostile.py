#!/usr/bin/python3
"""Hostile AMQP 0-9-1 frames (a raw socket client after a real login): each closes the
connection with connection.close and the 0-9-1 reply code docs/amqp091.md names, and
nothing of the publish it interrupts is stored; the broker serves the next client.
- a publish whose body frame lacks the frame-end octet: 501 FRAME_ERROR
- a frame larger than the negotiated frame_max (4096): 501 FRAME_ERROR
- an unknown method (basic, method 999): 503 COMMAND_INVALID
- method arguments cut short (queue.declare whose name runs past the frame): 502 SYNTAX_ERROR
- a body longer than its content header said: 505 UNEXPECTED_FRAME
- a content header with no basic.publish before it: 505 UNEXPECTED_FRAME
- an unknown frame type: 501
- a method on a channel that is not open: 504 CHANNEL_ERROR
- stalled 0-9-1 handshakes count against max_handshakes_per_ip: with 3 allowed, a 4th
  stalled one from the same address is answered as AMQP 1.0 would (its header, then
  closed), and a client can log in again once the stalled ones are gone"""

import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log  # noqa: E402

pika = a9.pika

PW = "alice-pw"
shortstr, longstr, frame, method = a9.shortstr, a9.longstr, a9.frame, a9.method


class Raw(a9.Raw):
    def login(self):
        super().login("alice", PW)

    def expect_close(self, code):
        ch, cls, mid, args = self.method()
        check((ch, cls, mid) == (0, 10, 50), "want connection.close, got %d %d.%d" % (ch, cls, mid))
        reply = struct.unpack(">H", args[:2])[0]
        text = args[3:3 + args[2]].decode()
        log("connection.close %d %s" % (reply, text))
        check(reply == code, "reply code %d (%s), want %d" % (reply, text, code))
        self.s.sendall(method(0, 10, 51, b""))
        # then the socket ends
        try:
            while self.s.recv(65536):
                pass
        except OSError:
            pass
        self.s.close()


def publish(q):
    return method(1, 60, 40, struct.pack(">H", 0) + shortstr("") + shortstr(q) + b"\x00")


def header(size):
    return frame(2, 1, struct.pack(">HHQH", 60, 0, size, 0))


CASES = [
    ("body frame without frame-end", lambda: publish("q.h") + header(5) + frame(3, 1, b"hello", end=0), 501),
    ("frame over frame_max", lambda: publish("q.h") + header(6000) + frame(3, 1, b"x" * 6000), 501),
    ("unknown method", lambda: method(1, 60, 999, b""), 503),
    ("method arguments cut short",
     lambda: method(1, 50, 10, struct.pack(">H", 0) + bytes([200]) + b"q.h"), 502),
    ("body longer than its header", lambda: publish("q.h") + header(3) + frame(3, 1, b"hello"), 505),
    ("content header without publish", lambda: header(3) + frame(3, 1, b"abc"), 505),
    ("unknown frame type", lambda: frame(9, 1, b"zz"), 501),
    ("method on a channel not open", lambda: method(7, 50, 10, struct.pack(">H", 0) + shortstr("q.h") +
                                                    b"\x00" + struct.pack(">I", 0)), 504),
]


def stored(b):
    conn = a9.connect(b.port, "alice", PW)
    ch = conn.channel()
    n = ch.queue_declare(queue="q.h", passive=True).method.message_count
    conn.close()
    return n


def body(t):
    a9.need_pika()
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\n" + a9.mqd_passwd("alice", PW))
        f.write("[acl]\nallow alice send,receive,create q.*\n")
    b = t.broker("hostile", conf=conf)
    coll = mqdtest.Collect()
    r = Raw(b.port)
    r.login()
    r.s.sendall(method(1, 50, 10, struct.pack(">H", 0) + shortstr("q.h") + b"\x00" + struct.pack(">I", 0)))
    ch, cls, mid, _ = r.method()
    check((cls, mid) == (50, 11), "want queue.declare-ok, got %d.%d" % (cls, mid))
    r.s.close()
    for name, data, code in CASES:
        with coll.case(name):
            r = Raw(b.port)
            r.login()
            r.s.sendall(data())
            r.expect_close(code)
            check(stored(b) == 0, "something was stored")
    with coll.case("a good publish still works"):
        r = Raw(b.port)
        r.login()
        r.s.sendall(publish("q.h") + header(5) + frame(3, 1, b"hello"))
        r.s.sendall(method(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0)))
        ch, cls, mid, _ = r.method()
        check((cls, mid) == (10, 51), "want close-ok, got %d.%d" % (cls, mid))
        r.s.close()
        for _ in range(50):
            if stored(b) == 1:
                break
        check(stored(b) == 1, "the good publish was not stored")
    with coll.case("stalled handshakes and max_handshakes_per_ip"):
        b2 = t.broker("limits", conf=conf, sets={"max_handshakes_per_ip": "3"})
        stalled = []
        for i in range(3):
            r = Raw(b2.port)
            r.s.sendall(b"AMQP\x00\x00\x09\x01")
            ch, cls, mid, _ = r.method()
            check((cls, mid) == (10, 10), "stalled %d: no connection.start" % i)
            stalled.append(r)
        r = Raw(b2.port)
        r.s.sendall(b"AMQP\x00\x00\x09\x01")
        head = r.read(8)
        check(head[:4] == b"AMQP" and head[5:8] == b"\x01\x00\x00", "the 4th got %r, want an AMQP 1.0 header" % head)
        r.s.close()
        for r in stalled:
            r.s.close()
        ok = False
        for _ in range(50):
            try:
                r = Raw(b2.port)
                r.login()
                r.s.close()
                ok = True
                break
            except (mqdtest.TestFailure, EOFError, OSError):
                time.sleep(0.1)
        check(ok, "no login after the stalled handshakes were gone")
    b.check_alive()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=120)
