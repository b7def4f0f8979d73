#!/usr/bin/python3
"""Duplicate detection survives a crash: the window is rebuilt from the logs.

Topic `dd` (2 partitions, dedup_window_ms = 10 min): 40 messages with message-ids
(strings and ulongs, spread over both partitions by key) are sent and accepted, mqd is
SIGKILLed and restarted (it rebuilds the window before `ready`), then the same 40 are sent again (each must be accepted) with 10
new ids. A browser must then find exactly 50 records, each id once, and each partition's
offsets must be 0..n-1 with nothing after them (no second copy was stored).

Topic `short` (dedup_window_ms = 1.5 s): 5 messages, the same crash; resent after the
window has passed, they are stored again (10 records): the rebuilt window ends where
the configured one does."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import ann, check, log  # noqa: E402
from proton import Message  # noqa: E402
from proton.reactor import Copy  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

FIRST = 40
NEW = 10


def mid(i):
    return "id-%d" % i if i % 2 == 0 else 1000000 + i  # string and ulong message-ids


def send(url, topic, ids):
    c = BlockingConnection(url, timeout=30 * mqdtest.SLOW)
    s = c.create_sender(topic)
    for i in ids:
        # BlockingSender.send returns once the delivery is settled; anything but
        # accepted raises
        s.send(Message(id=mid(i), body=i, annotations={"x-opt-partition-key": "k%d" % (i % 4)}))
    c.close()


def browse(url, topic, want):
    """Every record of topic (browsing, so nothing is consumed): [(partition, offset, id)]."""
    c = BlockingConnection(url, timeout=30 * mqdtest.SLOW)
    r = c.create_receiver(topic, options=Copy(), credit=want + 50)
    got = []
    deadline = time.monotonic() + 20 * mqdtest.SLOW
    while time.monotonic() < deadline:
        try:
            m = r.receive(timeout=2.0 if len(got) >= want else 5.0)
        except Exception:
            if len(got) >= want:
                break
            continue
        got.append((int(ann(m, "x-opt-partition-id")), int(ann(m, "x-opt-sequence-number")), m.id))
    c.close()
    return got


def check_log(got, want_ids, where):
    ids = [x[2] for x in got]
    check(len(got) == len(want_ids), "%s: %d records stored, want %d: %r" % (where, len(got), len(want_ids), ids))
    check(sorted(map(str, ids)) == sorted(map(str, want_ids)), "%s: ids %r, want %r" % (where, ids, want_ids))
    for p in sorted(set(x[0] for x in got)):
        offs = sorted(x[1] for x in got if x[0] == p)
        check(offs == list(range(len(offs))), "%s: partition %d offsets %r, want 0..%d"
              % (where, p, offs, len(offs) - 1))


def body(t):
    b = t.broker(sets={"topic.dd.dedup_window_ms": "600000", "topic.dd.partitions": "2",
                       "topic.short.dedup_window_ms": "1500"})
    send(b.url, "dd", range(FIRST))
    t_short = time.monotonic()
    send(b.url, "short", range(5))
    parts = set(x[0] for x in browse(b.url, "dd", FIRST))
    check(parts == {0, 1}, "the keys should spread `dd` over both partitions, got %r" % parts)

    b.restart(kill=True)  # SIGKILL: nothing but the logs and meta.db survive
    # the window is rebuilt while the broker starts, before it serves anyone (a window's
    # scan on the event loop would stall every connection)
    text = b.log_text()
    at = text.find("topic=dd: window rebuilt from the log: 40 ids from 40 records")
    check(0 <= at < text.rfind("server: ready"),
          "dd's window should be rebuilt (40 ids) before `ready`:\n%s" % text[-2000:])

    send(b.url, "dd", range(FIRST + NEW))  # 40 retries (accepted, not stored) + 10 new
    got = browse(b.url, "dd", FIRST + NEW)
    check_log(got, [mid(i) for i in range(FIRST + NEW)], "dd after restart")
    log("dd: %d retries after SIGKILL accepted without a second copy; %d records, offsets %r"
        % (FIRST, len(got), {p: max(o for q, o, _ in got if q == p) for p in (0, 1)}))

    time.sleep(max(0.0, 1.5 + 0.5 - (time.monotonic() - t_short)))
    send(b.url, "short", range(5))
    got = browse(b.url, "short", 10)
    check_log(got, [mid(i) for i in range(5)] * 2, "short after the window")
    log("short: resent after its 1.5 s window: stored again (%d records)" % len(got))


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
