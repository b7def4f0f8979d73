#!/usr/bin/python3
"""Group offsets across a broker crash: 10,000 messages on a 1-partition topic; a member
of group g consumes them at a steady pace (about 1,700/s), accepting each; after 5,000
the broker is SIGKILLed while the consumer is still receiving, then restarted on the
same data dir. A new member of g resumes: it starts at the last persisted commit F
(no gap: F..9999 arrive, in order, each once), the union of both runs covers 0..9999,
and the duplicates (F..4999) are at most about 1 s of consumption plus what was in
flight (offsets are persisted every second)."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, ann, check, log, run_container, send  # noqa: E402
from mqdtest import receive_ff as receive  # noqa: E402

from proton import Message  # noqa: E402

T = "restart43"
G = T + "/ConsumerGroups/g"
N = 10000
KILL_AT = 5000
BATCH = 100        # credit granted per tick
TICK = 0.06        # -> ~1,666 messages/s


class PacedConsumer(Client):
    def __init__(self, url, broker):
        super().__init__(prefetch=0, auto_accept=False)
        self.url = url
        self.broker = broker
        self.got = []
        self.t_first = None
        self.t_kill = None
        self.killed = False

    def on_start(self, event):
        self.conn = self.connect(event.container, self.url)
        self.rcv = event.container.create_receiver(self.conn, G)
        event.container.schedule(TICK, self)

    def on_timer_task(self, event):
        if self.killed or self.done:
            return
        if self.rcv.credit < BATCH:
            self.rcv.flow(BATCH - self.rcv.credit)
        event.container.schedule(TICK, self)

    def on_message(self, event):
        m = event.message
        if self.t_first is None:
            self.t_first = time.monotonic()
        self.got.append(int(m.body))
        event.delivery.update(event.delivery.ACCEPTED)
        event.delivery.settle()
        if len(self.got) == KILL_AT and not self.killed:
            # the link still has credit and messages are on the way: crash the broker now
            self.killed = True
            self.t_kill = time.monotonic()
            os.kill(self.broker.pid, signal.SIGKILL)
            log("broker SIGKILLed after %d accepted (credit left %d)" % (len(self.got), self.rcv.credit))

    def on_transport_closed(self, event):
        # expected: the broker was killed
        self.done = True

    def on_connection_error(self, event):
        self.done = True

    def on_link_error(self, event):
        self.done = True

    def status(self):
        return "received %d" % len(self.got)


def body(t):
    b = t.broker(sets={"topic.%s.partitions" % T: 1})
    send(b.url, T, [Message(body="%d" % i) for i in range(N)], timeout=90)
    log("sent %d" % N)
    c = PacedConsumer(b.url, b)
    run_container(c, 60)
    check(c.killed, "consumer stopped after %d messages without reaching %d" % (len(c.got), KILL_AT))
    b.proc.wait(timeout=10)
    run1 = c.got
    rate = len(run1) / max(c.t_kill - c.t_first, 0.001)
    log("run 1: %d received (%d..%d), %.0f msg/s" % (len(run1), run1[0], run1[-1], rate))
    check(run1 == list(range(len(run1))), "run 1 not 0.. in order: %s" % run1[:10])

    b.start()
    r = receive(b.url, G, idle=2.0, timeout=60)
    run2 = [int(x) for x in r.bodies()]
    check(run2, "after restart the group's new member received nothing (want from the last commit to 9999)")
    first = run2[0]
    log("run 2: %d received, first %d, last %d" % (len(run2), first, run2[-1]))
    check(run2 == list(range(first, N)), "run 2 is not %d..%d contiguous in order (gap or duplicate): "
          "%d messages, first %s, last %s" % (first, N - 1, len(run2), run2[:5], run2[-5:]))
    offs = [int(ann(m, "x-opt-offset")) for m in r.got]
    check(offs == run2, "x-opt-offset does not match the body in run 2")
    check(first <= len(run1), "run 2 starts at %d: messages %d..%d were never delivered (gap)"
          % (first, len(run1), first - 1))
    union = set(run1) | set(run2)
    check(union == set(range(N)), "union of both runs misses %d messages" % (N - len(union)))
    dups = len(run1) - first
    allowed = int(rate * 1.5) + 2 * BATCH
    log("duplicates after the crash: %d (allowed %d = 1.5 s at %.0f/s + in flight)" % (dups, allowed, rate))
    check(dups <= allowed, "%d messages redelivered after the crash (resumed at %d after %d accepted): more "
          "than ~1 s of consumption (%d) + in flight" % (dups, first, len(run1), allowed))
    offsets = mqdtest.group_offsets(b.data_dir, T, "g")
    log("committed offsets in meta.db: %s" % (offsets,))


if __name__ == "__main__":
    mqdtest.main(body, timeout=170)
