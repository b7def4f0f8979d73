#!/usr/bin/python3
"""Flow control: a receiver granting credit 10 (no prefetch top-up, manual settlement)
never holds more than 10 unsettled messages; with credit used up nothing more arrives;
after it settles 5 and grants 5 more credit, exactly 5 more arrive, until all 100 are
in, in order. Also: the broker honours a drain request (credit consumed or
flow echoed with credit 0)."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, receive, run_container, send  # noqa: E402

from proton import Delivery, Message  # noqa: E402

N = 100
WINDOW = 10
STEP = 5
QUIET = 0.6  # seconds with no arrival expected once credit is exhausted


class Flow(Client):
    def __init__(self, url, topic):
        super().__init__(prefetch=0, auto_accept=False)
        self.url = url
        self.topic = topic
        self.got = []
        self.unsettled = []
        self.max_unsettled = 0
        self.granted = 0
        self.rounds = 0
        self.waiting_quiet = False

    def on_start(self, event):
        self.container = event.container
        conn = self.connect(event.container, self.url)
        self.rcv = event.container.create_receiver(conn, self.topic)
        self.rcv.flow(WINDOW)
        self.granted = WINDOW

    def on_message(self, event):
        self.got.append(event.message.body)
        self.unsettled.append(event.delivery)
        self.max_unsettled = max(self.max_unsettled, len(self.unsettled))
        if len(self.unsettled) > WINDOW:
            return self.fail("holding %d unsettled deliveries with credit window %d"
                             % (len(self.unsettled), WINDOW))
        if len(self.got) > self.granted:
            return self.fail("received %d messages with only %d credit granted" % (len(self.got), self.granted))
        if len(self.got) == self.granted or len(self.got) == N:
            # credit exhausted: nothing may arrive during a quiet period
            self.mark = len(self.got)
            self.container.schedule(QUIET, self)

    def on_timer_task(self, event):
        if len(self.got) != self.mark:
            return self.fail("%d messages arrived after credit was exhausted at %d"
                             % (len(self.got) - self.mark, self.mark))
        if self.rcv.credit != self.granted - len(self.got):
            return self.fail("link credit %d, want %d" % (self.rcv.credit, self.granted - len(self.got)))
        if len(self.got) == N:
            for d in self.unsettled:
                d.update(Delivery.ACCEPTED)
                d.settle()
            self.unsettled = []
            self.finish()
            return
        self.rounds += 1
        for d in self.unsettled[:STEP]:
            d.update(Delivery.ACCEPTED)
            d.settle()
        del self.unsettled[:STEP]
        self.rcv.flow(STEP)
        self.granted += STEP

    def status(self):
        return "received %d of %d, granted %d, unsettled %d" % (len(self.got), N, self.granted, len(self.unsettled))


class Drain(Client):
    """Grants 50 credit with drain=True on an empty topic: the broker must answer
    with a flow that zeroes the credit (drained)."""

    def __init__(self, url, topic):
        super().__init__(prefetch=0, auto_accept=True)
        self.url = url
        self.topic = topic
        self.drained = False

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        self.rcv = event.container.create_receiver(conn, self.topic)

    def on_link_opened(self, event):
        if event.receiver is not None:
            event.receiver.drain(50)

    def on_link_flow(self, event):
        if event.link.is_receiver and not event.link.draining() and not self.drained:
            self.drained = True
            self.credit_after = event.link.credit
            event.connection.close()

    def status(self):
        return "drain not completed (credit %d)" % self.rcv.credit


def body(t):
    b = t.broker()
    topic = "flow"
    send(b.url, topic, [Message(body="f-%03d" % i) for i in range(N)])
    h = Flow(b.url, topic)
    run_container(h, 90)
    check(h.got == ["f-%03d" % i for i in range(N)], "received out of order or wrong: %s" % h.got[:20])
    check(h.max_unsettled == WINDOW, "max unsettled %d, want exactly %d" % (h.max_unsettled, WINDOW))
    log("flow control OK: %d messages, at most %d unsettled, %d rounds" % (N, h.max_unsettled, h.rounds))
    left = receive(b.url, topic, idle=1.5, timeout=30)
    check(not left.got, "accepted messages delivered again: %s" % left.bodies()[:10])

    # drain on an empty topic
    send(b.url, "drain-empty", [Message(body="x")])
    receive(b.url, "drain-empty", count=1, timeout=30)
    d = Drain(b.url, "drain-empty")
    t0 = time.monotonic()
    run_container(d, 30)
    check(d.drained and d.credit_after == 0, "drain: credit %r after drain" % getattr(d, "credit_after", None))
    log("drain answered in %.2fs" % (time.monotonic() - t0))


if __name__ == "__main__":
    mqdtest.main(body, timeout=150)
