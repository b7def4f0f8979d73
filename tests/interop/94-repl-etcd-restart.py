#!/usr/bin/python3
"""Replication: etcd SIGKILLed and restarted on the same data dir mid-run (issue 19's
acceptance "etcd restarted"). A real etcd and three mqd nodes (racks a/b/c,
lease_ttl_ms = TTL = 3000 x MQD_TEST_SLOW), topic r3: replication_factor 3, acks = all,
min_insync_replicas = 2, flush = sync. The Proton producer and consumer of mqdcrash
(following redirects and etcd's partition key, at-least-once) run throughout.

docs/replication.md (Fencing): a leader acknowledges nothing once less than a third of
its lease TTL is left by its own clock without a keepalive answer; keepalives go every
TTL/3, so with etcd gone its last acceptance comes at most 2/3 TTL after etcd's last
answer, and it acknowledges nothing more until it registered again and re-read its
partition key.

(a) before: the ISR holds 3 and sends are accepted.
(b) etcd SIGKILLed at K and kept down for 2 x TTL + 2 s: acceptances go on until at most
    K + 2/3 TTL + 0.5 s x SLOW; none at all from K + TTL + 0.5 s x SLOW until etcd is
    back; sends in that time are rejected (at least one amqp:precondition-failed, "lost
    its cluster lease"), and sent again by the producer.
(c) etcd restarted at R (same data dir): all three nodes registered again, the partition
    has a leader with an ISR of 3, and the producer's sends are accepted again, each
    within 30 s x SLOW of R; the partition's epoch never went down.
(d) the producer drained: the consumer's offsets ran on one by one (none backwards, no
    gap) and it read every accepted seq; all stopped, the three logs hold the high
    watermark's records, byte-equal below it, and every accepted seq is there."""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import TTL_MS, Etcd, get_json, read_keys, start_nodes, wait_for  # noqa: E402
from mqdcrash import (KEY, TOPIC, Consumer, Producer, check_end, create_topic, drain,  # noqa: E402
                      settled_state)
from mqdtest import SLOW, check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
TTL_S = TTL_MS / 1000.0


def acks_between(prod, a, b):
    return sorted(t for t, _ in list(prod.acked.values()) if a < t <= b)


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS)
    ps0 = create_topic(etcd, brokers[1])
    wait_for("both followers fetching", lambda: brokers[ps0["leader"]].log_text().count("fetches from") >= 2, 20)
    ports = {i: b.port for i, b in brokers.items()}
    prod = Producer(etcd, KEY, ports, TOPIC).start_thread()
    cons = Consumer(etcd, KEY, ports, TOPIC).start_thread()
    coll = mqdtest.Collect()
    try:
        with coll.case("(a) accepted with an ISR of 3"):
            ps0 = wait_for("ISR of 3", lambda: settled_state(etcd), 30)
            wait_for("200 accepted", lambda: len(prod.acked) >= 200, 30)
        rej0 = dict(prod.rejects)
        t_kill = time.monotonic()
        etcd.kill()
        down = 2 * TTL_S + 2
        time.sleep(down)
        t_back = time.monotonic()
        during = acks_between(prod, t_kill, t_back)
        rej = {k: v - rej0.get(k, 0) for k, v in prod.rejects.items() if v - rej0.get(k, 0)}
        log("etcd down %.1f s: %d accepted in that time, the last %.2f s after the kill; rejects %r; %s"
            % (t_back - t_kill, len(during), during[-1] - t_kill if during else -1, rej, prod.status()))
        with coll.case("(b) acceptances stop within the lease margin while etcd is down"):
            fence = 2 * TTL_S / 3 + 0.5 * SLOW
            check(not during or during[-1] - t_kill <= fence,
                  "last acceptance %.2f s after etcd's kill, fencing promises <= %.2f s"
                  % (during[-1] - t_kill, fence))
            late = acks_between(prod, t_kill + TTL_S + 0.5 * SLOW, t_back)
            check(not late, "%d sends accepted between K + TTL + 0.5 s and etcd's return" % len(late))
            check(rej.get("amqp:precondition-failed", 0) > 0,
                  "no send rejected with amqp:precondition-failed (the fenced leader) while etcd was down")
        etcd.start()
        t_up = time.monotonic()
        with coll.case("(c) leadership settles again after etcd returns"):
            wait_for("3 nodes registered again", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 30)
            ps1 = wait_for("ISR of 3 after etcd's return", lambda: settled_state(etcd), 30)
            t_isr = time.monotonic()
            first = wait_for("an acceptance after etcd's return", lambda: prod.first_ack_after(t_up), 30)
            log("etcd back: ISR of 3 after %.2f s (leader %d, epoch %d; before: leader %d, epoch %d), "
                "first acceptance after %.2f s" % (t_isr - t_up, ps1["leader"], ps1["epoch"], ps0["leader"],
                                                  ps0["epoch"], first - t_up))
            check(ps1["epoch"] >= ps0["epoch"], "epoch went down: %d -> %d" % (ps0["epoch"], ps1["epoch"]))
            check(brokers[ps1["leader"]].alive(), "etcd names dead node %d as leader" % ps1["leader"])
            n = len(prod.acked)
            wait_for("200 more accepted", lambda: len(prod.acked) >= n + 200, 30)
            ps1 = wait_for("ISR of 3 before the drain", lambda: settled_state(etcd), 30)
        want = drain(prod, cons, etcd)
    finally:
        prod.stop_flag.set()
        cons.stop_flag.set()
    log("%s; %s" % (prod.status(), cons.status()))
    with coll.case("(d) no accepted send lost, offsets in order, replicas byte-equal"):
        check(not cons.order_errors, "%d order errors: %r" % (len(cons.order_errors), cons.order_errors[:5]))
        check(want <= set(cons.seen.values()), "consumer misses accepted seqs")
        check_end(brokers, get_json(etcd.port, KEY), cons, want)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
