#!/usr/bin/python3
"""Replication: a leader paused past its lease (issue 19 point 3, "zombie leader"). A real
etcd and three mqd nodes (racks a/b/c, lease_ttl_ms 3000, replica_lag_ms 10000), topic r3
with replication_factor 3 and acks = all.

(a) 500 sends to the leader L, all accepted.
(b) L is SIGSTOPped. The controller elects a new leader N from the in-sync set within
    2 x lease_ttl_ms + 6 s (etcd: leader N, epoch 2, L out of the ISR).
(c) a client attached its sender (mqd:acks = leader) to L before the pause; while L is
    stopped it sends 50 messages (they wait in L's socket), then L gets SIGCONT: it
    acknowledges none of them on its own authority. Two guards hold here: its lease ran
    out by its own clock (it is fenced until it reads its partition's state again), and
    the watch event of epoch 2 waiting in its etcd socket makes it step down. Since
    forwarding (src/fwd/send.c) a node that steps down keeps a producer's link and
    forwards its messages to the leader: the 50 are then rejected or accepted BY N
    (stored in epoch 2 on every node, none in L's epoch 1: checked in (f)); (g) takes
    the watch away and shows the first guard alone.
(d) L steps down: its log shows it follows N in epoch 2, and it rejoins the ISR (etcd
    lists all 3 again).
(e) 100 sends to N, all accepted; consumers on N read exactly the 600 in order, plus the
    zombie's messages N accepted by forwarding (c), each once, before the 100.
(g) each node reaches etcd through a relay of its own; N's is cut (bytes stop both ways):
    another leader is elected in epoch 3 within 2 x lease_ttl_ms + 6 s; 50 sends with
    mqd:acks = leader to N, which never saw epoch 3, are all rejected ("lost its cluster
    lease", or, when N already gave up its role, "no reachable leader" after the lease +
    1 s of the forwarding's wait), 0 accepted. Healed, N follows in epoch 3 and the ISR is 3 again; a receiver
    that had read the 600 from N is detached with amqp:link:redirect naming the new
    leader's port when N steps down.
(f) all stopped: the three logs are equal byte for byte (600 records each, plus the
    zombie's forwarded ones, all in epoch 2)."""

import os
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (TTL_MS, Etcd, EtcdProxy, Receiver, Sender, get_json,  # noqa: E402
                        stopped_logs_equal, wait_for, start_nodes, create_rf3)
from mqdtest import SLOW, check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
KEY = "/mqd/partitions/r3/0"


