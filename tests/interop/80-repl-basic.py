#!/usr/bin/python3
"""Replication, the data path (issue 19 points 1-2 and the redirect): a real etcd and three
real mqd nodes (node_id 1..3, racks a/b/c) on loopback, each with its own data dir.

(a) placement: `mqctl topic create r3 --partitions 1 --config replication_factor=3` on
    node 1 registers /mqd/topics/r3 ({partitions 1, replication_factor 3}); the controller
    writes /mqd/partitions/r3/0 = {leader, epoch 1, replicas: 3 nodes on 3 distinct racks,
    isr: the same 3}; every node logs its role (one leader, two followers).
(b) 2,000 durable sends with acks = all (the default) to the leader: all 2,000 accepted,
    none rejected.
(c) a sender attaching to a follower is served there: its message is forwarded to the
    leader (src/fwd, issue 33) and accepted once the leader took it; a receiver
    attaching to a follower is forwarded to the leader too: it reads the leader's first
    record.
(d) consumers on the leader read exactly the 2,000 bodies, in order (then the two of (c)).
(e) after a quiet moment, every node's partition r3/0 holds the same records byte for
    byte (all three stopped first; their segment files compared record by record), 2,002
    records each (the 2,000 and the two forwarded by the followers in (c)).
(f) a follower never accepts a local write: what it takes goes to the leader, and its
    log holds no record the leader did not ship (same bytes as (e)).
(h) the nodes log in as replication_user (a [user repl], SASL PLAIN) on their fetch
    connections; an anonymous receiver on $repl/r3/0 is refused with
    amqp:unauthorized-access (with a follower's node id in its properties, and without),
    receiving nothing.
(i) `mqctl topic alter r3 --config replication_factor=2` is refused (exit 4, 409:
    reassigning replicas is not built) on the leader and a follower: the topic and its
    replicas stay (the byte comparison of (e) follows). Deleting and growing a replicated
    topic are test 36's.
(g) `mqctl --json cluster status` on each node: the controller etcd names, 3 live nodes
    with their racks and addresses, r3/0 with the leader, epoch 1, replicas and isr etcd
    holds; the leader's high_watermark is 2,000 (a follower's between 0 and 2,000)."""

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (repl_user_sets, Etcd, Props, Receiver, Sender, cluster_sets, count_records,  # noqa: E402
                        get_json, partition_bytes, read_keys, wait_for)
from mqdtest import check, log, skip  # noqa: E402
from proton import uint, ulong  # noqa: E402

N = 2000
RACKS = {1: "a", 2: "b", 3: "c"}




def start_cluster(t, etcd, **extra):
    brokers = {}
    auth = repl_user_sets()
    for i, rack in RACKS.items():
        sets = cluster_sets(etcd, i, rack, replica_lag_ms=10000, **extra)
        sets.update(auth)
        brokers[i] = t.broker("n%d" % i, start=False, sets=sets)
    for b in brokers.values():
        b.start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    return brokers


class FetchProbe(mqdtest.Client):
    """An anonymous receiver on a $repl/ address with the given link properties."""

    def __init__(self, url, address, props):
        super().__init__()
        self.url, self.address, self.props = url, address, props
        self.link_cond = None
        self.got = 0

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        e.container.create_receiver(c, self.address, options=[Props(self.props)] if self.props else None)

    def on_link_opened(self, e):
        e.container.schedule(1.0 * mqdtest.SLOW, self)

    def on_timer_task(self, e):
        self.finish()

    def on_message(self, e):
        self.got += 1

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description, {}) if c else (None, None, {})
        self.finish()


