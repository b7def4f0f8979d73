#!/usr/bin/python3
"""In a cluster every topic is the cluster's, replication_factor 1 included (a real etcd,
real mqd nodes 1..3 on racks a/b/c, node 3 with default_replication_factor = 3, and a
node 4 that first runs alone).

(a) auto-create on node 1: a sender to the new name `orders` on node 1 is taken once the
    name is registered (etcd: topics/orders with replication_factor 1 and home 1, its
    partition state leader 1, replicas [1], isr [1], epoch 1, the registration's id) and
    all N sends are accepted; on nodes 2 and 3 a sender (the topic and one partition) is
    served, its message forwarded to node 1 (src/fwd), and a receiver (the topic's
    queue and one group's partition) is served too, forwarded to node 1 (src/fwd/recv.c:
    no redirect, it reads node 1's first message), neither node makes a copy (no
    topics/orders in their data dirs); a group receiver on node 2 reads every accepted
    message once, in order, and a sender on node 3 gets 50 more accepted; the
    anonymous relay on node 2 gets a message to orders accepted (forwarded); `mqctl --json topic list` and `topic show` on
    node 2 list orders with its placement (leader 1, not held there).
(a2) node 2 has max_topics_per_connection 2: one connection attaching senders to three
    new names at once gets two registered and the third refused (that limit named).
(b) two nodes auto-create one name at the same time (nodes 1 and 2, ROUNDS names): etcd
    holds one registration and one partition state per name, the two clients each follow
    a redirect when they get one (or is served where it is, forwarding), every message
    either client had accepted is read from
    the one leader, and the other node holds no copy.
(c) `mqctl topic create c3` on node 3 (default_replication_factor = 3) without a
    replication_factor: the registration says 3, the controller places it on three nodes
    with ISR 3; `topic show` on node 3 reports replication_factor 3; a sender that
    auto-creates `auto3` on node 3 gets replication_factor 3 too and its sends accepted.
(d) upgrade: node 4 runs alone first (cluster = none) with `legacy` (100 messages),
    `orders` (30 of its own) and a declared, empty `decl` (node 1 auto-created the
    cluster's `decl`); then it joins the cluster (its config now says replication_factor
    3 for every topic): it registers legacy with itself as its only replica and leader (nodes 1-3 forward a sender's message to it, a receiver on node 1 reads the 100 forwarded from it),
    its empty decl gives way to the cluster's (copy deleted, a sender's message forwarded to node 1),
    and its own orders is kept (30 records on disk) but not served (logged loudly, a
    sender to orders on node 4 is redirected to node 1, a receiver there is forwarded to
    node 1's orders and reads the cluster's messages, none of node 4's own; `topic show`
    says quarantined).
(e) delete and re-create of an RF-1 topic from another node: `mqctl topic delete legacy`
    on node 2 removes it from etcd (tombstone) and node 4 deletes its copy; `mqctl topic
    create legacy` on node 2 registers it with node 2 as its home, and 10 sends through
    node 4 (forwarded) land there and are read back, nothing of the old one. Deleting
    the cluster's `orders` (node 3) then lets node 4 register its own orders in its place:
    node 1's copy goes and a receiver on node 4 reads node 4's 30 messages; legacy grown to
    3 partitions from node 4: all placed on node 2.
(f) node 2 (legacy's only replica) SIGKILLed: once its key expired a sender to legacy on
    node 1 is rejected within the lease + 1 s ("no reachable leader"); restarted, it leads
    legacy again in epoch 1 (node 1 redirects there) and serves its records.
(g) etcd SIGKILLed: 20 sends to an RF-1 topic on its node 0.5 s later and again after 2.5
    lease TTLs are all accepted (one replica: no fence), and read back once etcd is back."""

import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (TTL_MS, Etcd, Receiver, Sender, cluster_sets, get_json,  # noqa: E402
                        read_keys, start_nodes, wait_for)
from mqdtest import SLOW, check, log, skip  # noqa: E402

N = 200
ROUNDS = 5
RACKS = {1: "a", 2: "b", 3: "c"}
REDIRECT = "amqp:link:redirect"


def mqctl_ok(b, *args):
    rc, out, err = mqdtest.mqctl(b.url, *args)
    check(rc == 0, "mqctl %s on %s: %d %s" % (" ".join(args), b.name, rc, out + err))
    return out


