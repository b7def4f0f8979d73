#!/usr/bin/python3
"""Issue 33 point 4: amqp:connection:redirect under the config key connection_redirect. A
real etcd and nodes 1-3 (racks a/b/c, node 2 with connection_redirect = always); topic
`orders` with 6 partitions and replication_factor 3 placed on them (two leaders each);
then node 4 (connection_redirect = idle), which holds no replica and leads nothing.

(a) a sender to orders/Partitions/P through node 4: its connection is closed with
    amqp:connection:redirect whose info holds hostname and network-host 127.0.0.1 and the
    port of P's leader (etcd); nothing was taken; following it, 15 sends are accepted
    there. A sender to the whole topic `orders`: redirected to partition 0's leader.
(b) node 4 still answers what a node serves itself: mqctl topic routes orders and
    cluster status through it succeed, and a management READ over AMQP too (the leaders'
    addresses; no watermark: high_watermark -1 from "none", it holds no replica).
(c) node 2 (always): a sender to a partition node 2 leads is redirected to another live
    node that leads partitions (1 or 3); node connections are not redirected: the
    followers of node 2's partitions still fetch from it (their ISRs in etcd stay 3).
(d) /metrics of node 4 counts its connection redirects (mqd_redirects_total{kind=
    "connection"} 2); node 1 (off) redirects none: a sender through it to a partition it
    leads is accepted.
(e) validation: `mqd -t` refuses connection_redirect = always without a cluster, and a
    value outside off | idle | always, naming the key."""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, Sender, cluster_sets, create_spread, get_json, metrics_text, read_keys, route_read  # noqa: E402,E501
from mqdcluster import start_nodes, wait_for  # noqa: E402
from mqdtest import SLOW, Collect, check, log, skip  # noqa: E402


RACKS = {1: "a", 2: "b", 3: "c"}
NPARTS = 6
REDIRECT = "amqp:connection:redirect"


