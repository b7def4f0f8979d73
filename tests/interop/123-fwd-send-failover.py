#!/usr/bin/python3
"""Forwarded sends across a leader's crash (issue 33 point 3, src/fwd): a producer
connected to a node that does not lead the partitions it sends to keeps its link while
their leader is SIGKILLed, and duplicate detection keeps every message once.

A real etcd and three nodes (lease_ttl_ms 3000 x MQD_TEST_SLOW); topic orders.f, 6
partitions, replication_factor 3, acks = all, dedup_window_ms 10 min, leaders on every
node. One Proton sender connected to node E = 1 sends keyed messages (50 keys, each with
a message-id) without a pause, at most 200 unsettled.
(a) ROUNDS rounds (3; MQD_FWD_ROUNDS for more): a node V != E that leads partitions of
    orders.f is SIGKILLed; once etcd names other leaders for all of them and the sender
    had 300 more acceptances, V starts again and the in-sync sets fill up. The gap in
    the sender's acceptances around each kill is the pause the client sees (reported:
    p50 and max over the rounds; bounded by the lease + 2 s x SLOW each).
(b) the sender never saw a link or connection error, and no send of it was rejected;
    every message it had accepted is in the partition murmur2 picks for its key, none of
    its messages is stored twice (the re-sends after each crash were deduplicated by the
    new leader), each key's messages in send order.
(c) bad input, a leader that cannot be reached: topic solo.f (1 partition,
    replication_factor 1) lives on node 2 only; a sender on E (which has no copy: its
    partition count comes from the registration) gets 20 accepted, then node 2 is
    SIGKILLed and 20 more are sent: every one of them is settled (none hangs), the ones
    not accepted are rejected with amqp:resource-limit-exceeded naming the partition,
    within the lease + 1 s (+ 1.5 s x SLOW of scheduling) of the kill."""

import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import TTL_MS, get_json, wait_for  # noqa: E402
from mqdfwd import (NPARTS, Sender, check_keyed, cluster_with_topic, keyed, leaders_of,  # noqa: E402
                    read_partitions, url_as)
from mqdtest import SLOW, check, log  # noqa: E402

from proton import Message  # noqa: E402

T = "orders.f"
NKEYS = 50
ROUNDS = int(os.environ.get("MQD_FWD_ROUNDS", "3"))
MAX_MSGS = 2000000


def full_isr(etcd):
    return all(len(get_json(etcd.port, "/mqd/partitions/%s/%d" % (T, p))["isr"]) == 3
               for p in range(NPARTS))


