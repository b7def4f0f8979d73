#!/usr/bin/python3
"""Start-position filters: 100 messages on a 1-partition topic (two bursts 50 ms apart,
so message 49 and 50 have different enqueued times); a browser reads them once to note
their x-opt-enqueued-time. Then, each case on a NEW group (or a browser), assert the
first message received and the count:
  selector x-opt-offset > '49' | >= '50' | x-opt-sequence-number > 49 |
  x-opt-enqueued-time > t(49) | >= t(50) | > '-1' (earliest) | > '@latest' (only new)
  (forms: key "selector" + descriptor symbol (proton Selector), key
  "apache.org:selector-filter:string" (Event Hubs), descriptor code 0x0000468C00000004)
  rabbitmq:stream-offset-spec first | last | next | ulong 50 | timestamp t(50)
  a browser (distribution-mode copy) with x-opt-offset >= '50'
  a filter on an existing group with no other member moves its position back
The attach echo (remote source filter-set names the applied filter) is checked."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, ann, check, log, run_container, send  # noqa: E402

from proton import Described, Message, symbol, timestamp, ulong  # noqa: E402
from proton.reactor import Copy, Filter, Selector  # noqa: E402

T = "replay42"
SEL = "apache.org:selector-filter:string"
SPEC = "rabbitmq:stream-offset-spec"
N = 100


class FilteredReceiver(Client):
    """Attaches with `options`; records the remote source filter-set; optionally sends
    `then_send` messages to T once attached; stops after `idle` quiet seconds."""

    def __init__(self, url, address, options, idle=1.5, then_send=None):
        super().__init__(prefetch=100, auto_accept=True)
        self.url = url
        self.address = address
        self.options = options
        self.idle = idle
        self.then_send = then_send or []
        self.got = []
        self.echo = None
        self.opened = False
        self.sent = 0
        self.accepted = 0
        self.last = time.monotonic()
        self.closing = False

    def on_start(self, event):
        self.conn = self.connect(event.container, self.url)
        self.rcv = event.container.create_receiver(self.conn, self.address, options=self.options)
        event.container.schedule(0.1, self)

    def on_link_opened(self, event):
        if event.receiver is not None and event.receiver.name == self.rcv.name:
            self.opened = True
            self.echo = mqdtest.data_to_py(event.link.remote_source.filter)
            self.last = time.monotonic()
            if self.then_send:
                self.snd = event.container.create_sender(self.conn, T)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < len(self.then_send):
            event.sender.send(Message(body=self.then_send[self.sent]))
            self.sent += 1

    def on_accepted(self, event):
        self.accepted += 1
        self.last = time.monotonic()

    def on_message(self, event):
        self.got.append(event.message)
        self.last = time.monotonic()

    def on_timer_task(self, event):
        if self.closing:
            return
        if self.opened and self.accepted == len(self.then_send) and time.monotonic() - self.last >= self.idle:
            self.closing = True
            self.finish()
            return
        event.container.schedule(0.1, self)

    def bodies(self):
        return [m.body for m in self.got]

    def on_transport_closed(self, event):
        super().on_transport_closed(event)
        if self.error:
            self.done = True  # fail fast: the broker went away

    def status(self):
        return "received %d from %s" % (len(self.got), self.address)


def group(name):
    return "%s/ConsumerGroups/%s" % (T, name)


def run(b, address, options, then_send=None):
    r = FilteredReceiver(b.url, address, options, then_send=then_send)
    run_container(r, 30)
    return r


def expect(r, first, count, what):
    bodies = r.bodies()
    log("%s: got %d, first %s" % (what, len(bodies), bodies[:1]))
    check(len(bodies) == count and bodies[:1] == ["m-%03d" % first],
          "%s: got %d messages starting %s, want %d starting m-%03d" % (what, len(bodies), bodies[:2], count, first))
    want = ["m-%03d" % i for i in range(first, first + count)]
    check(bodies == want, "%s: messages not contiguous in order: %s" % (what, bodies[:10]))
    offs = [int(ann(m, "x-opt-offset")) for m in r.got]
    check(offs == list(range(first, first + count)), "%s: x-opt-offset %s" % (what, offs[:10]))


def sel(expr):
    return Selector(expr)  # key "selector", descriptor symbol


def sel_keyed(expr):  # Event Hubs SDK style: the descriptor symbol used as the key
    return Filter({symbol(SEL): Described(symbol(SEL), expr)})


def sel_code(expr):  # descriptor code
    return Filter({symbol("selector"): Described(ulong(0x0000468C00000004), expr)})


def spec(v):
    return Filter({symbol(SPEC): Described(symbol(SPEC), v)})


def body(t):
    b = t.broker(sets={"topic.%s.partitions" % T: 1})
    send(b.url, T, [Message(body="m-%03d" % i) for i in range(50)])
    time.sleep(0.05)
    send(b.url, T, [Message(body="m-%03d" % i) for i in range(50, N)])
    br = run(b, T, Copy())
    check(br.bodies() == ["m-%03d" % i for i in range(N)], "browse: got %s" % br.bodies()[:5])
    enq = [int(ann(m, "x-opt-enqueued-time")) for m in br.got]
    t49, t50 = enq[49], enq[50]
    check(t49 < t50, "message 49 enqueued at %d, 50 at %d: want t49 < t50 (sent 50 ms apart)" % (t49, t50))
    check(enq == sorted(enq), "enqueued times not monotonic: %s" % enq)
    log("t49=%d t50=%d" % (t49, t50))

    coll = mqdtest.Collect()
    cases = [
        ("offset > '49'", sel("amqp.annotation.x-opt-offset > '49'"), 50, 50),
        ("offset >= '50'", sel("amqp.annotation.x-opt-offset >= '50'"), 50, 50),
        ("sequence-number > 49", sel("amqp.annotation.x-opt-sequence-number > 49"), 50, 50),
        ("enqueued-time > t49", sel("amqp.annotation.x-opt-enqueued-time > %d" % t49), 50, 50),
        ("enqueued-time >= t50", sel("amqp.annotation.x-opt-enqueued-time >= %d" % t50), 50, 50),
        ("offset > '-1'", sel("amqp.annotation.x-opt-offset > '-1'"), 0, 100),
        ("key-form offset > '49'", sel_keyed("amqp.annotation.x-opt-offset > '49'"), 50, 50),
        ("code-form offset >= '70'", sel_code("amqp.annotation.x-opt-offset >= '70'"), 70, 30),
        ("stream-offset-spec first", spec("first"), 0, 100),
        ("stream-offset-spec last", spec("last"), 99, 1),
        ("stream-offset-spec ulong 50", spec(ulong(50)), 50, 50),
        ("stream-offset-spec timestamp t50", spec(timestamp(t50)), 50, 50),
        ("stream-offset-spec as key only, ulong 60", Filter({symbol(SPEC): ulong(60)}), 60, 40),
    ]
    for i, (what, opt, first, count) in enumerate(cases):
        with coll.case(what):
            r = run(b, group("g%02d" % i), opt)
            expect(r, first, count, what)
            if i == 0:
                echo = r.echo
                log("attach echo: %r" % (echo,))
                check(isinstance(echo, dict) and echo, "attach did not echo the applied filter: remote "
                      "source filter-set %r" % (echo,))
                keys = [str(k) for k in echo]
                check("selector" in keys, "echoed filter-set %r lacks the applied key 'selector'" % (echo,))

    with coll.case("browser with offset >= '50'"):
        r = run(b, T, [Copy(), sel("amqp.annotation.x-opt-offset >= '50'")])
        expect(r, 50, 50, "browser >= '50'")
        r = run(b, T, Copy())
        expect(r, 0, 100, "browser after filtered browser")

    with coll.case("filter moves an existing group's position"):
        r = run(b, group("gmove"), None)
        expect(r, 0, 100, "gmove first read (default earliest)")
        r = run(b, group("gmove"), None)
        check(not r.got, "gmove second read (no filter, resumes at committed offset 100) got %s"
              % r.bodies()[:5])
        r = run(b, group("gmove"), sel("amqp.annotation.x-opt-offset > '89'"))
        expect(r, 90, 10, "gmove rewound with > '89'")

    # only-new forms last: each sends 5 more once attached
    with coll.case("offset > '@latest'"):
        new = ["m-%03d" % i for i in range(N, N + 5)]
        r = run(b, group("glatest"), sel("amqp.annotation.x-opt-offset > '@latest'"), then_send=new)
        expect(r, N, 5, "@latest")
    with coll.case("stream-offset-spec next"):
        new = ["m-%03d" % i for i in range(N + 5, N + 10)]
        r = run(b, group("gnext"), spec("next"), then_send=new)
        expect(r, N + 5, 5, "next")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=170)