class ConnSender(Sender):
    """mqdcluster's Sender that records a connection-level close: (name, description,
    info with str keys)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.conn_cond = None

    def on_connection_error(self, e):
        c = e.connection.remote_condition
        self.conn_cond = (c.name, c.description, {str(k): v for k, v in dict(c.info or {}).items()}) \
            if c else (None, None, {})
        e.connection.close()
        self.finish()


def run(client, what):
    mqdtest.run_container(client, 60)
    log("%s: %s, conn %r, link %r" % (what, client.status(), client.conn_cond, client.link_cond))
    return client


def check_conn_redirect(s, ports, what):
    """The redirect's (url, node) after checking its condition and info; ports: the ports
    it may name, by node id."""
    check(s.sent == 0 and s.accepted == 0, "%s: %s" % (what, s.status()))
    check(s.conn_cond is not None, "%s: no connection close (link %r)" % (what, s.link_cond))
    name, desc, info = s.conn_cond
    port = int(info.get("port", 0))
    node = [i for i, p in ports.items() if p == port]
    check(name == REDIRECT and info.get("hostname") == "127.0.0.1" and
          info.get("network-host") == "127.0.0.1" and node, "%s: %s %r %r (want one of %r)" % (what, name, desc, info, ports))
    return "amqp://127.0.0.1:%d" % port, node[0]


def metric(mport, name, kind):
    return re.findall(r'^%s\{kind="%s"\} (\d+)$' % (name, kind), metrics_text(mport), re.M)


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS,
                          sets_of=lambda i: {"connection_redirect": "always"} if i == 2 else {})
    ps = create_spread(etcd, brokers[1].url, nparts=NPARTS)
    leaders = [ps[p]["leader"] for p in range(NPARTS)]
    key = "/mqd/partitions/orders/%d"
    mport = mqdtest.free_port()
    n4 = t.broker("n4", sets=cluster_sets(etcd, 4, "d", connection_redirect="idle",
                                          metrics_listen="127.0.0.1:%d" % mport))
    wait_for("4 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 4, 20)
    ports = {i: b.port for i, b in brokers.items()}
    coll = Collect()
    with coll.case("(a) node 4 leads nothing: redirected to the partition's leader; followed, accepted"):
        p = 1
        s = run(ConnSender(n4.url, "orders/Partitions/%d" % p, 15, "a"), "sender on node 4")
        url, node = check_conn_redirect(s, ports, "partition sender")
        check(node == leaders[p], "redirected to node %d, partition %d is led by %d" % (node, p, leaders[p]))
        s2 = run(ConnSender(url, "orders/Partitions/%d" % p, 15, "a"), "sender on the leader")
        check(s2.conn_cond is None and s2.link_cond is None and s2.accepted == 15, "followed: %s" % s2.status())
        s = run(ConnSender(n4.url, "orders", 5, "w"), "whole-topic sender on node 4")
        _, node = check_conn_redirect(s, ports, "whole-topic sender")
        check(node == leaders[0], "whole topic sent to node %d, partition 0's leader is %d" % (node, leaders[0]))
    with coll.case("(b) node 4 still serves management"):
        rc, out, err = mqdtest.mqctl(n4.url, "topic", "routes", "orders")
        check(rc == 0 and len(out.splitlines()) == NPARTS + 1, "mqctl topic routes: %d %r %r" % (rc, out, err))
        rc, out, err = mqdtest.mqctl(n4.url, "cluster", "status")
        check(rc == 0, "mqctl cluster status: %d %r" % (rc, err))
        st, ans = route_read(n4.url)
        check(st == 200 and [r["leader"] for r in ans["routes"]] == leaders, "READ: %s %r" % (st, ans))
        # no replica here: no watermark to give, the leaders' addresses all the same
        check(all(r["high_watermark"] == -1 and r["high_watermark_from"] == "none" and
                  r["leader_address"] == "127.0.0.1:%d" % ports[r["leader"]] for r in ans["routes"]),
              "node 4's routes: %r" % ans["routes"])
    with coll.case("(c) node 2 (always): to another live leader; its followers still fetch"):
        mine = [p for p in range(NPARTS) if leaders[p] == 2]
        s = run(ConnSender(brokers[2].url, "orders/Partitions/%d" % mine[0], 5, "c"), "sender on node 2")
        _, node = check_conn_redirect(s, {i: ports[i] for i in (1, 3)}, "node 2's sender")
        check(node != 2 and node in leaders, "node 2 sent it to %d" % node)
        for p in mine:
            check(len(get_json(etcd.port, key % p)["isr"]) == 3, "ISR of %d: %r" % (p, get_json(etcd.port, key % p)))
    with coll.case("(d) metrics; node 1 (off) serves what it leads"):
        got = metric(mport, "mqd_redirects_total", "connection")
        check(got == ["2"], "node 4's connection redirects: %r" % got)
        p1 = leaders.index(1)
        s = run(ConnSender(brokers[1].url, "orders/Partitions/%d" % p1, 10, "d"), "sender on node 1")
        check(s.conn_cond is None and s.accepted == 10, "node 1: %s %r" % (s.status(), s.conn_cond))
    with coll.case("(e) validation"):
        for sets, why in ((["-s", "connection_redirect=always"], "need cluster = etcd"),
                          (["-s", "connection_redirect=sometimes"], "connection_redirect")):
            p = subprocess.run([mqdtest.mqd_bin(), "-t", "-d", t.tmpdir] + sets, capture_output=True,
                               text=True, timeout=60 * SLOW)
            log("mqd -t %r -> %d %r" % (sets, p.returncode, p.stderr.strip()))
            check(p.returncode != 0 and "connection_redirect" in p.stderr and why in p.stderr,
                  "mqd -t %r: %d %r" % (sets, p.returncode, p.stderr))
    for b in list(brokers.values()) + [n4]:
        b.check_alive("at the end")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
