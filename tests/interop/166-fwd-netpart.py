#!/usr/bin/python3
"""Network partitions with every client on a FOLLOWER (issue 33, acceptance points 2 and
bad input). As root, each of three mqd nodes in its own network namespace, the test and
etcd in another (test 95's layout, mqdnetns.py; skipped with 77 without root, etcd, `ip`
or `nft`): topic f1, 1 partition, replication_factor 3, acks = all, min_insync_replicas
2, flush = sync, dedup_window_ms 60000; lease_ttl_ms 3000 and replica_lag_ms 2000
(x MQD_TEST_SLOW), auto_leader_rebalance off.

The clients are all on node M, a follower of f1/0, and stay there (mqdcrash.on_node): a
Proton producer on `f1` (message-id = body, at-least-once, mqdcrash.Producer) and two
members of group g on `f1/ConsumerGroups/g` (mqdcrash.TopicMember); M forwards them.

(a) the leader L cut from both followers (M among them), not from etcd: L keeps its lease
    and its lead, nothing can be acknowledged (its ISR shrinks to [L]). While the cut
    lasts (bad input): a new sender on M gets its message rejected with a clear
    condition, and a new receiver on `f1/ConsumerGroups/probe/Partitions/0` on M is
    refused with one, each within the lease + 1 s (x SLOW, + 0.5 s of polling); never a
    hang (the probe message, rejected unanswered, may have been stored: the members
    may read it). Healed: the unavailability after the heal (heal -> the producer's next
    acceptance, heal -> the members' next delivery of a record sent after the heal) is
    at most lease + 1 s x SLOW.
(b) the leader L cut from etcd, not from its followers: a follower is elected in a new
    epoch and M's clients go on through it (the pause from the cut is logged); healed:
    the same bound after the heal, and L follows again (ISR 3).
At the end, drained: mqdcrash.fwd_checks: 0 acknowledged lost, no offset twice or
backwards on one member link, no link error, reattach or reconnect of the clients (their
node was never cut off from them); sends refused while nothing could acknowledge them
are allowed (the producer sends them again). The NETPART lines have the figures."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdcluster  # noqa: E402
import mqdnetns  # noqa: E402
import mqdtest  # noqa: E402
from mqdcluster import TTL_MS, get_json, read_keys, wait_for  # noqa: E402
from mqdcrash import Producer, TopicMember, drain_fwd, fwd_checks, on_node  # noqa: E402
from mqdtest import SLOW, check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
TOPIC = "f1"
KEY = "/mqd/partitions/%s/0" % TOPIC
LAG_MS = int(2000 * SLOW)
BOUND = TTL_MS / 1000 + 1.0 * SLOW  # the lease + 1 s
HOLD_S = 2 * SLOW  # each cut kept this long once its effect was seen


class Probe(MessagingHandler):
    """One attach on `url`: a sender that sends one message (what = "send") or a receiver
    (what = "recv"); `outcome` is (seconds from the start, condition name, description)
    of the first settlement/refusal, None while there is none."""

    def __init__(self, url, address, what):
        super().__init__(auto_settle=True)
        self.url, self.address, self.what = url, address, what
        self.outcome = None
        self.sent = False

    def on_start(self, e):
        self.t0 = time.monotonic()
        conn = e.container.connect(self.url, reconnect=False)
        if self.what == "send":
            e.container.create_sender(conn, self.address)
        else:
            e.container.create_receiver(conn, self.address)
        e.container.schedule(0.05, self)

    def _done(self, e, cond):
        if self.outcome is None:
            self.outcome = (time.monotonic() - self.t0, cond.name if cond else None,
                            cond.description if cond else None)
        e.connection.close()

    def on_sendable(self, e):
        if not self.sent:
            self.sent = True
            e.sender.send(Message(body="probe", durable=True))

    def on_accepted(self, e):
        self._done(e, None)

    def on_rejected(self, e):
        self._done(e, e.delivery.remote.condition)

    def on_released(self, e):
        self._done(e, None)

    def on_link_remote_close(self, e):
        self._done(e, e.link.remote_condition)

    def on_message(self, e):
        self._done(e, None)

    def on_timer_task(self, e):
        if self.outcome is None and time.monotonic() - self.t0 < BOUND + 10 * SLOW:
            e.container.schedule(0.05, self)
        elif self.outcome is None:
            self.outcome = (time.monotonic() - self.t0, "hang", None)
            e.container.stop()


def probe(url, address, what):
    p = Probe(url, address, what)
    th = threading.Thread(target=lambda: Container(p).run(), daemon=True)
    th.start()
    th.join(BOUND + 15 * SLOW)
    return p.outcome or (None, "hang", None)


def state(etcd):
    return get_json(etcd.port, KEY)


def isr3(etcd):
    p = state(etcd)
    return p if p and sorted(p["isr"]) == [1, 2, 3] else None


def after_heal(tag, t_heal, wall_heal, prod, members):
    """Seconds from the heal to the next acceptance, and to the next delivery of a record
    sent after the heal."""
    seq = prod.next_seq
    t_ack = wait_for("%s: an acceptance after the heal (%s)" % (tag, prod.status()),
                     lambda: prod.first_ack_after(t_heal), BOUND + 20 * SLOW)

    def first_new():
        ts = [t for c in members for _, _, _, b, t in list(c.deliveries)
              if t > wall_heal and b.startswith("s-") and int(b.split("-")[-1]) >= seq]
        return min(ts) if ts else None
    t_recv = wait_for("%s: a delivery after the heal" % tag, first_new, BOUND + 20 * SLOW)
    return t_ack - t_heal, t_recv - wall_heal


def case_a(coll, net, np, etcd, brokers, m, prod, members, figures):
    ps = wait_for("ISR of 3 before (a)", lambda: isr3(etcd), 40)
    lead, ep = ps["leader"], ps["epoch"]
    others = [np.NODE_ADDR[i] for i in RACKS if i != lead]
    net.cut("n%d" % lead, others)
    try:
        wait_for("(a) the ISR shrunk to [%d]" % lead,
                 lambda: (lambda p: p if p and p["isr"] == [lead] else None)(state(etcd)),
                 LAG_MS / 1000 + 10 * SLOW)
        url = brokers[m].url
        snd = probe(url, TOPIC, "send")
        rcv = probe(url, "%s/ConsumerGroups/probe/Partitions/0" % TOPIC, "recv")
        log("NETPART (a) during the cut of leader %d from its followers: a new sender on node %d: "
            "%r; a new receiver: %r" % (lead, m, snd, rcv))
        time.sleep(HOLD_S)
        p = state(etcd)
    finally:
        t_heal, wall_heal = time.monotonic(), time.time()
        net.heal("n%d" % lead)
    with coll.case("(a) the leader cut from its followers: no election; new links on node M get "
                   "a clear error within the lease + 1 s"):
        check(p["leader"] == lead and p["epoch"] == ep, "the leader or epoch moved: %r" % p)
        for what, (took, name, desc) in (("sender", snd), ("receiver", rcv)):
            check(name not in (None, "hang") and desc, "the new %s got %r (%r)" % (what, name, desc))
            check(took <= BOUND + 0.5 * SLOW, "the new %s's error came after %.2f s" % (what, took))
    send_s, recv_s = after_heal("(a)", t_heal, wall_heal, prod, members)
    figures.append(("(a) leader cut from its followers", send_s, recv_s))
    wait_for("ISR of 3 after (a)", lambda: isr3(etcd), 40)


def case_b(coll, net, np, etcd, brokers, m, prod, members, figures):
    ps = wait_for("ISR of 3 before (b)", lambda: isr3(etcd), 40)
    lead, ep = ps["leader"], ps["epoch"]
    t_cut = time.monotonic()
    net.cut("n%d" % lead, [np.ETCD_ADDR])
    try:
        ps2 = wait_for("(b) a new leader", lambda: (lambda p: p if p and p["epoch"] > ep else None)(
            state(etcd)), 2 * TTL_MS / 1000 + 10 * SLOW)
        t_el = time.monotonic()
        got = wait_for("(b) an acceptance through node %d's new leader" % m,
                       lambda: prod.first_ack_after(t_el), 2 * TTL_MS / 1000 + 20 * SLOW)
        log("NETPART (b) leader %d cut from etcd: node %d leads in epoch %d after %.2f s, the producer's "
            "first acceptance after that %.2f s after the cut" % (lead, ps2["leader"], ps2["epoch"],
                                                                  t_el - t_cut, got - t_cut))
        time.sleep(HOLD_S)
    finally:
        t_heal, wall_heal = time.monotonic(), time.time()
        net.heal("n%d" % lead)
    with coll.case("(b) the leader cut from etcd: a follower took over"):
        check(ps2["leader"] != lead, "still led by %d: %r" % (lead, ps2))
    send_s, recv_s = after_heal("(b)", t_heal, wall_heal, prod, members)
    figures.append(("(b) leader cut from etcd", send_s, recv_s))
    wait_for("ISR of 3 after (b)", lambda: isr3(etcd), 40)


def run(t, net, np):
    etcd = np.NsEtcd(t)
    etcd.start()
    brokers = {}
    for i, rack in RACKS.items():
        sets = mqdcluster.cluster_sets(etcd, i, rack, replica_lag_ms=LAG_MS, auto_leader_rebalance="off")
        brokers[i] = np.NsBroker(t, "n%d" % i, net, "n%d" % i, np.NODE_ADDR[i], sets)
        t.brokers.append(brokers[i])
        brokers[i].start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", TOPIC, "--partitions", "1",
                                 "--config", "replication_factor=3", "--config", "acks=all",
                                 "--config", "min_insync_replicas=2", "--config", "flush=sync",
                                 "--config", "dedup_window_ms=60000")
    check(rc == 0, "topic create: %s" % (out + err))
    ps = wait_for("ISR of 3", lambda: isr3(etcd), 40)
    m = next(i for i in sorted(RACKS) if i != ps["leader"])
    log("%s/0 led by node %d; the clients are on node %d" % (TOPIC, ps["leader"], m))
    ports = {m: brokers[m].port}
    host = np.NODE_ADDR[m]
    prod = on_node(Producer, brokers[m].port, host)(etcd, KEY, ports, TOPIC, rate=100,
                                                    msg_ids=True).start_thread()
    members = [on_node(TopicMember, brokers[m].port, host)(etcd, KEY, ports, TOPIC, name=n).start_thread()
               for n in ("A", "B")]
    coll = mqdtest.Collect()
    figures = []
    try:
        wait_for("the members reading through node %d" % m,
                 lambda: sum(len(c.deliveries) for c in members) > 20, 30)
        case_a(coll, net, np, etcd, brokers, m, prod, members, figures)
        case_b(coll, net, np, etcd, brokers, m, prod, members, figures)
        want = drain_fwd(prod, members)
    finally:
        for c in [prod] + members:
            c.stop_flag.set()
    for what, s, r in figures:
        log("NETPART %s: unavailable after the heal: sends %.2f s, deliveries %.2f s (bound %.2f s)"
            % (what, s, r, BOUND))
    with coll.case("(d) unavailability after each heal at most the lease + 1 s"):
        for what, s, r in figures:
            check(s <= BOUND and r <= BOUND, "%s: sends %.2f s, deliveries %.2f s" % (what, s, r))
    fwd_checks(coll, "NETPART", prod, members, want, refused_ok=True)
    coll.finish()


def body(t):
    mqdnetns.run_cluster(t, RACKS, run)


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
