#!/usr/bin/python3
"""Competing consumers: three receivers (each on its own connection) on the same
address T share its messages. 5,000 messages sent; the union of what they received
equals what was sent, no message twice, and every consumer got some."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, run_container  # noqa: E402

from proton import Message  # noqa: E402

N = 5000
TOPIC = "compete"
CONSUMERS = 3


class Compete(Client):
    def __init__(self, url):
        super().__init__()
        self.url = url
        self.receivers = []
        self.opened = 0
        self.got = {}       # receiver index -> list of bodies
        self.total = 0
        self.sent = 0
        self.confirmed = 0
        self.sender = None
        self.all_in_at = None

    def on_start(self, event):
        self.container = event.container
        for i in range(CONSUMERS):
            conn = self.connect(event.container, self.url)
            r = event.container.create_receiver(conn, TOPIC, name="consumer-%d" % i)
            r.idx = i
            self.got[i] = []
            self.receivers.append(r)

    def on_link_opened(self, event):
        if event.receiver is not None and event.receiver.name.startswith("consumer-"):
            self.opened += 1
            if self.opened == CONSUMERS:
                # all consumers attached: now produce
                conn = self.connect(event.container, self.url)
                self.sender = event.container.create_sender(conn, TOPIC)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < N:
            event.sender.send(Message(body="m-%05d" % self.sent))
            self.sent += 1

    def on_accepted(self, event):
        self.confirmed += 1

    def on_rejected(self, event):
        self.fail("a send was rejected: %s" % (event.delivery.remote.condition,))

    def on_message(self, event):
        self.got[event.receiver.idx].append(event.message.body)
        self.total += 1
        if self.total == N:
            # everything arrived: linger to catch duplicates, then close
            self.all_in_at = time.monotonic()
            event.container.schedule(1.5, self)

    def on_timer_task(self, event):
        self.finish()

    def status(self):
        return "sent %d, confirmed %d, received %s" % (
            self.sent, self.confirmed, {i: len(v) for i, v in self.got.items()})


def body(t):
    b = t.broker()
    h = Compete(b.url)
    run_container(h, 90)
    log(h.status())
    sent = set("m-%05d" % i for i in range(N))
    allgot = [x for v in h.got.values() for x in v]
    check(h.confirmed == N, "%d of %d sends accepted" % (h.confirmed, N))
    dups = len(allgot) - len(set(allgot))
    check(dups == 0, "%d duplicate deliveries across consumers" % dups)
    check(set(allgot) == sent, "union differs from sent: %d missing, %d unexpected"
          % (len(sent - set(allgot)), len(set(allgot) - sent)))
    for i, v in h.got.items():
        check(len(v) > 0, "consumer %d received nothing (%s)" % (i, h.status()))
        # each consumer sees its share in send order (one partition)
        check(v == sorted(v), "consumer %d received its messages out of order" % i)


if __name__ == "__main__":
    mqdtest.main(body, timeout=150)
