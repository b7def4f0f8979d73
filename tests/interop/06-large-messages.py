#!/usr/bin/python3
"""Large messages: 1 MiB and 10 MiB bodies (data sections, random bytes) round trip
intact (SHA-256 checked), split over many transfer frames both ways (mqd's default
max-frame-size is 128 KiB), interleaved with small messages that keep their order."""

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, receive, send  # noqa: E402

from proton import Message  # noqa: E402

TOPIC = "large"


def body(t):
    b = t.broker()
    sizes = [1 << 20, 10 << 20, 1 << 20, 3 * (1 << 20) + 12345]
    payloads = [os.urandom(n) for n in sizes]
    msgs = []
    want = []
    for i, p in enumerate(payloads):
        msgs.append(Message(body=p, inferred=True, properties={"sha256": hashlib.sha256(p).hexdigest()}))
        want.append(("big", len(p), hashlib.sha256(p).hexdigest()))
        msgs.append(Message(body="small-%d" % i))
        want.append(("small", "small-%d" % i))
    send(b.url, TOPIC, msgs, timeout=120)
    log("sent %d messages (%s bytes large)" % (len(msgs), sizes))
    r = receive(b.url, TOPIC, count=len(msgs), linger=0.5, timeout=120)
    check(len(r.got) == len(msgs), "received %d of %d" % (len(r.got), len(msgs)))
    for i, (m, w) in enumerate(zip(r.got, want)):
        if w[0] == "big":
            check(isinstance(m.body, bytes), "message %d: body is %s, want binary" % (i, type(m.body).__name__))
            got = ("big", len(m.body), hashlib.sha256(m.body).hexdigest())
            check(got == w, "message %d: got %d bytes sha256 %s, want %d bytes sha256 %s"
                  % (i, got[1], got[2], w[1], w[2]))
            check(m.properties.get("sha256") == w[2], "message %d: application property lost" % i)
        else:
            check(m.body == w[1], "message %d: body %r, want %r" % (i, m.body, w[1]))
        mqdtest.check_delivery_annotations(m, partition=0, where="message %d" % i)
        off = int(mqdtest.ann(m, "x-opt-sequence-number"))
        check(off == i, "message %d: offset %d" % (i, off))
    log("all large messages intact")


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