def show(b, topic):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "show", topic)
    return json.loads(out) if rc == 0 else None


def listing(b):
    return {t["name"]: t for t in json.loads(mqctl_ok(b, "--json", "topic", "list"))}


def has_copy(b, topic):
    return os.path.isdir(os.path.join(b.data_dir, "topics", topic))


def redirect_of(link_cond):
    """(port, address) of an amqp:link:redirect refusal, else None."""
    if not link_cond or link_cond[0] != REDIRECT:
        return None
    info = {str(k): v for k, v in link_cond[2].items()}
    return int(info.get("port", 0)), info.get("address")


def port_node(brokers, port):
    return next((i for i, b in brokers.items() if b.port == port), None)


def follow(brokers, make, first, hops=3):
    """Runs make(url) on node `first`, following amqp:link:redirect refusals (at most
    hops); returns (the finished client, the nodes it went through)."""
    node, path = first, []
    for _ in range(hops):
        path.append(node)
        c = make(brokers[node].url)
        mqdtest.run_container(c, 60)
        r = redirect_of(c.link_cond)
        if r is None:
            return c, path
        node = port_node(brokers, r[0])
        check(node is not None, "redirected to unknown port %r" % (r,))
    mqdtest.fail("more than %d redirects: %r" % (hops, path))


class RelaySender(mqdtest.Client):
    """One durable message to `to` through the anonymous relay (a sender with no target
    address); its outcome: ("accepted", None) or ("rejected", condition, description)."""

    def __init__(self, url, to, body):
        super().__init__(auto_settle=True)
        self.url, self.to, self.body = url, to, body
        self.outcome = None
        self.sent = False

    def on_start(self, e):
        e.container.create_sender(self.connect(e.container, self.url), None)

    def on_sendable(self, e):
        if not self.sent:
            from proton import Message
            e.sender.send(Message(address=self.to, body=self.body, durable=True))
            self.sent = True

    def on_accepted(self, e):
        self.outcome = ("accepted", None, None)
        self.finish()

    def on_rejected(self, e):
        c = e.delivery.remote.condition
        self.outcome = ("rejected", c.name if c else None, c.description if c else None)
        self.finish()


def relay(url, to, body):
    c = RelaySender(url, to, body)
    mqdtest.run_container(c, 30)
    return c.outcome


def registration(etcd, topic):
    return get_json(etcd.port, "/mqd/topics/%s" % topic)


def state(etcd, topic, p=0):
    return get_json(etcd.port, "/mqd/partitions/%s/%d" % (topic, p))


