#!/usr/bin/python3
"""SQLite write transactions caused by group consumption: 100,000 small messages are
sent (broker run 1), then consumed through group g (broker run 2: one member, accepting
each, then a clean detach), then the broker is stopped with SIGTERM. The broker logs
"N SQLite write transactions since start" at shutdown; the test reports N for run 2
(everything the consumption caused, including start-up) and asserts that
- all 100,000 messages were received, each once;
- the committed offsets in meta.db (group_offsets) sum to 100,000 and equal the log
  end per partition, and a new member of g (broker run 3) receives nothing;
- offsets are batched: N is far below one transaction per message (< 1 per 100)."""

import os
import re
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, ann, check, log, run_container  # noqa: E402
from mqdtest import receive_ff as receive  # noqa: E402

from proton import Message  # noqa: E402

T = "txn46"
G = T + "/ConsumerGroups/g"
N = 100000
PARTS = 4


class FastSender(Client):
    def __init__(self, url):
        super().__init__()
        self.url = url
        self.sent = 0
        self.accepted = 0
        self.other = 0

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        event.container.create_sender(conn, T)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < N:
            event.sender.send(Message(body="%d" % self.sent))
            self.sent += 1

    def on_accepted(self, event):
        self.accepted += 1
        if self.accepted + self.other == N:
            self.finish()

    def on_rejected(self, event):
        self.other += 1
        self.fail("send rejected: %s" % (event.delivery.remote.condition,))

    def on_released(self, event):
        self.other += 1
        self.fail("send released: %s" % (event.delivery.remote.condition,))

    def status(self):
        return "sent %d accepted %d" % (self.sent, self.accepted)


class GroupReader(Client):
    def __init__(self, url):
        super().__init__(prefetch=500, auto_accept=True)
        self.url = url
        self.n = 0
        self.seen = bytearray(N)
        self.dups = 0
        self.log_end = defaultdict(int)

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        self.rcv = event.container.create_receiver(conn, G)

    def on_message(self, event):
        m = event.message
        i = int(m.body)
        if self.seen[i]:
            self.dups += 1
        self.seen[i] = 1
        self.n += 1
        pid = int(ann(m, "x-opt-partition-id"))
        self.log_end[pid] = max(self.log_end[pid], int(ann(m, "x-opt-offset")) + 1)
        if self.n == N:
            event.container.schedule(1.0, self)

    def on_timer_task(self, event):
        self.rcv.close()

    def on_link_closed(self, event):
        self.finish()

    def status(self):
        return "received %d" % self.n


def txn_count(b):
    text = open(b.logs[-1], "rb").read().decode("utf-8", "replace")
    m = re.findall(r"(\d+) SQLite write transactions since start", text)
    return int(m[-1]) if m else None


def body(t):
    b = t.broker(sets={"topic.%s.partitions" % T: PARTS})
    t0 = time.monotonic()
    s = FastSender(b.url)
    run_container(s, 120)
    log("run 1: %d sent and accepted in %.1fs" % (s.accepted, time.monotonic() - t0))
    check(s.accepted == N, "%d of %d sends accepted" % (s.accepted, N))
    b.stop()
    check(b.proc.returncode == 0, "broker run 1 exit status %s" % b.proc.returncode)
    log("run 1 (produce): %s SQLite write transactions" % txn_count(b))

    b.start()
    t0 = time.monotonic()
    r = GroupReader(b.url)
    run_container(r, 120)
    dt = time.monotonic() - t0
    log("run 2: %d received through %s in %.1fs" % (r.n, G, dt))
    b.stop()
    check(b.proc.returncode == 0, "broker run 2 exit status %s" % b.proc.returncode)
    n2 = txn_count(b)
    print("REPORT: consuming %d messages through a group caused %s SQLite write transactions "
          "(broker run 2, %.1f s of consumption)" % (N, n2, dt), flush=True)
    check(r.dups == 0, "%d duplicate deliveries" % r.dups)
    check(r.n == N and all(r.seen), "received %d of %d (distinct %d)" % (r.n, N, sum(r.seen)))
    check(sum(r.log_end.values()) == N, "log end per partition %s does not sum to %d" % (dict(r.log_end), N))

    offs = mqdtest.group_offsets(b.data_dir, T, "g")
    log("committed offsets in meta.db: %s; log end %s" % (offs, dict(r.log_end)))
    check(offs is not None, "could not read group_offsets from %s/meta.db" % b.data_dir)
    check(sum(offs.values()) == N and offs == dict(r.log_end), "committed offsets %s (sum %d) != log end %s"
          % (offs, sum(offs.values()), dict(r.log_end)))
    check(n2 is not None, "broker run 2 logged no 'N SQLite write transactions since start' at shutdown")
    check(n2 < N // 100, "%d SQLite write transactions for %d consumed messages: offsets not batched" % (n2, N))

    b.start()
    again = receive(b.url, G, idle=2.0, timeout=30)
    check(not again.got, "after all was committed a new member received %d messages" % len(again.got))


if __name__ == "__main__":
    mqdtest.main(body, timeout=175)