class HeldSender(Sender):
    """Attaches at once, sends only once `go` is set (its link is open before the pause)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.go = threading.Event()
        self.ready = threading.Event()

    def on_start(self, e):
        super().on_start(e)
        e.container.schedule(0.05, self)

    def on_sendable(self, e):
        self.snd = e.sender
        self.ready.set()
        self._send()

    def on_timer_task(self, e):
        self._send()
        if not self.done:
            e.container.schedule(0.05, self)

    def _send(self):
        if self.go.is_set():
            super()._send()


def send(url, n, prefix, props=None):
    s = Sender(url, "r3", n, prefix, props=props)
    mqdtest.run_container(s, 60)
    log("%s: %s" % (prefix, s.status()))
    return s


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    proxies = {i: EtcdProxy(etcd) for i in RACKS}  # each node reaches etcd through its own
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"replica_lag_ms": int(10000 * SLOW)},
                          via=proxies)
    ps = create_rf3(etcd, brokers[1])
    old = ps["leader"]
    L = brokers[old]
    wait_for("both followers fetching", lambda: L.log_text().count("fetches from") >= 2, 20)
    coll = mqdtest.Collect()
    with coll.case("(a) 500 accepted"):
        s = send(L.url, 500, "m")
        check(s.accepted == 500 and not s.rejected, "accepted %d, rejected %r" % (s.accepted, s.rejected[:2]))
    # acks = leader: a zombie would accept these on its own log alone, so only the fence
    # (its lease ran out by its own clock) keeps it from acknowledging them
    zombie = HeldSender(L.url, "r3", 50, "z", props={"mqd:acks": "leader"})
    zt = threading.Thread(target=lambda: mqdtest.run_container(zombie, 90), daemon=True)
    zt.start()
    check(zombie.ready.wait(20 * SLOW), "the zombie's sender link did not open")
    with coll.case("(b) L paused: a new leader from the ISR, epoch 2"):
        os.kill(L.pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        try:
            ps = wait_for("a new leader", lambda: (lambda p: p if p and p["leader"] != old else None)(
                get_json(etcd.port, KEY)), 2 * TTL_MS / 1000 + 6)
            log("new state %r %.2f s after SIGSTOP" % (ps, time.monotonic() - t_stop))
            check(ps["epoch"] == 2 and old not in ps["isr"], "state %r" % ps)
            zombie.go.set()  # its transfers wait in the stopped L's socket
            time.sleep(0.5 * SLOW)
        finally:
            os.kill(L.pid, signal.SIGCONT)
    new = ps["leader"]
    N = brokers[new]
    with coll.case("(c) the woken zombie acknowledges nothing"):
        zt.join(90 * SLOW)
        check(not zt.is_alive(), "the zombie's client did not finish")
        log("zombie sender: %s, link %r, rejected %r" % (zombie.status(), zombie.link_cond,
                                                         sorted(set(zombie.rejected))[:3]))
        # accepted ones were forwarded to N (their epoch is checked in (f))
        check(zombie.accepted + len(zombie.rejected) == 50 or zombie.link_cond is not None,
              "neither all settled nor detached: %s" % zombie.status())
    with coll.case("(d) L steps down and rejoins as a follower"):
        wait_for("L follows N", lambda: "r3/0: follower (leader %d, epoch 2)" % new in L.log_text(), 20)
        wait_for("ISR of 3", lambda: sorted(get_json(etcd.port, KEY)["isr"]) == [1, 2, 3], 30)
    with coll.case("(e) N takes 100; consumers read the 600, none of the zombie's"):
        s = send(N.url, 100, "n")
        check(s.accepted == 100 and not s.rejected, "accepted %d, rejected %r" % (s.accepted, s.rejected[:2]))
        r = Receiver(N.url, "r3/ConsumerGroups/g/Partitions/0", None, idle_s=2.0)
        mqdtest.run_container(r, 60)
        zs = [b for b in r.bodies if b.startswith("z-")]
        check(len(zs) == zombie.accepted and len(set(zs)) == len(zs),
              "zombie records visible: %d, accepted by forwarding %d" % (len(zs), zombie.accepted))
        want = ["m-%d" % i for i in range(500)] + zs + ["n-%d" % i for i in range(100)]
        check(r.bodies == want, "read %d, want %d" % (len(r.bodies), len(want)))
    with coll.case("(g) the leader N cut off from etcd acknowledges nothing"):
        # a receiver on N that has read everything: detached once N steps down
        rcv = Receiver(N.url, "r3/ConsumerGroups/g2/Partitions/0", 10 ** 6, idle_s=10 ** 6)
        rt = threading.Thread(target=lambda: mqdtest.run_container(rcv, 120), daemon=True)
        rt.start()
        wait_for("the receiver read the 600", lambda: len(rcv.bodies) >= 600 + zombie.accepted, 20)
        proxies[new].block()
        t_cut = time.monotonic()
        try:
            ps3 = wait_for("a leader other than N", lambda: (lambda p: p if p and p["leader"] != new else None)(
                get_json(etcd.port, KEY)), 2 * TTL_MS / 1000 + 6)
            log("new state %r %.2f s after the cut" % (ps3, time.monotonic() - t_cut))
            check(ps3["epoch"] == 3, "state %r" % ps3)
            # N never saw epoch 3: it still takes the link, but its lease ran out
            s = send(N.url, 50, "y", props={"mqd:acks": "leader"})
            log("rejections: %r" % sorted(set(s.rejected)))
            check(s.accepted == 0 and len(s.rejected) == 50, "the cut-off leader: accepted %d, "
                  "rejected %d, link %r" % (s.accepted, len(s.rejected), s.link_cond))
            check(all("lost its cluster lease" in (d or "") or "no reachable leader" in (d or "")
                      for _, d in s.rejected),
                  "rejections %r" % sorted(set(s.rejected))[:2])
        finally:
            proxies[new].heal()
        wait_for("N follows in epoch 3", lambda: "r3/0: follower (leader %d, epoch 3)" % ps3["leader"]
                 in N.log_text(), 20)
        wait_for("ISR of 3", lambda: sorted(get_json(etcd.port, KEY)["isr"]) == [1, 2, 3], 30)
        # N's consumer stays attached when N steps down: its link is forwarded to the new
        # leader (src/fwd/recv.c, "Consumers of a leader that steps down"), read on from
        # the group's committed offset there, nothing twice on the link
        rt.join(3 * SLOW)
        check(rt.is_alive() and rcv.link_cond is None,
              "the receiver on N after it stepped down: %r (read %d)" % (rcv.link_cond, len(rcv.bodies)))
        check(len(rcv.bodies) == 600 + zombie.accepted, "the receiver read %d" % len(rcv.bodies))
    with coll.case("(f) the logs are equal byte for byte"):
        raw = stopped_logs_equal(brokers, "r3", 0, new, 600 + zombie.accepted)[new]
        epochs, pos = set(), 0
        while pos + 4 <= len(raw):
            n = int.from_bytes(raw[pos:pos + 4], "little")
            if raw[pos + 28] == 0 and b"z-" in raw[pos + 40:pos + 4 + n]:
                epochs.add(int.from_bytes(raw[pos + 24:pos + 28], "little"))
            pos += 4 + n
        check(epochs <= {2}, "the zombie's messages in epochs %r (want only N's, 2)" % sorted(epochs))
        log("the zombie's %d accepted messages: epochs %r" % (zombie.accepted, sorted(epochs)))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