def body(t):
    etcd, brokers, lead = cluster_with_topic(t, T, spread=False)
    E = brokers[1]
    stop = threading.Event()
    s = Sender(url_as(E, "admin"), T, MAX_MSGS, lambda i: keyed(i, NKEYS, "f"),
               until=stop.is_set)
    th = threading.Thread(target=lambda: mqdtest.run_container(s, 600), daemon=True)
    th.start()
    wait_for("500 acceptances", lambda: len(s.ok) >= 500, 30)
    pauses = []
    for rnd in range(ROUNDS):
        lead = leaders_of(etcd, T)
        victims = sorted({n for n in lead.values() if n != 1})
        if not victims:  # node 1 leads everything: move partition 0 to node 2 first
            rc, out, err = mqdtest.mqctl(url_as(E, "admin"), "cluster", "elect", T, "0", "2")
            check(rc == 0, "elect: %s" % (out + err))
            wait_for("node 2 leading %s/0" % T, lambda: leaders_of(etcd, T)[0] == 2, 20)
            victims = [2]
        v = victims[rnd % len(victims)]
        moved = [p for p, n in lead.items() if n == v]
        n0 = len(s.ok)
        t0 = time.monotonic()
        brokers[v].kill()
        wait_for("new leaders of %r" % moved,
                 lambda: all(leaders_of(etcd, T)[p] != v for p in moved), 30)
        wait_for("300 acceptances after the kill (%s)" % s.status(),
                 lambda: len(s.ok) >= n0 + 300 and s.accept_times[-1] > t0, 30)
        times = [x for x in list(s.accept_times) if x > t0 - 1]
        gap = max(b - a for a, b in zip(times, times[1:])) if len(times) > 1 else 0
        pauses.append(gap)
        log("round %d: node %d (led %r) killed; longest gap in acceptances %.3f s; %s"
            % (rnd + 1, v, moved, gap, s.status()))
        check(not s.bad and s.link_cond is None and s.error is None,
              "round %d: the sender saw %r / %r / %r" % (rnd + 1, s.bad[:3], s.link_cond, s.error))
        brokers[v].start()
        wait_for("full in-sync sets after round %d" % (rnd + 1), lambda: full_isr(etcd), 60)
    stop.set()
    th.join(60 * SLOW)
    check(not th.is_alive(), "the sender did not finish: %s" % s.status())
    log("pause over %d rounds: p50 %.3f s, max %.3f s (lease %d ms)"
        % (len(pauses), statistics.median(pauses), max(pauses), TTL_MS))
    check(max(pauses) < TTL_MS / 1000.0 + 2 * SLOW,
          "a pause of %.3f s, more than the lease + 2 s" % max(pauses))
    check(not s.bad and s.link_cond is None and s.error is None,
          "the sender saw %r / %r / %r" % (s.bad[:3], s.link_cond, s.error))
    n = s.sent
    check(len(s.ok) == n, "%d of %d accepted" % (len(s.ok), n))
    parts = read_partitions(brokers, etcd, T, "chk")
    check_keyed(parts, "f", n, NKEYS)
    log("(b) %d sends, every one accepted and stored once, keys in order" % n)

    # (c) a leader that cannot be reached
    rc, out, err = mqdtest.mqctl(url_as(brokers[2], "admin"), "topic", "create", "solo.f",
                                 "--partitions", "1", "--config", "replication_factor=1")
    check(rc == 0, "create solo.f: %s" % (out + err))
    wait_for("solo.f placed", lambda: get_json(etcd.port, "/mqd/partitions/solo.f/0"), 20)
    killed = {}

    def solo(i):
        if i == 20:
            killed["t"] = time.monotonic()
            brokers[2].kill()
        return Message(body="s%d" % i, id="s-%d" % i, durable=True)

    class Paced(Sender):
        def on_accepted(self, e):
            if len(self.ok) + 1 >= 20:
                self.window = 200  # the first 20 accepted before the kill
            super().on_accepted(e)

    p = Paced(url_as(E, "admin"), "solo.f", 40, solo, window=20)
    done_at = {}
    orig = p._other

    def other(e, state):
        done_at[len(p.bad)] = time.monotonic()
        orig(e, state)
    p._other = other
    mqdtest.run_container(p, 60)
    check(p.link_cond is None, "solo.f sender: link error %r" % (p.link_cond,))
    check(len(p.ok) + len(p.bad) == 40, "solo.f: %s (not all settled)" % p.status())
    check(len(p.ok) >= 20 and p.bad, "solo.f: %s, %r" % (p.status(), p.bad[:3]))
    for i, st, cn, cd in p.bad:
        check(st == "rejected" and cn == "amqp:resource-limit-exceeded" and "solo.f/0" in (cd or ""),
              "solo.f send %d: %s %s %s" % (i, st, cn, cd))
    late = max(done_at.values()) - killed["t"]
    log("(c) solo.f: %d accepted, %d rejected, the last %.3f s after the kill: %s"
        % (len(p.ok), len(p.bad), late, p.bad[-1][3]))
    check(late < TTL_MS / 1000.0 + 1 + 1.5 * SLOW, "the last rejection came %.3f s after the kill" % late)
    brokers[2].start()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300 + 60 * ROUNDS)
