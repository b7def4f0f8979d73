#!/usr/bin/python3
"""Property selectors and shared-mode extras:
- a selector (apache.org:selector-filter:string, JMS syntax over application
  properties) delivers only matching messages, in order; forms: AND with a comparison,
  IN, LIKE, IS NULL, NOT; the group's offset moves past the non-matching ones (a later
  member of the same group without a selector receives nothing);
- header ttl (200 ms) and properties.absolute-expiry-time: expired messages are not
  delivered (a later message without expiry is);
- topic.T.max_delivery_count=2: two modified(delivery-failed) outcomes move the message
  to T/$DeadLetterQueue with x-opt-deadletter-reason and x-opt-deadletter-source
  "T/Partitions/0@OFFSET"; with topic.T.dead_letter=on a rejected message goes there too."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import ann, check, log, send  # noqa: E402
from mqdtest import receive_ff as receive  # noqa: E402

from proton import Message  # noqa: E402
from proton.reactor import Selector  # noqa: E402

SELT = "sel45"
TTLT = "ttl45"
DLQT = "dlq45"
REJT = "rej45"
COLOURS = ["red", "green", "blue"]
N = 30


def sel_msgs():
    out = []
    for i in range(N):
        props = {"colour": COLOURS[i % 3], "n": i, "name": ("alpha-%d" if i % 4 == 0 else "beta-%d") % i}
        if i % 5 == 0:
            props["opt"] = "x"
        out.append(Message(body="s-%02d" % i, properties=props))
    return out


def selectors(b):
    send(b.url, SELT, sel_msgs())
    cases = [
        ("colour = 'red' AND n > 5", lambda i: i % 3 == 0 and i > 5),
        ("colour IN ('green', 'blue')", lambda i: i % 3 != 0),
        ("name LIKE 'alpha%'", lambda i: i % 4 == 0),
        ("opt IS NULL", lambda i: i % 5 != 0),
        ("NOT (n < 25)", lambda i: i >= 25),
    ]
    coll = mqdtest.Collect()
    for j, (expr, pred) in enumerate(cases):
        b.check_alive("before selector case %r" % expr)
        with coll.case("selector %s" % expr):
            addr = "%s/ConsumerGroups/s%d" % (SELT, j)
            want = ["s-%02d" % i for i in range(N) if pred(i)]
            r = receive(b.url, addr, idle=1.5, options=Selector(expr), close="link", timeout=30)
            check(r.bodies() == want, "selector %r delivered %s, want %s" % (expr, r.bodies(), want))
            log("selector %r: %d of %d delivered" % (expr, len(want), N))
            if j == 0:
                # the group's offset moved past the non-matching ones too
                time.sleep(0.3)
                r2 = receive(b.url, addr, idle=1.5, close="link", timeout=30)
                check(not r2.got, "a later member of the group without a selector received %s: the "
                      "non-matching messages should count as consumed for the group" % r2.bodies())
    coll.finish()


def expiry(b):
    now = time.time()
    msgs = [Message(body="ttl-short", ttl=0.2),
            Message(body="abs-expired", expiry_time=now + 0.2),
            Message(body="ttl-long", ttl=600),
            Message(body="no-expiry")]
    send(b.url, TTLT, msgs)
    time.sleep(0.8)
    r = receive(b.url, TTLT, idle=1.5, timeout=30)
    check(r.bodies() == ["ttl-long", "no-expiry"], "after 800 ms got %s, want only ['ttl-long', 'no-expiry'] "
          "(ttl=200 ms and absolute-expiry-time now+200 ms expired)" % r.bodies())


def dead_letter(b):
    send(b.url, DLQT, [Message(body="poison", properties={"p": 1}), Message(body="fine")])
    counts = []

    def policy(rcv, m, d):
        counts.append((m.body, m.delivery_count))
        return "modify-failed" if m.body == "poison" else "accept"
    r = receive(b.url, DLQT, idle=1.5, settle=policy, timeout=30)
    poison = [c for (bd, c) in counts if bd == "poison"]
    check(poison == [0, 1], "poison delivered with delivery-counts %s, want [0, 1] (then dead-lettered "
          "at max_delivery_count=2)" % poison)
    check(r.bodies().count("fine") == 1, "'fine' delivered %d times" % r.bodies().count("fine"))
    d = receive(b.url, DLQT + "/$DeadLetterQueue", idle=1.5, timeout=30)
    check(d.bodies() == ["poison"], "%s/$DeadLetterQueue holds %s, want ['poison']" % (DLQT, d.bodies()))
    m = d.got[0]
    reason = ann(m, "x-opt-deadletter-reason")
    source = ann(m, "x-opt-deadletter-source")
    log("DLQ annotations: reason %r source %r" % (reason, source))
    check(reason is not None and str(reason), "no x-opt-deadletter-reason: %r" % (m.annotations,))
    check(source == "%s/Partitions/0@0" % DLQT, "x-opt-deadletter-source %r, want '%s/Partitions/0@0'"
          % (source, DLQT))
    check((m.properties or {}).get("p") == 1, "dead-lettered message lost its application properties: %r"
          % (m.properties,))
    # nothing left on the topic itself
    r = receive(b.url, DLQT, idle=1.0, timeout=30)
    check(not r.got, "after dead-lettering, %s still delivers %s" % (DLQT, r.bodies()))


def rejected(b):
    send(b.url, REJT, [Message(body="ok-0"), Message(body="bad"), Message(body="ok-1")])
    r = receive(b.url, REJT, idle=1.5, settle=lambda rc, m, d: "reject" if m.body == "bad" else "accept",
                timeout=30)
    check(r.bodies() == ["ok-0", "bad", "ok-1"], "got %s" % r.bodies())
    d = receive(b.url, REJT + "/$DeadLetterQueue", idle=1.5, timeout=30)
    check(d.bodies() == ["bad"], "%s/$DeadLetterQueue holds %s, want ['bad']" % (REJT, d.bodies()))
    source = ann(d.got[0], "x-opt-deadletter-source")
    check(source == "%s/Partitions/0@1" % REJT, "x-opt-deadletter-source %r, want '%s/Partitions/0@1'"
          % (source, REJT))
    check(ann(d.got[0], "x-opt-deadletter-reason") is not None, "no x-opt-deadletter-reason: %r"
          % (d.got[0].annotations,))


def body(t):
    b = t.broker(sets={
        "topic.%s.partitions" % SELT: 1,
        "topic.%s.partitions" % TTLT: 1,
        "topic.%s.partitions" % DLQT: 1,
        "topic.%s.max_delivery_count" % DLQT: 2,
        "topic.%s.partitions" % REJT: 1,
        "topic.%s.dead_letter" % REJT: "on",
    })
    coll = mqdtest.Collect()
    with coll.case("property selectors"):
        selectors(b)
    b.check_alive("after the selector cases")
    with coll.case("ttl / absolute-expiry-time"):
        expiry(b)
    b.check_alive("after the expiry case")
    with coll.case("max_delivery_count -> $DeadLetterQueue"):
        dead_letter(b)
    b.check_alive("after the max_delivery_count case")
    with coll.case("rejected -> $DeadLetterQueue (dead_letter=on)"):
        rejected(b)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=170)