def case_autocreate(etcd, brokers):
    t0 = time.monotonic()
    s = Sender(brokers[1].url, "orders", N, "o")
    mqdtest.run_container(s, 60)
    took = time.monotonic() - t0
    check(s.link_cond is None and s.accepted == N and not s.rejected,
          "sender on node 1: %s, link %r, rejected %r" % (s.status(), s.link_cond, s.rejected[:3]))
    log("(a) %d sends to the new name on node 1 accepted in %.2f s (register + serve)" % (N, took))
    td, ps = registration(etcd, "orders"), state(etcd, "orders")
    log("(a) etcd: %r / %r" % (td, ps))
    check(td and td["replication_factor"] == 1 and td["partitions"] == 1 and td.get("home") == 1 and
          len(td.get("id", "")) == 32, "registration %r" % td)
    check(ps and ps["leader"] == 1 and ps["replicas"] == [1] and ps["isr"] == [1] and
          ps["epoch"] == 1 and ps.get("topic_id") == td["id"], "partition state %r" % ps)
    for i in (2, 3):
        b = brokers[i]
        for addr in ("orders", "orders/Partitions/0"):
            x = Sender(b.url, addr, 1, "x")
            mqdtest.run_container(x, 30)
            check(x.link_cond is None and x.accepted == 1,
                  "sender to %s on node %d: %r %s" % (addr, i, x.link_cond, x.status()))
        # a group of its own per node (g, read below, keeps every message); the queue
        # gives each node one message of the topic
        for addr in ("orders", "orders/ConsumerGroups/g%d/Partitions/0" % i):
            x = Receiver(b.url, addr, 1, idle_s=1.0)
            mqdtest.run_container(x, 30)
            check(x.link_cond is None and x.bodies and x.bodies[0].startswith("o-") and
                  (addr == "orders" or x.bodies[0] == "o-0"),
                  "receiver of %s on node %d: %r, read %r" % (addr, i, x.link_cond, x.bodies))
        check(not has_copy(b, "orders"), "node %d made a copy of orders" % i)
    log("(a) nodes 2 and 3 forward senders' messages and receivers to node 1, hold no copy")
    r, path = follow(brokers, lambda url: Receiver(url, "orders/ConsumerGroups/g", N), 2)
    check(path == [2], "receiver path %r (forwarded, not redirected)" % path)
    check(r.bodies[:N] == ["o-%d" % k for k in range(N)],
          "read %d through node 2, first wrong at %s" % (len(r.bodies), next(
              (k for k, v in enumerate(r.bodies) if v != "o-%d" % k), None)))
    x, path = follow(brokers, lambda url: Sender(url, "orders", 50, "p"), 3)
    check(path == [3] and x.accepted == 50, "sender from node 3: %r %s" % (path, x.status()))
    lst = listing(brokers[2])
    o = lst.get("orders")
    check(o and o.get("local") is False and [p["leader"] for p in o["placement"]] == [1],
          "topic list on node 2: %r" % o)
    sh = show(brokers[2], "orders")
    check(sh and sh["replication_factor"] == 1 and sh["placement"][0]["replicas"] == [1],
          "topic show on node 2: %r" % sh)
    txt = mqctl_ok(brokers[2], "topic", "list")
    check("LEADERS" in txt and "orders" in txt, "table %r" % txt)
    log("(a) read %d through node 2 (forwarded), 50 more sent through node 3; node 2 lists "
        "orders:\n%s" % (N, txt))
    # the anonymous relay: a message to a topic led elsewhere is forwarded there; a new
    # name is registered by the first message, which is rejected (send it again), and
    # the next is taken
    o1 = relay(brokers[2].url, "orders", "via-relay")
    check(o1[0] == "accepted", "relay to orders on node 2: %r" % (o1,))
    o = relay(brokers[1].url, "relayed", "r-0")
    check(o[0] == "rejected" and o[1] == "amqp:resource-limit-exceeded" and "send it again" in o[2],
          "first relay to a new name: %r" % (o,))
    o2 = wait_for("relayed registered and served", lambda: (lambda v: v if v[0] == "accepted" else None)(
        relay(brokers[1].url, "relayed", "r-1")), 10)
    td = registration(etcd, "relayed")
    check(td and td.get("home") == 1, "relayed %r" % td)
    log("(a) relay: to orders on node 2 %r; to a new name on node 1 %r, then %r" % (o1[1:], o[1:],
                                                                                   o2[0]))


class Racer(mqdtest.Client):
    """Two senders of n messages to one new name, on two nodes, attached in the same
    instant (one container, both connections open first); each follows
    amqp:link:redirect to the node it names. lanes[node]: prefix, path, accepted,
    rejected, link refusal."""

    def __init__(self, brokers, nodes, name, n):
        super().__init__(auto_settle=True)
        self.brokers, self.name, self.n = brokers, name, n
        self.lanes = {i: {"prefix": "%s-n%d" % (name, i), "path": [], "sent": 0, "accepted": 0,
                          "rejected": [], "cond": None, "done": False} for i in nodes}
        self.conns_of = {}
        self.opened = 0

    def on_start(self, e):
        self.container = e.container
        for i in self.lanes:
            self.conns_of[i] = self.connect(e.container, self.brokers[i].url)

    def on_connection_opened(self, e):
        self.opened += 1
        if self.opened == len(self.lanes) and not any(ln["path"] for ln in self.lanes.values()):
            for i, c in self.conns_of.items():  # both attaches in one go
                self._attach(i, i, c)

    def _attach(self, lane, node, conn):
        self.lanes[lane]["path"].append(node)
        snd = self.container.create_sender(conn, self.name)
        snd.lane = lane

    def on_sendable(self, e):
        ln = self.lanes[e.sender.lane]
        while e.sender.credit and ln["sent"] < self.n:
            from proton import Message
            e.sender.send(Message(body="%s-%d" % (ln["prefix"], ln["sent"]), durable=True))
            ln["sent"] += 1

    def _settled(self, e):
        ln = self.lanes[e.link.lane]
        if ln["accepted"] + len(ln["rejected"]) == self.n:
            ln["done"] = True
            if all(x["done"] for x in self.lanes.values()):
                self.finish()

    def on_accepted(self, e):
        self.lanes[e.link.lane]["accepted"] += 1
        self._settled(e)

    def on_rejected(self, e):
        c = e.delivery.remote.condition
        self.lanes[e.link.lane]["rejected"].append(c.name if c else None)
        self._settled(e)

    def on_link_error(self, e):
        lane = e.link.lane
        c = e.link.remote_condition
        r = redirect_of((c.name, c.description, dict(c.info or {}))) if c else None
        node = port_node(self.brokers, r[0]) if r else None
        if node is None or len(self.lanes[lane]["path"]) > 3:
            self.lanes[lane]["cond"] = c.name if c else None
            self.lanes[lane]["done"] = True
            if all(x["done"] for x in self.lanes.values()):
                self.finish()
            return
        self._attach(lane, node, self.connect(self.container, self.brokers[node].url))

    def status(self):
        return repr(self.lanes)