def placed(etcd, topic, part):
    return get_json(etcd.port, "/mqd/partitions/%s/%d" % (topic, part))


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_cluster(t, etcd)
    coll = mqdtest.Collect()
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", "r3", "--partitions", "1",
                                 "--config", "replication_factor=3")
    check(rc == 0, "mqctl topic create: %s" % (out + err))
    with coll.case("(a) placement in etcd"):
        td = wait_for("/mqd/topics/r3", lambda: get_json(etcd.port, "/mqd/topics/r3"), 10)
        check(td["partitions"] == 1 and td["replication_factor"] == 3, "topic key %r" % td)
        ps = wait_for("/mqd/partitions/r3/0", lambda: placed(etcd, "r3", 0), 10)
        log("partition state %r" % ps)
        check(sorted(ps["replicas"]) == [1, 2, 3], "replicas %r" % ps["replicas"])
        check(len({RACKS[i] for i in ps["replicas"]}) == 3, "racks not distinct: %r" % ps)
        check(ps["leader"] in ps["replicas"] and ps["epoch"] == 1, "leader/epoch %r" % ps)
        check(sorted(ps["isr"]) == [1, 2, 3], "isr %r" % ps["isr"])
    leader = ps["leader"]
    followers = [i for i in RACKS if i != leader]
    L = brokers[leader]
    wait_for("leader and follower roles logged", lambda: "r3/0: leader" in L.log_text() and all(
        "r3/0: follower" in brokers[f].log_text() for f in followers), 20)
    with coll.case("(b) %d acks=all sends to the leader" % N):
        s = Sender(L.url, "r3", N, "m")
        mqdtest.run_container(s, 120)
        log("sender: %s" % s.status())
        check(s.link_cond is None, "sender link refused: %r" % (s.link_cond,))
        check(s.accepted == N and not s.rejected, "accepted %d of %d, rejected %r"
              % (s.accepted, N, s.rejected[:3]))
    with coll.case("(g) mqctl --json cluster status on every node"):
        ctl = get_json(etcd.port, "/mqd/controller")["id"]
        for i, b in brokers.items():
            rc, out, err = mqdtest.mqctl(b.url, "--json", "cluster", "status")
            check(rc == 0, "cluster status on node %d: %d %s" % (i, rc, err))
            st = json.loads(out)
            check(st["controller"] == ctl and st["node_id"] == i, "node %d: controller %r (etcd %d)"
                  % (i, st["controller"], ctl))
            nodes = {n["id"]: n for n in st["nodes"]}
            check(sorted(nodes) == [1, 2, 3] and all(n["alive"] for n in nodes.values()) and
                  all(nodes[k]["rack"] == RACKS[k] and nodes[k]["address"] == brokers[k].hostport
                      for k in nodes), "node %d: nodes %r" % (i, st["nodes"]))
            parts = [p for p in st["partitions"] if p["topic"] == "r3"]
            check(len(parts) == 1, "node %d: partitions %r" % (i, st["partitions"]))
            p = parts[0]
            check(p["partition"] == 0 and p["leader"] == leader and p["epoch"] == 1 and
                  p["replicas"] == ps["replicas"] and sorted(p["isr"]) == [1, 2, 3],
                  "node %d: %r vs etcd %r" % (i, p, ps))
            if i == leader:
                check(p["high_watermark"] == N, "leader's high_watermark %r" % p["high_watermark"])
            else:
                check(0 <= p["high_watermark"] <= N, "follower's high_watermark %r" % p["high_watermark"])
        rc, out, err = mqdtest.mqctl(L.url, "cluster", "status")
        check(rc == 0 and "HIGH_WATERMARK" in out and "r3" in out, "table: %r" % out)
        log(out)
    with coll.case("(c) a follower forwards senders' messages and receivers"):
        for f in followers:
            s = Sender(brokers[f].url, "r3", 1, "x%d" % f)
            mqdtest.run_container(s, 30)
            check(s.link_cond is None and s.accepted == 1 and not s.rejected,
                  "sender on node %d: %r, %s" % (f, s.link_cond, s.status()))
            # receivers are forwarded to the leader (issue 33, docs/replication.md
            # "Forwarded receivers"): served on the follower, the leader's records
            r = Receiver(brokers[f].url, "r3/ConsumerGroups/gc%d/Partitions/0" % f, 1)
            mqdtest.run_container(r, 30)
            check(r.link_cond is None and r.bodies[:1] == ["m-0"],
                  "receiver on node %d: %r, got %r" % (f, r.link_cond, r.bodies[:3]))
        log("both followers forwarded a send and a receiver to %s" % L.hostport)
    with coll.case("(h) a fetch link from anyone but replication_user is refused"):
        for props in ({"mqd:node-id": uint(followers[0]), "mqd:fetch-offset": ulong(0)}, {}):
            r = FetchProbe(L.url, "$repl/r3/0", props)
            mqdtest.run_container(r, 30)
            check(r.link_cond is not None and r.link_cond[0] == "amqp:unauthorized-access",
                  "anonymous fetch link with %r: %r" % (props, r.link_cond))
            check(not r.got, "the refused fetch link received %d messages" % r.got)
        text = L.log_text()
        check(all("user=repl container=mqd-node-%d" % f in text for f in followers),
              "the followers did not log in as repl")
    with coll.case("(i) changing a replicated topic's replication_factor is refused (409)"):
        for b in (L, brokers[followers[0]]):
            rc, out, err = mqdtest.mqctl(b.url, "topic", "alter", "r3", "--config",
                                         "replication_factor=2")
            check(rc == 4 and "reassign" in err, "topic alter: %d %s" % (rc, err))
        check(get_json(etcd.port, "/mqd/topics/r3")["replication_factor"] == 3,
              "registration %r" % get_json(etcd.port, "/mqd/topics/r3"))
    with coll.case("(d) consumers on the leader read the %d in order" % N):
        r = Receiver(L.url, "r3/ConsumerGroups/g/Partitions/0", N)
        mqdtest.run_container(r, 60)
        check(r.bodies[:N] == ["m-%d" % i for i in range(N)],
              "read %d, first wrong at %s" % (len(r.bodies), next(
                  (i for i, b in enumerate(r.bodies) if b != "m-%d" % i), None)))
    with coll.case("(e) the followers hold the leader's records byte for byte"):
        # a quiet moment: each follower's log end reaches the leader's (its log says so)
        wait_for("follower settlements", lambda: all(
            os.path.isdir(os.path.join(brokers[f].data_dir, "topics", "r3", "0")) for f in followers), 10)
        time.sleep(1.0 * mqdtest.SLOW)
        for b in brokers.values():
            b.stop()
        raw = {i: partition_bytes(b, "r3", 0) for i, b in brokers.items()}
        n = {i: count_records(v) for i, v in raw.items()}
        log("records per node %r, bytes %r" % (n, {i: len(v) for i, v in raw.items()}))
        check(n[leader] == N + len(followers), "leader holds %d records" % n[leader])
        for f in followers:
            check(raw[f] == raw[leader], "node %d differs from the leader (%d vs %d bytes)"
                  % (f, len(raw[f]), len(raw[leader])))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
