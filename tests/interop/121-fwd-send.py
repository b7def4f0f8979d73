#!/usr/bin/python3
"""One broker from any node: sends forwarded to their partition's leader (issue 33, src/fwd).

A real etcd and three nodes (users admin and carol under an [acl] that gives carol
orders.* only; replication_user set, so a node's forwarding connection names the
client's user with mqd:fwd-user); topic orders.t with 6 partitions and
replication_factor 3, whose leaders are spread over all three nodes (checked in etcd).
Every client below is an unmodified Proton client connected to node E = 1 only:
(a) a sender to orders.t: 3000 keyed messages (50 keys), all accepted;
(b) a sender per partition to orders.t/Partitions/N, for every N (4 of them led
    elsewhere): 100 each, all accepted;
(c) the anonymous relay (null target): 300 keyed messages with `to` orders.t and 60 with
    `to` orders.t/Partitions/N, all accepted;
(d) each partition read from its leader: every keyed message in the partition murmur2
    picks for its key, exactly once, each key's messages in send order; every message
    of (b) and the relay's partition-addressed ones in the partition they named;
(e) least privilege on both nodes: carol's sender to `secret` (registered, 6 partitions)
    through E is refused at attach (amqp:unauthorized-access) and nothing of hers is
    stored in secret; her sender to orders.t through E gets all 200 accepted (the
    leaders authorize the forwarded links as carol);
(f) a transactional send through E to a partition another node leads is forwarded with
    the transaction to that leader (src/fwd/txn.c) and accepted; one in the same
    transaction to a partition E leads is refused with amqp:not-implemented ("transaction
    spans partitions led by nodes ..."), and the transaction rolled back (168 tests
    transactions through any node in full)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdfwd import (NPARTS, Sender, check_keyed, cluster_with_topic, create_topic, keyed,  # noqa: E402
                    read_partitions, send_all, url_as)
from mqdtest import check, log  # noqa: E402

from proton import Message  # noqa: E402

N = 3000
NKEYS = 50
T = "orders.t"


def body(t):
    etcd, brokers, lead = cluster_with_topic(t, T)
    E = brokers[1]
    create_topic(etcd, E, "secret")
    elsewhere = [p for p, n in lead.items() if n != 1]

    send_all(url_as(E, "admin"), T, N, lambda i: keyed(i, NKEYS, "a"))
    log("(a) %d keyed sends to %s through node 1: all accepted" % (N, T))

    def part_msg(p):
        return lambda i: Message(body="b:%d:%d" % (p, i), id="b-%d-%d" % (p, i), durable=True)
    for p in range(NPARTS):
        send_all(url_as(E, "admin"), "%s/Partitions/%d" % (T, p), 100, part_msg(p))
    log("(b) per-partition senders through node 1 (%d led elsewhere): all accepted" % len(elsewhere))

    def relay_keyed(i):
        m = keyed(i, NKEYS, "c")
        m.address = T
        return m

    def relay_part(i):
        p = i % NPARTS
        return Message(address="%s/Partitions/%d" % (T, p), body="d:%d:%d" % (p, i),
                       id="d-%d" % i, durable=True)
    send_all(url_as(E, "admin"), None, 300, relay_keyed)
    send_all(url_as(E, "admin"), None, 60, relay_part)
    log("(c) anonymous relay through node 1: all accepted")

    parts = read_partitions(brokers, etcd, T, "chk")
    check_keyed(parts, "a", N, NKEYS)
    check_keyed(parts, "c", 300, NKEYS)
    for tag, n in (("b", 100 * NPARTS), ("d", 60)):
        got = 0
        for p, bodies in parts.items():
            for b in bodies:
                if isinstance(b, str) and b.startswith(tag + ":"):
                    _, bp, _ = b.split(":")
                    check(int(bp) == p, "%s stored in partition %d" % (b, p))
                    got += 1
        check(got == n, "%d of %d %s messages stored" % (got, n, tag))
    total = sum(len(v) for v in parts.values())
    check(total == N + 100 * NPARTS + 360, "partitions hold %d messages, want %d"
          % (total, N + 100 * NPARTS + 360))
    log("(d) every message in its partition once, keys in order (%d in all)" % total)

    s = Sender(url_as(E, "carol"), "secret", 10, lambda i: Message(body="x%d" % i), user="carol")
    mqdtest.run_container(s, 60)
    check(s.link_cond and s.link_cond[0] == "amqp:unauthorized-access",
          "carol's sender to secret through node 1: %r (sent %d, accepted %d)"
          % (s.link_cond, s.sent, len(s.ok)))
    send_all(url_as(E, "carol"), T, 200, lambda i: keyed(i, NKEYS, "e"), user="carol")
    sec = read_partitions(brokers, etcd, "secret", "chk")
    check(sum(len(v) for v in sec.values()) == 0, "secret holds %r" % sec)
    log("(e) carol: refused on secret, nothing stored; 200 to %s accepted" % T)

    from proton import Delivery
    from proton.utils import BlockingConnection
    conn = BlockingConnection(url_as(E, "admin"), timeout=30 * mqdtest.SLOW, allowed_mechs="PLAIN")
    try:
        bt = mqdtest.BlockingTxns(conn)
        tid = bt.declare()
        away = conn.create_sender("%s/Partitions/%d" % (T, elsewhere[0]))
        here_p = next(p for p, n in lead.items() if n == 1)
        here = conn.create_sender("%s/Partitions/%d" % (T, here_p))
        d1 = bt.send(away, Message(body="txn-away", durable=True), tid)
        (st1, data1, c1), = bt.wait_settled([d1])
        d2 = bt.send(here, Message(body="txn-here", durable=True), tid)
        (st2, _, c2), = bt.wait_settled([d2])
        check(mqdtest.txn_outcome_ok(st1, data1, tid),
              "transactional send to %s/%d (led by node %d): %s %s" % (T, elsewhere[0],
                                                                     lead[elsewhere[0]], st1, c1))
        check(st2 == Delivery.REJECTED and c2 is not None and c2.name == "amqp:not-implemented"
              and "transaction spans partitions led by nodes" in (c2.description or ""),
              "transactional send to %s/%d (led here): %s %s" % (T, here_p, st2, c2))
        ok, st, _ = bt.discharge(tid, fail=True)
        check(ok, "rollback of the refused transaction: %s" % st)
    finally:
        conn.close()
    log("(f) a transactional send through node 1 to a partition led elsewhere: forwarded; "
        "to one led here in the same transaction: %s" % c2.name)


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