class ManySenders(mqdtest.Client):
    """One connection, one sender per address attached at once; per address the link's
    refusal (condition, description) or None once it opened."""

    def __init__(self, url, addresses):
        super().__init__()
        self.url, self.addresses = url, addresses
        self.result = {}

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        for a in self.addresses:
            e.container.create_sender(c, a)

    def _one(self, link, cond):
        self.result[link.target.address] = cond
        if len(self.result) == len(self.addresses):
            self.finish()

    def on_link_opened(self, e):
        self._one(e.link, None)

    def on_link_error(self, e):
        c = e.link.remote_condition
        self._one(e.link, (c.name, c.description) if c else (None, None))


def case_quota(etcd, brokers):
    """max_topics_per_connection (2 on node 2) counts a cluster create: the registration."""
    names = ["quota%d" % k for k in range(3)]
    c = ManySenders(brokers[2].url, names)
    mqdtest.run_container(c, 30)
    refused = [n for n in names if c.result.get(n)]
    log("(a2) one connection to node 2 attaching 3 new names: %r" % c.result)
    check(len(refused) == 1 and c.result[refused[0]][0] == "amqp:resource-limit-exceeded" and
          "max_topics_per_connection" in c.result[refused[0]][1], "refusals %r" % c.result)
    check(registration(etcd, refused[0]) is None and all(
        registration(etcd, n) for n in names if n not in refused), "registrations")


def case_race(etcd, brokers):
    lost = 0
    for k in range(ROUNDS):
        name = "race%d" % k
        rc = Racer(brokers, (1, 2), name, 40)
        mqdtest.run_container(rc, 60)
        out = {i: (rc.lanes[i], rc.lanes[i]["path"]) for i in rc.lanes}
        td, ps = registration(etcd, name), state(etcd, name)
        check(td and ps and td["replication_factor"] == 1 and ps["replicas"] == [td["home"]] and
              ps.get("topic_id") == td["id"], "%s: %r %r" % (name, td, ps))
        parts = [key for key in read_keys(etcd.port, "/mqd/partitions/%s/" % name)]
        check(len(parts) == 1, "%s: partition keys %r" % (name, parts))
        home = td["home"]
        other = 3 - home
        accepted = []
        for node, (c, path) in out.items():
            check(c["cond"] is None and not c["rejected"] and c["accepted"] == 40,
                  "%s: client of node %d: %r" % (name, node, c))
            check(path[-1] == home or path == [node],
                  "%s: client of node %d ended on %r, home %d" % (name, node, path, home))
            accepted += ["%s-%d" % (c["prefix"], j) for j in range(c["accepted"])]
        r = Receiver(brokers[home].url, "%s/ConsumerGroups/chk" % name, len(accepted))
        mqdtest.run_container(r, 60)
        check(sorted(r.bodies) == sorted(accepted), "%s: read %d, accepted %d"
              % (name, len(r.bodies), len(accepted)))
        check(not has_copy(brokers[other], name), "%s: node %d kept a copy" % (name, other))
        lost += ("topic %s: registered by another node first" % name) in brokers[other].log_text()
        tried = sum(("topic %s: registering it in the cluster" % name) in brokers[i].log_text()
                    for i in (1, 2))
        log("(b) %s: home %d, %d accepted (paths %s), both read from node %d; %d nodes sent a "
            "registration" % (name, home, len(accepted), {n: out[n][1] for n in out}, home, tried))
    log("(b) %d of %d races were decided by etcd's create-if-absent (the other node's txn lost)"
        % (lost, ROUNDS))


