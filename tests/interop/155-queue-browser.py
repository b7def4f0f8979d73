#!/usr/bin/python3
"""A queue browser shows what is still on the queue (issue 39 point 1).

Proton's queue_browser pattern: a receiver with distribution-mode copy (Copy()) on the
plain address T (the $shared queue) starts at the queue's committed offset and leaves out
what the queue settled above it; a start filter makes it a replay of the log instead.

A: send 10; browse twice -> 10 each, in order, unsettled copies; a plain receiver then
   consumes all 10 (accept); a browser gets 0.
B: send 10; a receiver with credit 4 accepts 4; a browser gets the 6 left, in order.
C: send 10; a receiver rejects 2 and 5 and releases the other 8 (out-of-order settlement
   above the committed offset); a browser gets the 8 still on the queue, in order, and a
   consumer then the same 8 (delivery-count 0: released, not failed).
D: after A's consumption, a browser with rabbitmq:stream-offset-spec "first" replays all
   10 (the replay filters are what shows consumed records).
E: two partitions: 4 of 12 consumed; the browser shows the 8 others, each partition's in
   order.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, receive, send  # noqa: E402

from proton import Message, symbol  # noqa: E402
from proton.reactor import Copy, Filter  # noqa: E402


def bodies(prefix, n):
    return ["%s-%02d" % (prefix, i) for i in range(n)]


def browse(b, topic, options=None):
    flags = []

    def policy(r, m, d):
        flags.append(d.settled)
        return "accept"  # settles the copy only
    r = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, options=options or Copy(), settle=policy,
                timeout=60)
    check(not any(flags), "browser %s: settled flags %s, want unsettled copies" % (topic, flags))
    return r.bodies()


def case_consumed(b):
    topic = "qb155a"
    want = bodies(topic, 10)
    send(b.url, topic, [Message(body=x) for x in want])
    for n in (1, 2):
        got = browse(b, topic)
        check(got == want, "browse %d before consuming got %s, want the 10 in order" % (n, got))
    r = receive(b.url, topic, count=10, linger=0.5 * mqdtest.SLOW, timeout=60)
    check(r.bodies() == want, "the consumer got %s" % r.bodies())
    got = browse(b, topic)
    check(got == [], "browse after all 10 were consumed got %d: %s" % (len(got), got))
    log("A: browsed 10 twice, consumed 10, browse then showed 0")


def case_partly(b):
    topic = "qb155b"
    want = bodies(topic, 10)
    send(b.url, topic, [Message(body=x) for x in want])
    r = receive(b.url, topic, count=4, credit=4, linger=0.5 * mqdtest.SLOW, timeout=60)
    check(r.bodies() == want[:4], "the consumer with credit 4 got %s" % r.bodies())
    got = browse(b, topic)
    check(got == want[4:], "browse after 4 of 10 were consumed got %s, want %s" % (got, want[4:]))
    log("B: 4 of 10 consumed, the browser showed the 6 left in order")


def case_out_of_order(b):
    topic = "qb155c"
    want = bodies(topic, 10)
    send(b.url, topic, [Message(body=x) for x in want])

    def policy(r, m, d):
        return "reject" if m.body in (want[2], want[5]) else "release"
    r = receive(b.url, topic, count=10, credit=10, settle=policy, linger=0.5 * mqdtest.SLOW,
                timeout=60)
    check(sorted(r.bodies()) == want, "the settling consumer got %s" % r.bodies())
    left = [x for x in want if x not in (want[2], want[5])]
    got = browse(b, topic)
    check(got == left, "browse after 2 rejected and 8 released got %s, want %s" % (got, left))
    c = receive(b.url, topic, count=8, linger=1.0 * mqdtest.SLOW, timeout=60)
    check(c.bodies() == left, "a consumer after the browser got %s, want %s" % (c.bodies(), left))
    dcs = [m.delivery_count for m in c.got]
    check(dcs == [0] * 8, "released messages came back with delivery-counts %s, want 0" % dcs)
    log("C: 2 rejected above the committed offset are left out; the 8 released are shown")


def case_replay(b):
    topic = "qb155a"
    got = browse(b, topic, options=[Copy(), Filter({symbol("rabbitmq:stream-offset-spec"): "first"})])
    check(got == bodies(topic, 10), "a replay browser (offset spec first) got %s, want all 10" % got)
    log("D: a browser with a start filter replays the 10 consumed records")


def case_partitions(b):
    topic = "qb155e"
    want = bodies(topic, 12)
    send(b.url, topic, [Message(body=x, properties={"k": i % 2}) for i, x in enumerate(want)])
    r = receive(b.url, topic, count=4, credit=4, linger=0.5 * mqdtest.SLOW, timeout=60)
    check(len(r.got) == 4 and len(set(r.bodies())) == 4, "the consumer got %s" % r.bodies())
    got = browse(b, topic)
    left = [x for x in want if x not in r.bodies()]
    check(sorted(got) == left, "browse on 2 partitions after 4 consumed got %s, want %s" % (sorted(got), left))
    by_part = {}
    for m in receive(b.url, topic, idle=1.5 * mqdtest.SLOW, options=Copy(), timeout=60).got:
        by_part.setdefault(mqdtest.ann(m, "x-opt-partition-id"), []).append(m.body)
    for p, xs in by_part.items():
        check(xs == sorted(xs), "partition %s browsed out of order: %s" % (p, xs))
    log("E: 2 partitions, 4 consumed: the browser showed the other 8, in order per partition")


def body(t):
    b = t.broker(sets={"topic.qb155a.partitions": 1, "topic.qb155b.partitions": 1,
                       "topic.qb155c.partitions": 1, "topic.qb155e.partitions": 2})
    coll = mqdtest.Collect()
    for name, fn in (("A: browse, consume, browse", lambda: case_consumed(b)),
                     ("B: partly consumed", lambda: case_partly(b)),
                     ("C: settled out of order", lambda: case_out_of_order(b)),
                     ("D: replay filter", lambda: case_replay(b)),
                     ("E: two partitions", lambda: case_partitions(b))):
        with coll.case(name):
            fn()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
