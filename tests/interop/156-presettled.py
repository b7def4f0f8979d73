#!/usr/bin/python3
"""Consumers that ask for pre-settled delivery (issue 39 point 2).

Proton's AtMostOnce (snd-settle-mode settled, as the Erlang amqp10_client's `settled`):
mqd answers the attach with `settled`, sends every delivery pre-settled and takes the
record off the queue as it is sent.

A: 40 messages; an AtMostOnce receiver on T gets all 40, each delivery settled on
   arrival, the attach answered snd-settle-mode settled; it settles nothing and its
   connection closes; the next (plain) consumer gets none of them.
B: 40 messages; an AtMostOnce receiver with credit 10 gets 10 (pre-settled) and goes;
   a plain consumer gets exactly the other 30, in order, delivery-count 0.
C: the answer states what was asked: a plain receiver is answered mixed, one asking for
   unsettled is answered unsettled; both get unsettled deliveries; an unsettled one that
   goes away leaves its 5 for the next consumer (delivery-count 1).
D: a consumer group (T/ConsumerGroups/G) reader with AtMostOnce: 8 pre-settled, the
   group's next reader gets none, `mqctl group describe` shows committed 8.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, receive, send  # noqa: E402

from proton import Link, Message  # noqa: E402
from proton.reactor import AtMostOnce, LinkOption  # noqa: E402


class Unsettled(LinkOption):
    def apply(self, link):
        link.snd_settle_mode = Link.SND_UNSETTLED


def bodies(prefix, n):
    return ["%s-%02d" % (prefix, i) for i in range(n)]


class Watch:
    """Records each delivery's settled flag and the attach answer's snd-settle-mode."""

    def __init__(self):
        self.flags = []
        self.mode = None

    def policy(self, r, m, d):
        self.flags.append(d.settled)
        self.mode = d.link.remote_snd_settle_mode
        return None  # settle nothing


def case_at_most_once(b):
    topic = "ps156a"
    want = bodies(topic, 40)
    send(b.url, topic, [Message(body=x) for x in want])
    w = Watch()
    r = receive(b.url, topic, count=40, options=AtMostOnce(), settle=w.policy,
                linger=0.5 * mqdtest.SLOW, timeout=60)
    check(r.bodies() == want, "the at-most-once receiver got %d: %s" % (len(r.got), r.bodies()[:5]))
    check(w.flags == [True] * 40, "settled flags %s, want 40 pre-settled" % w.flags)
    check(w.mode == Link.SND_SETTLED, "attach answered snd-settle-mode %s, want settled (%s)"
          % (w.mode, Link.SND_SETTLED))
    again = receive(b.url, topic, idle=1.5 * mqdtest.SLOW, timeout=60)
    check(again.bodies() == [], "the next consumer got %d of the 40 again: %s"
          % (len(again.got), again.bodies()[:5]))
    log("A: 40 pre-settled, attach answered settled, the next consumer got none")


def case_partial(b):
    topic = "ps156b"
    want = bodies(topic, 40)
    send(b.url, topic, [Message(body=x) for x in want])
    w = Watch()
    r = receive(b.url, topic, count=10, credit=10, options=AtMostOnce(), settle=w.policy,
                linger=0.5 * mqdtest.SLOW, timeout=60)
    check(r.bodies() == want[:10] and w.flags == [True] * 10,
          "credit 10: got %s settled %s" % (r.bodies(), w.flags))
    c = receive(b.url, topic, count=30, linger=1.0 * mqdtest.SLOW, timeout=60)
    check(c.bodies() == want[10:], "the next consumer got %d: %s, want the 30 after"
          % (len(c.got), c.bodies()[:3]))
    dcs = [m.delivery_count for m in c.got]
    check(dcs == [0] * 30, "delivery-counts %s" % dcs)
    log("B: 10 taken at most once, the next consumer got exactly the other 30")


def case_modes(b):
    topic = "ps156c"
    want = bodies(topic, 5)
    send(b.url, topic, [Message(body=x) for x in want])
    for name, opts, mode in (("mixed", None, Link.SND_MIXED), ("unsettled", Unsettled(), Link.SND_UNSETTLED)):
        w = Watch()
        r = receive(b.url, topic, count=5, options=opts, settle=w.policy, linger=0.3 * mqdtest.SLOW,
                    timeout=60)
        check(r.bodies() == want, "%s receiver got %s" % (name, r.bodies()))
        check(w.flags == [False] * 5, "%s receiver: settled flags %s, want unsettled" % (name, w.flags))
        check(w.mode == mode, "%s receiver: attach answered %s, want %s" % (name, w.mode, mode))
    c = receive(b.url, topic, count=5, linger=1.0 * mqdtest.SLOW, timeout=60)
    check(c.bodies() == want, "after two receivers left them unsettled the consumer got %s" % c.bodies())
    dcs = [m.delivery_count for m in c.got]
    check(dcs == [2] * 5, "delivery-counts %s, want 2 (two lost unsettled attempts)" % dcs)
    log("C: mixed and unsettled answered as asked, deliveries unsettled and redelivered")


def case_group(b):
    topic = "ps156d"
    addr = topic + "/ConsumerGroups/g1"
    want = bodies(topic, 8)
    send(b.url, topic, [Message(body=x) for x in want])
    w = Watch()
    r = receive(b.url, addr, count=8, options=AtMostOnce(), settle=w.policy,
                linger=0.5 * mqdtest.SLOW, timeout=60)
    check(r.bodies() == want and w.flags == [True] * 8, "group reader got %s %s" % (r.bodies(), w.flags))
    again = receive(b.url, addr, idle=1.5 * mqdtest.SLOW, timeout=60)
    check(again.bodies() == [], "the group's next reader got %s" % again.bodies())
    rc, out, err = mqdtest.mqctl(b.url, "--json", "group", "describe", topic, "g1")
    check(rc == 0, "mqctl group describe: %d %s" % (rc, err))
    committed = [p["committed"] for p in json.loads(out)["partitions"]]
    check(committed == [8], "group g1 committed offsets %s, want [8]" % committed)
    log("D: a group reader at most once: 8 pre-settled, committed, none again")


def body(t):
    b = t.broker(sets={"topic.ps156a.partitions": 1, "topic.ps156b.partitions": 1,
                       "topic.ps156c.partitions": 1, "topic.ps156d.partitions": 1})
    coll = mqdtest.Collect()
    for name, fn in (("A: 40 at most once", lambda: case_at_most_once(b)),
                     ("B: credit 10 at most once", lambda: case_partial(b)),
                     ("C: mixed and unsettled", lambda: case_modes(b)),
                     ("D: consumer group", lambda: case_group(b))):
        with coll.case(name):
            fn()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
