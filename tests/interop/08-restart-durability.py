#!/usr/bin/python3
"""Durability across SIGKILL:
1. 10,000 durable messages sent unsettled and accepted by mqd;
2. mqd SIGKILLed and restarted on the same data dir: all 10,000 are delivered, in
   order, intact, with their original offsets (this receiver settles nothing);
3. a consumer accepts exactly the first 5,000 (credit 5,000), then detaches its link
   and closes its connection cleanly (both answered by mqd, so every accept made a
   round trip);
4. mqd SIGKILLed again and restarted: the remaining 5,000 and none of the accepted
   ones are delivered."""

import os
import sys

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


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
