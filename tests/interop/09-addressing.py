#!/usr/bin/python3
"""Addressing:
- sends to T/Partitions/N (N = 0..3) of a topic configured with 4 partitions
  (--set topic.T.partitions=4) are read back by a shared receiver on T, each with
  x-opt-partition-id == N, per-partition offsets 0.. in send order;
- a partition key routes every message carrying it to one partition; the key is
  echoed in x-opt-partition-key;
- a receiver with distribution-mode copy (proton.reactor.Copy) browses: it sees the
  messages without consuming them, and a later normal receiver still gets all;
- with --set auto_create_topics=off, attaching a receiver or a sender to an unknown
  address is refused with amqp:not-found."""

import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, receive, run_container, send  # noqa: E402

from proton import Message, symbol  # noqa: E402
from proton.reactor import Copy  # noqa: E402

T = "parted"
PER = 25


def partitions(b):
    for n in range(4):
        addr = "%s/Partitions/%d" % (T, n)
        send(b.url, addr, [Message(body="p%d-%03d" % (n, i)) for i in range(PER)])
    # the fixed word is case-insensitive
    send(b.url, "%s/partitions/2" % T, [Message(body="p2-%03d" % PER)])
    r = receive(b.url, T, count=4 * PER + 1, linger=1.5, timeout=60)
    check(len(r.got) == 4 * PER + 1, "shared receiver on %s got %d, want %d" % (T, len(r.got), 4 * PER + 1))
    per = defaultdict(list)
    for m in r.got:
        n = int(m.body[1])
        pid, off = mqdtest.check_delivery_annotations(m, partition=n, where="%s" % m.body)
        per[pid].append((off, m.body))
    for n in range(4):
        want = ["p%d-%03d" % (n, i) for i in range(PER + (1 if n == 2 else 0))]
        got = [b_ for _, b_ in per[n]]
        check(got == want, "partition %d delivered %s, want %s" % (n, got, want))
        check([o for o, _ in per[n]] == list(range(len(want))), "partition %d offsets %s" % (n, [o for o, _ in per[n]]))
    log("T/Partitions/N: 4 partitions routed and read back via the shared receiver")

    # partition keys: all messages with one key land in one partition
    msgs = []
    for i in range(40):
        k = "key-%d" % (i % 4)
        msgs.append(Message(body="k%d-%02d" % (i % 4, i), annotations={symbol("x-opt-partition-key"): k}))
    send(b.url, T, msgs)
    r = receive(b.url, T, count=40, linger=1.0, timeout=60)
    check(len(r.got) == 40, "keyed: got %d of 40" % len(r.got))
    where = defaultdict(set)
    for m in r.got:
        k = "key-%s" % m.body[1]
        mqdtest.check_delivery_annotations(m, pkey=k, where=m.body)
        where[k].add(int(mqdtest.ann(m, "x-opt-partition-id")))
    check(all(len(v) == 1 for v in where.values()), "a key spread over several partitions: %s" % dict(where))
    for v in where.values():
        check(0 <= list(v)[0] < 4, "partition id out of range: %s" % v)
    log("keys -> partitions: %s" % {k: list(v)[0] for k, v in sorted(where.items())})


def browsing(b):
    topic = "browse"
    send(b.url, topic, [Message(body="b-%02d" % i) for i in range(30)])
    want = ["b-%02d" % i for i in range(30)]
    for attempt in range(2):
        br = receive(b.url, topic, count=30, linger=1.0, options=Copy(), timeout=60)
        check(br.bodies() == want, "browser %d got %s" % (attempt, br.bodies()))
    r = receive(b.url, topic, count=30, linger=1.5, timeout=60)
    check(r.bodies() == want, "normal receiver after browsing got %s" % r.bodies())
    log("copy-mode browsing left all 30 messages for the consumer")


class Refused(Client):
    def __init__(self, url, address, sender):
        super().__init__()
        self.url = url
        self.address = address
        self.is_sender = sender
        self.condition = None
        self.opened_ok = False

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        if self.is_sender:
            self.link = event.container.create_sender(conn, self.address)
        else:
            self.link = event.container.create_receiver(conn, self.address)

    def on_link_opened(self, event):
        rs = event.link.remote_source if self.is_sender is False else event.link.remote_target
        if rs is not None and rs.address:
            self.opened_ok = True  # attach answered with a terminus: wait for a detach anyway

    def on_link_error(self, event):
        self.condition = event.link.remote_condition
        self.finish()

    def on_link_closing(self, event):
        self.condition = event.link.remote_condition
        self.finish()

    def status(self):
        return "no detach for %s link to unknown address %s (attach answered with terminus: %s)" % (
            "sender" if self.is_sender else "receiver", self.address, self.opened_ok)


def not_found(t):
    b = t.broker(name="nocreate", sets={"auto_create_topics": "off"})
    for sender in (False, True):
        h = Refused(b.url, "no-such-topic", sender)
        run_container(h, 20)
        what = "sender" if sender else "receiver"
        check(h.condition is not None, "%s attach to unknown address: detached without an error condition" % what)
        check(h.condition.name == "amqp:not-found", "%s attach to unknown address refused with %s, want amqp:not-found"
              % (what, h.condition))
        log("%s to unknown address refused: %s" % (what, h.condition))


def body(t):
    b = t.broker(sets={"topic.%s.partitions" % T: 4})
    coll = mqdtest.Collect()
    with coll.case("T/Partitions/N and keys"):
        partitions(b)
    with coll.case("copy-mode browsing"):
        browsing(b)
    with coll.case("auto_create_topics=off -> amqp:not-found"):
        not_found(t)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=200)
