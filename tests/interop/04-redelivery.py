#!/usr/bin/python3
"""Redelivery of unsettled and returned messages (shared consumption of T).

A: a receiver takes 15 of 20 messages, accepts the first 5, leaves 10 unsettled and
   its connection closes: a second receiver gets exactly the other 15 (the 10
   unsettled and the 5 never delivered), not the 5 accepted.
B: the same with the link detached (connection kept open) instead.
C: per-message outcomes: released -> redelivered with delivery-count unchanged;
   modified(delivery-failed) -> redelivered with header delivery-count raised by 1;
   modified (not failed) -> redelivered, count unchanged; rejected -> not redelivered;
   accepted -> gone. A later receiver finds nothing left.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Receiver, check, log, receive, run_container, send  # noqa: E402

from proton import Message  # noqa: E402


def take_and_abandon(url, topic, close):
    send(url, topic, [Message(body="%s-%02d" % (topic, i)) for i in range(20)])

    def policy(r, m, d):
        return "accept" if len(r.got) <= 5 else None

    r1 = Receiver(url, topic, count=15, credit=15, linger=1.0, settle=policy, close=close)
    run_container(r1, 30)
    want1 = ["%s-%02d" % (topic, i) for i in range(15)]
    check(r1.bodies() == want1, "%s: first receiver got %s, want %s" % (topic, r1.bodies(), want1))
    check(len(r1.unsettled) == 10, "%s: %d left unsettled, want 10" % (topic, len(r1.unsettled)))
    log("%s: first receiver took 15, accepted 5, left 10 unsettled, closed its %s" % (topic, close))

    r2 = receive(url, topic, count=15, linger=2.0, timeout=30)
    got = r2.bodies()
    want2 = ["%s-%02d" % (topic, i) for i in range(5, 20)]
    check(sorted(got) == want2, "%s: second receiver got %s, want %s (unsettled + undelivered only)"
          % (topic, got, want2))
    check(len(got) == len(set(got)), "%s: second receiver got duplicates: %s" % (topic, got))
    for m in r2.got:
        mqdtest.check_delivery_annotations(m, partition=0, where="%s %s" % (topic, m.body))
    # offsets identify the records: a redelivery carries the record's own offset
    for m in r2.got:
        off = int(mqdtest.ann(m, "x-opt-sequence-number"))
        check(m.body == "%s-%02d" % (topic, off), "%s: %s delivered with offset %d" % (topic, m.body, off))
    log("%s: second receiver got exactly the 15 not accepted" % topic)


def outcomes(url):
    topic = "outcomes"
    names = ["rel", "modfail", "mod", "rej", "acc"]
    send(url, topic, [Message(body=n) for n in names])
    seen = {}

    def policy(r, m, d):
        n = m.body
        seen.setdefault(n, []).append(m.delivery_count)
        if len(seen[n]) > 1:
            return "accept"  # redelivery: done with it
        return {"rel": "release", "modfail": "modify-failed", "mod": "modify",
                "rej": "reject", "acc": "accept"}[n]

    # 5 first deliveries + 3 redeliveries (rel, modfail, mod); then linger for extras
    r = Receiver(url, topic, count=8, credit=100, linger=2.0, settle=policy)
    run_container(r, 30)
    log("deliveries: %s" % seen)
    check(sorted(seen) == sorted(names), "messages seen: %s" % sorted(seen))
    check(seen["rel"] == [0, 0], "released: delivery-counts %s, want [0, 0] (redelivered, not raised)" % seen["rel"])
    check(seen["modfail"] == [0, 1],
          "modified(delivery-failed): delivery-counts %s, want [0, 1]" % seen["modfail"])
    check(len(seen["mod"]) == 2 and seen["mod"][0] == 0 and seen["mod"][1] in (0, 1),
          "modified: delivery-counts %s, want redelivered once" % seen["mod"])
    check(seen["rej"] == [0], "rejected: delivery-counts %s, want delivered once only" % seen["rej"])
    check(seen["acc"] == [0], "accepted: delivery-counts %s, want delivered once only" % seen["acc"])
    check(len(r.got) == 8, "%d deliveries, want 8" % len(r.got))

    left = receive(url, topic, idle=2.0, timeout=30)
    check(not left.got, "a later receiver still got %s" % left.bodies())


def body(t):
    b = t.broker()
    take_and_abandon(b.url, "redeliver-conn", "connection")
    take_and_abandon(b.url, "redeliver-link", "link")
    outcomes(b.url)


if __name__ == "__main__":
    mqdtest.main(body, timeout=150)
