#!/usr/bin/python3
"""Keyed sends read by a consumer group: 10,000 messages over 100 partition keys
(message annotation x-opt-partition-key) to a 6-partition topic, read by three
receivers on T/ConsumerGroups/g1 (attached before anything is sent; each accepts).
Asserts: every message exactly once; per key, messages arrive in send order; every
member got some; each partition was read by one member only, offsets 0.. in order; the
partition of each key is Kafka's murmur2 partition (the test's own murmur2, checked
against Kafka's known values, "abc" -> 479470107) and equals x-opt-partition-id."""

import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, ann, check, log, run_container  # noqa: E402

from proton import Message, symbol  # noqa: E402

N = 10000
KEYS = 100
PARTS = 6
TOPIC = "keyed40"
GROUP_ADDR = TOPIC + "/ConsumerGroups/g1"
MEMBERS = 3


def key_of(i):
    return "key-%03d" % (i % KEYS)


class KeyedGroup(Client):
    def __init__(self, url):
        super().__init__(prefetch=100, auto_accept=True)
        self.url = url
        self.opened = 0
        self.got = defaultdict(list)   # member -> [(key, seq, partition, offset)]
        self.total = 0
        self.sent = 0
        self.confirmed = 0
        self.bad_outcomes = []
        self.sender = None
        self.lingering = False

    def on_start(self, event):
        for i in range(MEMBERS):
            conn = self.connect(event.container, self.url)
            r = event.container.create_receiver(conn, GROUP_ADDR, name="member-%d" % i)
            r.idx = i

    def on_link_opened(self, event):
        if event.receiver is not None and event.receiver.name.startswith("member-"):
            self.opened += 1
            if self.opened == MEMBERS:
                log("3 members attached to %s; sending %d keyed messages" % (GROUP_ADDR, N))
                conn = self.connect(event.container, self.url)
                self.sender = event.container.create_sender(conn, TOPIC)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < N:
            i = self.sent
            k = key_of(i)
            event.sender.send(Message(body="%s:%05d" % (k, i // KEYS),
                                      annotations={symbol("x-opt-partition-key"): k}))
            self.sent += 1

    def on_accepted(self, event):
        self.confirmed += 1

    def on_rejected(self, event):
        self.bad_outcomes.append(("rejected", event.delivery.remote.condition))

    def on_released(self, event):
        self.bad_outcomes.append(("released", event.delivery.remote.condition))

    def on_message(self, event):
        m = event.message
        pid, off = mqdtest.check_delivery_annotations(m, where=m.body)
        k, seq = m.body.split(":")
        check(ann(m, "x-opt-partition-key") == k, "%s: x-opt-partition-key %r" % (m.body, ann(m, "x-opt-partition-key")))
        self.got[event.receiver.idx].append((k, int(seq), pid, off))
        self.total += 1
        if self.total == N and not self.lingering:
            self.lingering = True
            event.container.schedule(1.5, self)  # catch duplicates

    def on_timer_task(self, event):
        self.finish()

    def on_transport_closed(self, event):
        super().on_transport_closed(event)
        if self.error:
            self.done = True  # fail fast: the broker went away

    def status(self):
        return "sent %d, confirmed %d, received %d (%s)" % (
            self.sent, self.confirmed, self.total, {i: len(v) for i, v in self.got.items()})


def body(t):
    mqdtest.check_murmur2()
    check(mqdtest.murmur2("abc") == 479470107, "murmur2('abc')")
    b = t.broker(sets={"topic.%s.partitions" % TOPIC: PARTS})
    h = KeyedGroup(b.url)
    try:
        run_container(h, 120)
    except mqdtest.TestFailure:
        log(h.status())
        raise
    log(h.status())
    check(not h.bad_outcomes, "sends not accepted: %s" % h.bad_outcomes[:5])
    check(h.confirmed == N, "%d of %d sends accepted" % (h.confirmed, N))

    allmsgs = [(k, s) for v in h.got.values() for (k, s, _, _) in v]
    check(len(allmsgs) == N, "received %d deliveries, want exactly %d" % (len(allmsgs), N))
    check(len(set(allmsgs)) == N, "%d duplicate deliveries" % (len(allmsgs) - len(set(allmsgs))))
    want = set((key_of(i), i // KEYS) for i in range(N))
    check(set(allmsgs) == want, "received set differs: %d missing" % len(want - set(allmsgs)))

    # partition of each key: murmur2, stable, and reported in x-opt-partition-id
    key_parts = defaultdict(set)
    part_members = defaultdict(set)
    for mem, v in h.got.items():
        for (k, s, pid, off) in v:
            key_parts[k].add(pid)
            part_members[pid].add(mem)
    wrong = {k: sorted(p) for k, p in key_parts.items() if p != {mqdtest.kafka_partition(k, PARTS)}}
    check(not wrong, "keys delivered from a partition other than Kafka's murmur2 partition: %s (want %s)"
          % (dict(list(wrong.items())[:5]), {k: mqdtest.kafka_partition(k, PARTS) for k in list(wrong)[:5]}))
    log("partitions used: %s" % sorted(part_members))
    shared = {p: sorted(m) for p, m in part_members.items() if len(m) != 1}
    check(not shared, "partitions delivered to more than one member (no member joined or left): %s" % shared)

    for mem in range(MEMBERS):
        v = h.got.get(mem, [])
        check(len(v) > 0, "member %d received nothing (%s)" % (mem, h.status()))
        per_key = defaultdict(list)
        per_part = defaultdict(list)
        for (k, s, pid, off) in v:
            per_key[k].append(s)
            per_part[pid].append(off)
        for k, seqs in per_key.items():
            check(seqs == sorted(seqs), "member %d: key %s out of send order: %s" % (mem, k, seqs[:20]))
            check(seqs == list(range(N // KEYS)), "member %d: key %s: got seqs %s..., want 0..%d in order"
                  % (mem, k, seqs[:10], N // KEYS - 1))
        for p, offs in per_part.items():
            check(offs == list(range(len(offs))), "member %d: partition %d offsets not 0.. in order: %s"
                  % (mem, p, offs[:20]))
        log("member %d: %d messages, partitions %s, keys %d" % (mem, len(v), sorted(per_part), len(per_key)))


if __name__ == "__main__":
    mqdtest.main(body, timeout=170)
