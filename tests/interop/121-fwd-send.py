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
    leaders authorize the forwarded links as carol)."""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd  # noqa: E402
from mqdfwd import (NPARTS, Sender, check_keyed, create_topic, keyed, read_partitions,  # noqa: E402
                    send_all, start_cluster, url_as)
from mqdtest import check, log, skip  # noqa: E402

from proton import Message  # noqa: E402

N = 3000
NKEYS = 50
T = "orders.t"


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_cluster(t, etcd)
    E = brokers[1]
    lead = create_topic(etcd, E, T)
    log("leaders of %s: %r" % (T, lead))
    check(set(lead.values()) == {1, 2, 3}, "leaders not spread over the 3 nodes: %r" % lead)
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


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