def case_default_rf(etcd, brokers):
    mqctl_ok(brokers[3], "topic", "create", "c3")
    td = wait_for("c3 registered", lambda: registration(etcd, "c3"), 10)
    check(td["replication_factor"] == 3 and not td.get("home"), "c3 registration %r" % td)
    ps = wait_for("c3 placed with ISR 3", lambda: (lambda v: v if v and len(v["isr"]) == 3 else None)(
        state(etcd, "c3")), 20)
    check(sorted(ps["replicas"]) == [1, 2, 3] and sorted(ps["isr"]) == [1, 2, 3], "c3 %r" % ps)
    sh = wait_for("c3 on node 3", lambda: show(brokers[3], "c3"), 10)
    check(sh["config"]["replication_factor"] == 3, "topic show c3 on node 3: %r" % sh["config"])
    log("(c) mqctl topic create c3 on node 3: replication_factor 3, placed %r, isr %r"
        % (ps["replicas"], ps["isr"]))
    x, path = follow(brokers, lambda url: Sender(url, "auto3", 20, "a"), 3)
    td = registration(etcd, "auto3")
    check(td and td["replication_factor"] == 3 and x.accepted == 20 and not x.rejected,
          "auto3: %r, %s via %r" % (td, x.status(), path))
    log("(c) auto-created auto3 on node 3: replication_factor 3, 20 accepted via nodes %r" % path)


def case_upgrade(t, etcd, brokers):
    b4 = t.broker("n4", start=False, sets={"topic.decl.partitions": "1"})
    b4.start()
    for topic, n in (("legacy", 100), ("orders", 30)):
        s = Sender(b4.url, topic, n, "l" if topic == "legacy" else "own")
        mqdtest.run_container(s, 60)
        check(s.accepted == n, "node 4 alone, %s: %s" % (topic, s.status()))
    check(has_copy(b4, "decl"), "node 4 alone has no declared decl")
    b4.stop()
    x, _ = follow(brokers, lambda url: Sender(url, "decl", 5, "d"), 1)
    check(x.accepted == 5, "decl on node 1: %s" % x.status())
    # with replication_factor 3 for every topic in its config now: its own topics from
    # before still become RF-1 topics on it (a placement elsewhere would truncate them)
    b4.sets = dict(cluster_sets(etcd, 4, "d"), **{"topic.decl.partitions": "1",
                                                  "replication_factor": "3"})
    b4.start()
    brokers[4] = b4
    td = wait_for("legacy registered by node 4", lambda: registration(etcd, "legacy"), 15)
    ps = wait_for("legacy placed", lambda: state(etcd, "legacy"), 10)
    check(td["replication_factor"] == 1 and td.get("home") == 4 and ps["leader"] == 4 and
          ps["replicas"] == [4] and ps["isr"] == [4], "legacy %r %r" % (td, ps))
    for i in (1, 2, 3):
        x = Sender(brokers[i].url, "legacy", 1, "x")
        mqdtest.run_container(x, 30)
        check(x.link_cond is None and x.accepted == 1, "node %d: %r %s" % (i, x.link_cond, x.status()))
    r, path = follow(brokers, lambda url: Receiver(url, "legacy/ConsumerGroups/g", 100), 1)
    check(path == [1] and r.bodies[:100] == ["l-%d" % k for k in range(100)],
          "legacy through node 1 (forwarded to node 4): %r, read %d" % (path, len(r.bodies)))
    log("(d) node 4 registered its legacy (leader 4, isr [4]); read its 100 through node 1")
    wait_for("node 4's empty decl deleted", lambda: not has_copy(b4, "decl"), 10)
    x = Sender(b4.url, "decl", 1, "x")
    mqdtest.run_container(x, 30)
    check(x.link_cond is None and x.accepted == 1 and not has_copy(b4, "decl"),
          "decl on node 4: %r %s" % (x.link_cond, x.status()))
    text = wait_for("the quarantine logged", lambda: (lambda s: s if "KEPT BUT NOT SERVED" in s else None)(
        b4.log_text()), 10)
    line = next(ln for ln in text.splitlines() if "KEPT BUT NOT SERVED" in ln)
    log("(d) node 4 logged: %s" % line)
    check("30 records" in line, "quarantine line %r" % line)
    check(has_copy(b4, "orders"), "node 4's own orders is gone")
    x = Sender(b4.url, "orders", 1, "x")
    mqdtest.run_container(x, 30)
    check(redirect_of(x.link_cond) == (brokers[1].port, "orders"), "orders on node 4: %r" % (x.link_cond,))
    # a receiver is forwarded to the cluster's orders (node 1): node 4's own is not served
    x = Receiver(b4.url, "orders/ConsumerGroups/q", 1, idle_s=1.0)
    mqdtest.run_container(x, 30)
    check(x.link_cond is None and x.bodies and x.bodies[0] == "o-0" and
          not any(v.startswith("own-") for v in x.bodies), "receiver of orders on node 4: %r %r"
          % (x.link_cond, x.bodies))
    sh = show(b4, "orders")
    # node 4 says its own copy is quarantined; the figures are the cluster's (mqctl asks
    # the partition's leader, node 1: docs/operations.md "In a cluster")
    check(sh and sh.get("quarantined") is True and
          [r.get("from_node") for r in sh.get("partition_info", [])] == [1], "topic show on node 4: %r" % sh)
    txt = mqctl_ok(b4, "topic", "describe", "orders")
    check("kept, not served" in txt, "describe on node 4: %r" % txt)
    log("(d) node 4's empty decl gave way, its own orders (30) is kept, not served")


