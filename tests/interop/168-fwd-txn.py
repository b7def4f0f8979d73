#!/usr/bin/python3
"""Transactions through any node (issue 33 point 5, src/fwd/txn.c).

A real etcd and three nodes (mqdfwd's cluster: SASL PLAIN users under an [acl]); topics
tx.a and tx.b (3 partitions each, replication_factor 3) whose partitions are all led by
node 2 (`mqctl cluster elect`), and orders.x (6 partitions) led by all three nodes.
Every client is an unmodified Proton Python client connected to node E = 1 only, which
leads no partition of tx.a or tx.b; transactions are driven through the coordinator link
(mqdtest.BlockingTxns: declare, transactional transfers, discharge):
(a) commit: a transaction of 6 keyed messages, 3 to tx.a and 3 to tx.b: each transfer
    settled with transactional-state(E's txn-id, accepted); before the commit a
    read-committed group reading every partition from its leader sees none of them; the
    commit is accepted and then every one is there exactly once (and nothing else);
(b) abort: 6 more in a second transaction, discharged with fail=true: accepted, and none
    of them is ever visible;
(c) a transaction through E touching partitions of orders.x led by two other nodes: the
    first transfer is accepted, the second refused with amqp:not-implemented "transaction
    spans partitions led by nodes X and Y; cross-node transactions are not built yet",
    the commit refused (amqp:transaction:rollback, same text); nothing of it visible;
(d) the same with a partition E leads first and one led elsewhere next: refused alike,
    commit refused, nothing visible."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdfwd import (cluster_with_topic, create_topic, keyed, leaders_of,  # noqa: E402
                    read_partitions, url_as)
from mqdcluster import wait_for  # noqa: E402
from mqdtest import BlockingTxns, check, log, txn_outcome_ok  # noqa: E402

from proton import Delivery, Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

TOPICS = ("tx.a", "tx.b")
NP = 3
SPANS = "transaction spans partitions led by nodes"


def bodies_of(parts, tag):
    return sorted(b for v in parts.values() for b in v if isinstance(b, str) and b.startswith(tag + ":"))


def read_all(brokers, etcd, group):
    out = {}
    for tp in TOPICS:
        out.update({(tp, p): v for p, v in read_partitions(brokers, etcd, tp, group, NP).items()})
    return out


def txn_msgs(tag):
    """6 keyed messages: 3 to each topic (sent on the topic's link)."""
    return [(TOPICS[i % 2], keyed(i, 6, tag)) for i in range(6)]


def run_txn(conn, senders, tag):
    bt = BlockingTxns(conn)
    tid = bt.declare()
    ds = [bt.send(senders[tp], m, tid) for tp, m in txn_msgs(tag)]
    outs = bt.wait_settled(ds)
    for i, (st, data, cond) in enumerate(outs):
        check(txn_outcome_ok(st, data, tid), "%s: transfer %d: state %s data %r condition %s"
              % (tag, i, st, data, cond))
    return bt, tid


def spanning(conn, first, second, what):
    bt = BlockingTxns(conn)
    tid = bt.declare()
    s1, s2 = conn.create_sender(first), conn.create_sender(second)
    d1 = bt.send(s1, Message(body="%s:1" % what, id="%s-1" % what, durable=True), tid)
    (st1, data1, c1), = bt.wait_settled([d1])
    d2 = bt.send(s2, Message(body="%s:2" % what, id="%s-2" % what, durable=True), tid)
    (st2, _, c2), = bt.wait_settled([d2])
    ok, st, cond = bt.discharge(tid)
    s1.close()
    s2.close()
    return (st1, data1, c1), (st2, c2), (ok, st, cond), tid


def body(t):
    etcd, brokers, lead = cluster_with_topic(t, "orders.x")
    E = brokers[1]
    for tp in TOPICS:
        create_topic(etcd, E, tp, nparts=NP)
        for p, n in leaders_of(etcd, tp, NP).items():
            if n != 2:
                rc, out, err = mqdtest.mqctl(url_as(E, "admin"), "cluster", "elect", tp, str(p), "2")
                check(rc == 0, "elect %s/%d on node 2: %s" % (tp, p, out + err))
        wait_for("%s led by node 2" % tp,
                 lambda tp=tp: set(leaders_of(etcd, tp, NP).values()) == {2}, 30)
    log("tx.a and tx.b: every partition led by node 2; clients on node 1")

    conn = BlockingConnection(url_as(E, "admin"), timeout=30 * mqdtest.SLOW, allowed_mechs="PLAIN")
    try:
        senders = {tp: conn.create_sender(tp) for tp in TOPICS}
        bt, tid = run_txn(conn, senders, "a")
        pre = read_all(brokers, etcd, "pre")
        check(bodies_of(pre, "a") == [], "open transaction visible: %r" % bodies_of(pre, "a"))
        ok, st, cond = bt.discharge(tid)
        check(ok, "commit through node 1: %s %s" % (st, cond))
        post = read_all(brokers, etcd, "post")
        want = sorted(m.body for _, m in txn_msgs("a"))
        check(bodies_of(post, "a") == want, "after commit: %r, want %r" % (bodies_of(post, "a"), want))
        check(sum(len(v) for v in post.values()) == 6, "after commit the topics hold %r" % post)
        for (tp, p), v in post.items():
            for b in v:
                k = b.split(":")[1]
                check(mqdtest.kafka_partition(k, NP) == p, "%s in %s/%d" % (b, tp, p))
        log("(a) commit of 6 over tx.a and tx.b through node 1: invisible before, all once after")

        bt, tid = run_txn(conn, senders, "b")
        ok, st, cond = bt.discharge(tid, fail=True)
        check(ok, "abort through node 1: %s %s" % (st, cond))
        after = read_all(brokers, etcd, "after")
        check(bodies_of(after, "b") == [], "aborted messages visible: %r" % bodies_of(after, "b"))
        check(bodies_of(after, "a") == sorted(m.body for _, m in txn_msgs("a")),
              "committed ones after the abort: %r" % bodies_of(after, "a"))
        log("(b) abort of 6 through node 1: none visible")

        others = {}
        for p, n in lead.items():
            others.setdefault(n, p)
        check(len(others) == 3, "orders.x leaders: %r" % lead)
        cases = [("c", others[2], others[3]), ("d", others[1], others[2])]
        for what, pa, pb in cases:
            r1, r2, r3, tid = spanning(conn, "orders.x/Partitions/%d" % pa,
                                       "orders.x/Partitions/%d" % pb, what)
            st1, data1, c1 = r1
            if lead[pa] == 1:
                check(st1 == mqdtest.TXN_STATE, "%s: first send (led here): %s %s" % (what, st1, c1))
            else:
                check(txn_outcome_ok(st1, data1, tid), "%s: first send: %s %s" % (what, st1, c1))
            st2, c2 = r2
            nodes = sorted((lead[pa], lead[pb]))
            text = "%s %d and %d; cross-node transactions are not built yet" % (SPANS, nodes[0], nodes[1])
            check(st2 == Delivery.REJECTED and c2 is not None and c2.name == "amqp:not-implemented"
                  and text in (c2.description or ""), "%s: second send: %s %s" % (what, st2, c2))
            ok, st, cond = r3
            check(not ok and st == Delivery.REJECTED and cond is not None
                  and cond.name == "amqp:transaction:rollback" and SPANS in (cond.description or ""),
                  "%s: commit of a spanning transaction: %s %s" % (what, st, cond))
            log("(%s) spanning nodes %r: refused: %s" % (what, nodes, c2.description))
        xs = read_partitions(brokers, etcd, "orders.x", "chk")
        seen = [b for v in xs.values() for b in v]
        check(seen == [], "orders.x holds %r after refused transactions" % seen)
        log("(c, d) nothing of the refused transactions visible")
    finally:
        conn.close()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
