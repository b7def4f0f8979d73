#!/usr/bin/python3
"""Consumers connected straight to a leader that steps down (issue 33 point 3): failover
is only a pause for them. A real etcd and three mqd nodes (racks a/b/c,
auto_leader_rebalance off), topic r3 (1 partition, replication_factor 3, acks = all,
min_insync_replicas 2, flush = sync). L leads r3/0 at the start; connected to L only:
a producer (100 a second, at-least-once, mqdcrash.Producer), a member of group gc
(`r3/ConsumerGroups/gc/Partitions/0`) and a `$shared` queue receiver of `r3`, both
accepting each message as it comes (mqdcrash.GroupConsumer).

Three moves with `mqctl cluster elect`, each waited for until both consumers read 50
records sent after it: L -> F (L's consumer links become forwarded links: before, they
were detached with amqp:link:redirect), F -> G (their legs move), G -> L (L leads again
while serving them forwarded: they keep that form, their leg is L's connection to
itself).
- each consumer's link is the one it attached at the start: no link error, no redirect,
  no reattach;
- drained at the end: every accepted seq was read by each consumer at least once;
- no offset comes twice on either link (they never release): what the client held
  unsettled at a move is bound to the new leader's redelivery of it, and what it settled
  below the old leader's committed offset is accepted for it (docs/replication.md,
  "Consumers of a leader that steps down");
- L logged that it moved its consumer links to the new leader."""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, get_json, start_nodes, wait_for  # noqa: E402
from mqdcrash import KEY, TOPIC, GroupConsumer, Producer, create_topic, settled_state  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}


def on_node(cls, port):
    """cls (an mqdcrash client) kept on one node: it never follows etcd's leader."""
    class OnNode(cls):
        def relocate(self, _port, delay=0.1):
            super().relocate(port, delay)
    return OnNode


class QueueReceiver(GroupConsumer):
    """A $shared receiver of the whole topic (the queue), accepting each message."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.address = TOPIC


def twice(deliveries):
    seen, bad = set(), []
    for link, _, off, _, _ in deliveries:
        if (link, off) in seen:
            bad.append((link, off))
        seen.add((link, off))
    return bad


def move(etcd, brokers, to, prod, readers):
    rc, out, err = mqdtest.mqctl(brokers[to].url, "cluster", "elect", TOPIC, "0", str(to))
    check(rc == 0, "cluster elect %d: %s" % (to, out + err))
    wait_for("node %d leading r3/0" % to, lambda: get_json(etcd.port, KEY)["leader"] == to, 20)
    t0, seq0 = time.time(), prod.next_seq

    def fresh(rd):  # 50 records sent after the move (half a second) read through it
        return sum(t > t0 and int(b.split("-")[-1]) >= seq0 for _, _, _, b, t in list(rd.deliveries)) >= 50
    for rd in readers:
        wait_for("50 records sent after the move to node %d read (%s)" % (to, rd.status()),
                 lambda: fresh(rd), 30)
    log("r3/0 moved to node %d; %s; %s" % (to, prod.status(), "; ".join(r.status() for r in readers)))


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"auto_leader_rebalance": "off"})
    create_topic(etcd, brokers[1])
    ps = wait_for("ISR of 3", lambda: settled_state(etcd), 40)
    lead = ps["leader"]
    f, g = [i for i in sorted(RACKS) if i != lead]
    log("r3/0 led by node %d: the clients are on it" % lead)
    ports = {lead: brokers[lead].port}
    prod = on_node(Producer, brokers[lead].port)(etcd, KEY, ports, TOPIC, rate=100).start_thread()
    gc = on_node(GroupConsumer, brokers[lead].port)(etcd, KEY, ports, TOPIC).start_thread()
    qr = on_node(QueueReceiver, brokers[lead].port)(etcd, KEY, ports, TOPIC).start_thread()
    readers = (gc, qr)
    coll = mqdtest.Collect()
    try:
        for rd in readers:
            wait_for("reading on node %d (%s)" % (lead, rd.status()), lambda: len(rd.deliveries) > 20, 30)
        for to in (f, g, lead):
            wait_for("ISR of 3 before the move to %d" % to, lambda: settled_state(etcd), 40)
            move(etcd, brokers, to, prod, readers)
        prod.paused = True
        wait_for("the producer's sends all settled (%s)" % prod.status(), lambda: prod.unsettled() == 0, 30)
        want = set("%s-%d" % (prod.prefix, s) for s in list(prod.acked))
        for rd in readers:
            wait_for("every accepted seq read (%s)" % rd.status(), lambda: want <= set(list(rd.bodies)), 40)
    finally:
        for c in (prod, gc, qr):
            c.stop_flag.set()
    log("%s; %s; %s" % (prod.status(), gc.status(), qr.status()))
    for name, rd in (("group member", gc), ("queue receiver", qr)):
        with coll.case("the %s's link stayed attached (no error, no redirect, no reattach)" % name):
            check(rd.links == 1 and not rd.errors and rd.redirects == 0 and rd.reconnects == 1,
                  "links %d, errors %r, redirects %d, connections %d"
                  % (rd.links, rd.errors, rd.redirects, rd.reconnects))
        with coll.case("the %s read every accepted seq" % name):
            check(want <= set(rd.bodies), "%d accepted seqs not read" % len(want - set(rd.bodies)))
        with coll.case("no offset twice on the %s's link" % name):
            bad = twice(list(rd.deliveries))
            check(not bad, "%d offsets twice (link, offset): %r" % (len(bad), bad[:5]))
    with coll.case("node %d moved its consumer links instead of detaching them" % lead):
        text = brokers[lead].log_text()
        check("its leader here stepped down: served from the new leader" in text,
              "no such line in node %d's log" % lead)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