def case_delete_recreate(etcd, brokers):
    b4 = brokers[4]
    mqctl_ok(brokers[2], "topic", "delete", "legacy")
    check(registration(etcd, "legacy") is None and state(etcd, "legacy") is None,
          "legacy still in etcd")
    tomb = get_json(etcd.port, "/mqd/deleted/legacy")
    check(tomb and tomb["by"] == 2, "tombstone %r" % tomb)
    t0 = time.monotonic()
    wait_for("node 4 deletes legacy", lambda: not has_copy(b4, "legacy"), 10)
    log("(e) legacy deleted from node 2: node 4's copy gone %.2f s after the answer"
        % (time.monotonic() - t0))
    mqctl_ok(brokers[2], "topic", "create", "legacy")
    td, ps = registration(etcd, "legacy"), state(etcd, "legacy")
    check(td and td.get("home") == 2 and td["id"] != tomb["id"] and ps and ps["leader"] == 2,
          "re-created legacy %r %r" % (td, ps))
    check(get_json(etcd.port, "/mqd/deleted/legacy") is None, "tombstone left")
    x, path = follow(brokers, lambda url: Sender(url, "legacy", 10, "new"), 4)
    check(path == [4] and x.accepted == 10, "sends via node 4: %r %s" % (path, x.status()))
    r = Receiver(brokers[2].url, "legacy/ConsumerGroups/g2", None, idle_s=1.5)
    mqdtest.run_container(r, 60)
    check(r.bodies == ["new-%d" % k for k in range(10)], "read %r" % r.bodies[:12])
    log("(e) legacy created again on node 2 (home 2): 10 sends through node 4 read back, "
        "nothing of the old one")
    mqctl_ok(brokers[4], "topic", "alter", "legacy", "--partitions", "3")
    ps = wait_for("legacy 1 and 2 placed", lambda: (lambda a: a if all(a) else None)(
        [state(etcd, "legacy", p) for p in range(3)]), 10)
    check([p["replicas"] for p in ps] == [[2], [2], [2]] and ps[0]["epoch"] == 1,
          "grown legacy %r" % ps)
    wait_for("node 2's copy has 3 partitions", lambda: (lambda v: v and v["partitions"] == 3)(
        show(brokers[2], "legacy")), 10)
    log("(e) legacy grown to 3 partitions from node 4: all placed on its home, node 2")
    mqctl_ok(brokers[3], "topic", "delete", "orders")
    td = wait_for("node 4 registers its own orders", lambda: (lambda v: v if v and v.get("home") == 4
                                                              else None)(registration(etcd, "orders")), 15)
    wait_for("node 1 drops the old orders", lambda: not has_copy(brokers[1], "orders"), 10)
    r, path = follow(brokers, lambda url: Receiver(url, "orders/ConsumerGroups/g", 30), 1)
    check(path == [1] and r.bodies == ["own-%d" % k for k in range(30)],
          "orders after the swap: %r, read %d" % (path, len(r.bodies)))
    log("(e) the cluster's orders deleted: node 4's own (30) registered in its place (id %s)"
        % td["id"])


