#!/usr/bin/python3
"""Request/response with a dynamic reply-to: Proton's server.py and client.py examples
with only the URL changed. The server consumes from a request address and replies to
msg.reply_to through an anonymous sender (null target, `to` per message); the client
attaches a receiver with a dynamic source and sends requests with reply_to set to the
address the broker assigned. A second round uses a server that opens one named sender
per reply address instead of the anonymous relay."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, run_container  # noqa: E402

from proton import Message  # noqa: E402

REQUESTS = ["Twas brillig, and the slithy toves",
            "Did gire and gymble in the wabe.",
            "All mimsy were the borogroves,",
            "And the mome raths outgrabe."] * 5


class Server(Client):  # examples/python/server.py
    def __init__(self, url, address, anonymous=True):
        super().__init__()
        self.url = url
        self.address = address
        self.anonymous = anonymous
        self.senders = {}
        self.served = 0
        self.ready = False

    def on_start(self, event):
        self.container = event.container
        self.conn = self.connect(event.container, self.url)
        self.receiver = event.container.create_receiver(self.conn, self.address)
        if self.anonymous:
            self.server = self.container.create_sender(self.conn, None)

    def on_link_opened(self, event):
        if event.link.name == self.receiver.name:
            self.ready = True

    def on_message(self, event):
        reply = Message(address=event.message.reply_to, body=event.message.body.upper(),
                        correlation_id=event.message.correlation_id)
        if self.anonymous:
            self.server.send(reply)
        else:
            s = self.senders.get(event.message.reply_to)
            if s is None:
                s = self.container.create_sender(self.conn, event.message.reply_to)
                self.senders[event.message.reply_to] = s
            s.send(reply)
        self.served += 1

    def on_rejected(self, event):
        self.fail("a reply was rejected: %s" % (event.delivery.remote.condition,))


class ClientApp(Client):  # examples/python/client.py
    def __init__(self, url, address, requests, server):
        super().__init__()
        self.url = url
        self.address = address
        self.requests = list(requests)
        self.replies = []
        self.server = server
        self.n = 0

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        self.sender = event.container.create_sender(conn, self.address)
        self.receiver = event.container.create_receiver(conn, None, dynamic=True)

    def next_request(self):
        if self.receiver.remote_source.address:
            self.n += 1
            req = Message(reply_to=self.receiver.remote_source.address, body=self.requests[0],
                          correlation_id="req-%d" % self.n)
            self.sender.send(req)

    def on_link_opened(self, event):
        if event.receiver is not None and event.receiver.name == self.receiver.name:
            addr = self.receiver.remote_source.address
            if not addr:
                return self.fail("dynamic receiver attached without an address assigned")
            log("dynamic reply address: %r" % addr)
            self.next_request()

    def on_message(self, event):
        req = self.requests.pop(0)
        m = event.message
        if m.body != req.upper() or m.correlation_id != "req-%d" % self.n:
            return self.fail("reply %r (correlation-id %r) to %r, want %r (req-%d)"
                             % (m.body, m.correlation_id, req, req.upper(), self.n))
        self.replies.append(m.body)
        if self.requests:
            self.next_request()
        else:
            event.connection.close()
            self.server.finish()

    def status(self):
        return "%d replies, %d requests left; server served %d" % (
            len(self.replies), len(self.requests), self.server.served)


class Both(Client):
    """Runs server and client in one container; client starts once the server listens."""

    def __init__(self, url, address, anonymous):
        super().__init__()
        self.server = Server(url, address, anonymous)
        self.client = ClientApp(url, address, REQUESTS, self.server)

    @property
    def done(self):
        return (self.server.done and self.client.done) or bool(self.error)

    @done.setter
    def done(self, v):
        pass

    @property
    def error(self):
        return self.server.error or self.client.error

    @error.setter
    def error(self, v):
        pass

    def status(self):
        return self.client.status()


def round_trip(url, address, anonymous):
    from proton.reactor import Container
    both = Both(url, address, anonymous)
    c = Container()
    both.server.on_start(type("E", (), {"container": c})())
    c.handler.add(both.server)
    # start the client only once the server's receiver is attached
    starter = _StartWhenReady(c, both)
    c.schedule(0.05, starter)
    t = mqdtest._Ticker(c, both, 60 * mqdtest.SLOW)
    c.schedule(0.05, t)
    c.run()
    if both.error:
        raise mqdtest.TestFailure(both.error)
    if t.timed_out:
        raise mqdtest.TestTimeout("timed out: " + both.status())
    check(len(both.client.replies) == len(REQUESTS), both.status())
    check(both.server.served == len(REQUESTS), "server served %d requests, want %d"
          % (both.server.served, len(REQUESTS)))


class _StartWhenReady:
    def __init__(self, container, both):
        self.c = container
        self.both = both
        self.tries = 0

    def on_timer_task(self, event):
        if self.both.server.ready:
            # per-connection handler for the client
            conn = self.c.connect(self.both.client.url, handler=self.both.client, reconnect=False)
            self.both.client.conns.append(conn)
            cl = self.both.client
            cl.sender = self.c.create_sender(conn, cl.address)
            cl.receiver = self.c.create_receiver(conn, None, dynamic=True)
        elif not self.both.error:
            self.c.schedule(0.05, self)


def body(t):
    b = t.broker()
    round_trip(b.url, "requests", anonymous=True)
    log("anonymous-relay server: %d request/replies OK" % len(REQUESTS))
    round_trip(b.url, "requests2", anonymous=False)
    log("named-sender server: %d request/replies OK" % len(REQUESTS))


if __name__ == "__main__":
    mqdtest.main(body, timeout=150)
