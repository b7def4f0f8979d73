#!/usr/bin/python3
"""Durability across SIGKILL:
1. 10,000 durable messages sent unsettled and accepted by mqd;
2. mqd SIGKILLed and restarted on the same data dir: all 10,000 are delivered, in
   order, intact, with their original offsets (this receiver settles nothing);
3. a consumer accepts exactly the first 5,000 (credit 5,000), then detaches its link
   and closes its connection cleanly (both answered by mqd, so every accept made a
   round trip);
4. mqd SIGKILLed again and restarted: the remaining 5,000 and none of the accepted
   ones are delivered;
5. a broker with segment_prezero = 512KiB (zeros kept ahead of the records, 1 MiB
   segments so several roll): 3,000 durable 1 KiB messages accepted, the segment file holds
   zeros past its records while it runs, SIGKILL, restart: the zeros are cut (logged as
   such, never as a torn tail or an unhealthy partition) and all 3,000 are delivered in
   order with their offsets, then 1,000 more after them."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Receiver, check, log, receive, run_container, send  # noqa: E402

from proton import Message  # noqa: E402

N = 10000
HALF = 5000
TOPIC = "durable"


def check_range(r, lo, hi, what):
    got = r.bodies()
    want = ["d-%05d" % i for i in range(lo, hi)]
    if got != want:
        extra = sorted(set(got) - set(want))
        missing = sorted(set(want) - set(got))
        mqdtest.fail("%s: received %d messages, want %d (%s..%s); missing %d (first %s), unexpected %d "
                     "(first %s), duplicates %d" % (what, len(got), len(want), want[0], want[-1], len(missing),
                                                    missing[:5], len(extra), extra[:5], len(got) - len(set(got))))
    for m in r.got:
        pid, off = mqdtest.check_delivery_annotations(m, partition=0, where=what)
        if m.body != "d-%05d" % off:
            mqdtest.fail("%s: %s delivered with offset %d" % (what, m.body, off))
        if not m.durable:
            mqdtest.fail("%s: %s lost its durable header" % (what, m.body))


def body(t):
    b = t.broker()
    send(b.url, TOPIC, [Message(body="d-%05d" % i, durable=True) for i in range(N)], timeout=120)
    log("%d durable messages accepted" % N)

    b.kill()
    b.start()
    r = receive(b.url, TOPIC, count=N, linger=1.0, settle=lambda r, m, d: None, timeout=120)
    check_range(r, 0, N, "after 1st restart")
    log("after SIGKILL + restart: all %d delivered (none settled)" % N)

    r = Receiver(b.url, TOPIC, count=HALF, credit=HALF, close="link")
    run_container(r, 120)
    check_range(r, 0, HALF, "accepting consumer")
    check(r.link_closed, "receiver link was not closed by the broker")
    log("first %d accepted, link detached and connection closed cleanly" % HALF)

    b.kill()
    b.start()
    r = receive(b.url, TOPIC, count=N - HALF, linger=2.0, timeout=120)
    check_range(r, HALF, N, "after 2nd restart")
    log("after 2nd SIGKILL + restart: exactly the remaining %d" % (N - HALF))

    z = t.broker("prezero", sets={"segment_prezero": "512KiB", "topic.zeros.segment_bytes": "1MiB"})
    Z = 3000
    pad = {"pad": "p" * 1000}
    send(z.url, "zeros", [Message(body="d-%05d" % i, durable=True, properties=pad) for i in range(Z)],
         timeout=120)
    pdir = os.path.join(z.data_dir, "topics", "zeros", "0")
    zeros, segs, tail = False, [], b""
    for attempt in range(50):  # the zeroer runs beside the flusher: give it a moment
        segs = sorted(f for f in os.listdir(pdir) if f.endswith(".log"))
        with open(os.path.join(pdir, segs[-1]), "rb") as f:
            tail = f.read()
        zeros = len(tail) > 0 and tail.endswith(b"\0" * 4096)
        if zeros:
            break
        if len(tail) >= (1 << 20) - 8192 and attempt % 10 == 9:
            # the last group commit (nearly) filled the segment, no room for zeros: a few more
            # messages roll it, and the new tail gets its zeros
            send(z.url, "zeros", [Message(body="d-%05d" % i, durable=True, properties=pad)
                                  for i in range(Z, Z + 10)], timeout=120)
            Z += 10
        time.sleep(0.1)
    check(len(segs) >= 3, "prezero: %d segments, want several (1 MiB each)" % len(segs))
    check(zeros, "prezero: the running tail segment (%d bytes) does not end in zeros" % len(tail))
    z.kill()
    z.start()
    r = receive(z.url, "zeros", count=Z, linger=1.0, settle=lambda r, m, d: None, timeout=120)
    check_range(r, 0, Z, "prezero after SIGKILL")
    text = z.log_text()
    check("pre-zeroed bytes" in text, "prezero: recovery did not report cutting the zeros")
    check("torn tail" not in text and "unhealthy" not in text,
          "prezero: zeros were taken for damage:\n" + text[-2000:])
    send(z.url, "zeros", [Message(body="d-%05d" % i, durable=True) for i in range(Z, Z + 1000)], timeout=120)
    r = receive(z.url, "zeros", count=Z + 1000, linger=1.0, settle=lambda r, m, d: None, timeout=120)
    check_range(r, 0, Z + 1000, "prezero after appends")
    log("segment_prezero: zeros ahead while running, cut after SIGKILL; %d delivered" % (Z + 1000))


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