def case_offline(etcd, brokers):
    b2 = brokers[2]
    b2.kill()
    t0 = time.monotonic()
    wait_for("node 2's key gone", lambda: "/mqd/nodes/2" not in read_keys(etcd.port, "/mqd/nodes/"), 15)
    gone = time.monotonic() - t0
    x = Sender(brokers[1].url, "legacy", 1, "x")
    mqdtest.run_container(x, 30)
    check(x.link_cond is None and x.rejected and x.rejected[0][0] == "amqp:resource-limit-exceeded"
          and "no reachable leader" in x.rejected[0][1], "legacy with node 2 down: %r %r"
          % (x.link_cond, x.rejected))
    log("(f) node 2 SIGKILLed: its key went %.1f s later; a send to legacy on node 1: %r"
        % (gone, x.rejected[0][1]))
    b2.start()
    wait_for("node 2 back in etcd", lambda: "/mqd/nodes/2" in read_keys(etcd.port, "/mqd/nodes/"), 15)
    x, path = follow(brokers, lambda url: Sender(url, "legacy", 1, "back"), 1)
    check(path == [1] and x.accepted == 1, "legacy after node 2's restart: %r %s" % (path, x.status()))
    check(state(etcd, "legacy")["epoch"] == 1 and state(etcd, "legacy")["leader"] == 2,
          "legacy's state %r" % state(etcd, "legacy"))
    r = Receiver(b2.url, "legacy/ConsumerGroups/g3", 11)
    mqdtest.run_container(r, 60)
    check(sorted(r.bodies) == sorted(["new-%d" % k for k in range(10)] + ["back-0"]), "read %r" % r.bodies)
    log("(f) node 2 restarted: leads legacy again in epoch 1, its 10 records and 1 more read")


def case_etcd_away(etcd, brokers):
    td = registration(etcd, "race0")
    home = brokers[td["home"]]
    etcd.kill()
    outcomes = []
    for k, pause in enumerate((0.5, 2.5 * TTL_MS / 1000.0)):
        time.sleep(pause * SLOW)
        x = Sender(home.url, "race0", 20, "away%d" % k)
        mqdtest.run_container(x, 60)
        outcomes.append((x.accepted, len(x.rejected), x.link_cond))
    etcd.start()
    log("(g) etcd SIGKILLed: 20 sends to RF-1 race0 on its node 0.5 s and %.1f s later: %r"
        % (0.5 + 2.5 * TTL_MS / 1000.0, outcomes))
    check(all(o == (20, 0, None) for o in outcomes), "sends while etcd was away: %r" % outcomes)
    wait_for("the nodes back in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 4, 30)
    r = Receiver(home.url, "race0/ConsumerGroups/g4", 120)
    mqdtest.run_container(r, 60)
    check(len(r.bodies) == 120 and sum(b.startswith("away") for b in r.bodies) == 40,
          "race0 holds %d, %d sent while etcd was away" % (len(r.bodies),
                                                          sum(b.startswith("away") for b in r.bodies)))


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"default_replication_factor": 3} if i == 3 else
                          {"max_topics_per_connection": 2} if i == 2 else {})
    coll = mqdtest.Collect()
    with coll.case("(a) auto-create on node 1, forwarded from nodes 2 and 3"):
        case_autocreate(etcd, brokers)
    with coll.case("(a2) a connection's creates count against max_topics_per_connection"):
        case_quota(etcd, brokers)
    with coll.case("(b) two nodes auto-create one name at once"):
        case_race(etcd, brokers)
    with coll.case("(c) default_replication_factor = 3"):
        case_default_rf(etcd, brokers)
    upgraded = False
    with coll.case("(d) a node with single-node topics joins"):
        case_upgrade(t, etcd, brokers)
        upgraded = True
    recreated = False
    with coll.case("(e) delete and re-create an RF-1 topic from another node"):
        check(upgraded, "case (d) failed")
        case_delete_recreate(etcd, brokers)
        recreated = True
    with coll.case("(f) an RF-1 topic's node down: offline; back: it leads again"):
        check(recreated, "case (e) failed")
        case_offline(etcd, brokers)
    with coll.case("(g) RF-1 topics take sends while etcd is away"):
        case_etcd_away(etcd, brokers)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
