#!/usr/bin/python3
"""10,000 messages sent to a one-partition topic arrive in order, each body checked
against its index, with offsets 0..9999. Sender and receiver are Proton's
simple_send.py / simple_recv.py examples with only the URL changed (plus checks)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, run_container  # noqa: E402

from proton import Message  # noqa: E402

N = 10000
TOPIC = "order10k"


class Send(Client):  # examples/python/simple_send.py
    def __init__(self, url, messages):
        super().__init__()
        self.url = url
        self.sent = 0
        self.confirmed = 0
        self.total = messages
        self.bad = 0

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        event.container.create_sender(conn, TOPIC)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < self.total:
            msg = Message(id=(self.sent + 1), body={'sequence': (self.sent + 1)})
            event.sender.send(msg)
            self.sent += 1

    def on_accepted(self, event):
        self.confirmed += 1
        if self.confirmed == self.total:
            log("all messages confirmed")
            event.connection.close()

    def on_rejected(self, event):
        self.fail("send %d rejected: %s" % (self.confirmed, event.delivery.remote.condition))

    def on_released(self, event):
        self.fail("send released: %s" % (event.delivery.remote.condition,))

    def status(self):
        return "sent %d, confirmed %d of %d" % (self.sent, self.confirmed, self.total)


class Recv(Client):  # examples/python/simple_recv.py
    def __init__(self, url, count):
        super().__init__()
        self.url = url
        self.expected = count
        self.received = 0

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        event.container.create_receiver(conn, TOPIC)

    def on_message(self, event):
        if event.message.id and event.message.id < self.received:
            # ignore duplicate message
            return
        if self.expected == 0 or self.received < self.expected:
            i = self.received
            want = {'sequence': i + 1}
            if event.message.body != want or event.message.id != i + 1:
                return self.fail("message %d: id %r body %r, want id %d body %r"
                                 % (i, event.message.id, event.message.body, i + 1, want))
            pid, off = mqdtest.check_delivery_annotations(event.message, partition=0, where="message %d" % i)
            if off != i:
                return self.fail("message %d: x-opt-offset %d, want %d" % (i, off, i))
            self.received += 1
            if self.received == self.expected:
                event.receiver.close()
                event.connection.close()

    def status(self):
        return "received %d of %d" % (self.received, self.expected)


def body(t):
    b = t.broker()
    s = Send(b.url, N)
    run_container(s, 90)
    check(s.confirmed == N, "only %d of %d sends accepted" % (s.confirmed, N))
    r = Recv(b.url, N)
    run_container(r, 90)
    check(r.received == N, "received %d of %d" % (r.received, N))
    log("received %d in order" % N)


if __name__ == "__main__":
    mqdtest.main(body, timeout=200)
