#!/usr/bin/python3
"""Browsers read ahead (up to 128 records per read) and must still deliver exactly the
log: 3 partitions x 700 keyed messages (1 KiB bodies), then
  - a browser (distribution-mode copy) receives all 2,100: per partition the offsets are
    contiguous from 0 and in send order, and every body matches what was sent;
  - the same browser then gets 30 messages sent after it drained (live tail);
  - a browser with a property selector (m3 = 0, m3 set to n % 3) receives exactly the
    matching ones;
  - a browser starting at offset 650 (Event Hubs filter) gets exactly the records at
    offsets >= 650, and nothing more (nor does the selector browser);
  - browsing consumed nothing: a shared consumer afterwards still receives all 2,130."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import ann, check, log  # noqa: E402

from proton import Message, Timeout  # noqa: E402
from proton.reactor import Copy, Selector  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

T = "browse16"
P = 3
N = 700


def body_for(i):
    return ("m%06d-" % i) + "x" * 1010


def recv_all(conn, options, want, timeout=10):
    """Browsed deliveries come pre-settled: nothing to accept."""
    r = conn.create_receiver(T, options=options, credit=500)
    got = []
    for _ in range(want):
        m = r.receive(timeout=timeout)
        got.append((int(ann(m, "x-opt-partition-id")), int(ann(m, "x-opt-offset")), m.body,
                    m.properties["n"]))
    return r, got


def nothing_more(r, what):
    try:
        m = r.receive(timeout=0.5)
    except Timeout:
        return
    check(False, "%s: unexpected extra message n=%s" % (what, m.properties.get("n")))


def body(t):
    b = t.broker(sets={"topic.%s.partitions" % T: P})
    conn = BlockingConnection(b.url, timeout=30)
    s = conn.create_sender(T)
    sent = {}  # n -> partition (learned from the browse), body
    for i in range(N * P):
        s.send(Message(body=body_for(i), properties={"n": i, "m3": i % 3},
                       annotations={"x-opt-partition-key": "k%d" % (i % 97)}))
    log("sent %d" % (N * P))

    r, got = recv_all(conn, [Copy()], N * P)
    per = {p: [] for p in range(P)}
    for part, off, bd, n in got:
        per[part].append((off, bd, n))
        check(bd == body_for(n), "browse: body of n=%d differs" % n)
        sent[n] = part
    total = 0
    for p in range(P):
        offs = [o for o, _, _ in per[p]]
        check(offs == list(range(len(offs))), "browse: partition %d offsets not 0..%d in order: %s..."
              % (p, len(offs) - 1, offs[:10]))
        ns = [n for _, _, n in per[p]]
        check(ns == sorted(ns), "browse: partition %d out of send order" % p)
        total += len(offs)
    check(total == N * P and len(sent) == N * P, "browse: %d records, %d distinct, want %d"
          % (total, len(sent), N * P))
    log("browse: %s per partition, offsets contiguous" % [len(per[p]) for p in range(P)])

    for i in range(N * P, N * P + 30):
        s.send(Message(body=body_for(i), properties={"n": i, "m3": i % 3},
                       annotations={"x-opt-partition-key": "k%d" % (i % 97)}))
    tail = []
    offsets = [off for p in range(P) for off, _, _ in per[p]]
    for _ in range(30):
        m = r.receive(timeout=10)
        tail.append(m.properties["n"])
        offsets.append(int(ann(m, "x-opt-offset")))
    check(sorted(tail) == list(range(N * P, N * P + 30)), "live tail after drain: got %s" % sorted(tail))
    r.close()
    log("live tail: 30 new messages after the read-ahead drained")

    want = [n for n in range(N * P + 30) if n % 3 == 0]
    r, got = recv_all(conn, [Copy(), Selector("m3 = 0")], len(want))
    check(sorted(n for _, _, _, n in got) == want, "selector browse: wrong set")
    nothing_more(r, "selector browse")
    r.close()
    log("selector browse: %d of %d" % (len(got), N * P + 30))

    r = conn.create_receiver(T, options=[Copy(), Selector("amqp.annotation.x-opt-offset >= '650'")],
                             credit=500)
    counts = {p: 0 for p in range(P)}
    expect = sum(1 for off in offsets if off >= 650)
    for _ in range(expect):
        m = r.receive(timeout=10)
        p = int(ann(m, "x-opt-partition-id"))
        check(int(ann(m, "x-opt-offset")) >= 650, "offset filter: got offset %s" % ann(m, "x-opt-offset"))
        counts[p] += 1
    r.close()
    nothing_more(r, "offset >= 650 browse")
    log("offset >= 650 browse: %s (%d, as the log holds)" % (counts, expect))

    q = conn.create_receiver(T, credit=500)
    seen = set()
    for _ in range(N * P + 30):
        m = q.receive(timeout=10)
        q.accept()
        seen.add(m.properties["n"])
    check(len(seen) == N * P + 30, "shared consumer after browsing: %d distinct" % len(seen))
    conn.close()
    log("shared consumer: all %d still there after browsing" % len(seen))


if __name__ == "__main__":
    mqdtest.main(body, timeout=200)
