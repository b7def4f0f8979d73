#!/usr/bin/python3
"""Issue 33 point 4: routing metadata in `$management` (the design notes' name service).
A real etcd and three nodes (racks a/b/c) with users and an [acl]; topic `orders` with 6
partitions and replication_factor 3, whose leaders the controller spreads over the three
nodes (two each); 10 + P messages sent to orders/Partitions/P through its leader.

(a) READ of com.mqd:route `orders`, asked of every node: per partition the leader, its
    epoch, replicas and in-sync set are etcd's partitions/orders/P, and leader_address is
    the address the leader registered in etcd (nodes/ID); the leader's own answer gives
    high_watermark 10 + P (from "leader"), a follower's at most that (from "replica") and
    exactly that once it caught up; a topic READ's placement rows carry the same leader and
    address. QUERY lists orders.
(b) rights: alice (send on orders only) reads the routes; bob (all rights, on other.*
    only) gets 401 for READ and no orders in his QUERY; carl (no right anywhere) gets 401
    for QUERY; mqctl as bob fails naming the refusal.
(c) mqctl topic routes orders prints one row per partition whose LEADER and
    LEADER_ADDRESS are etcd's; --json gives the same map as the READ.
(d) `mqctl cluster elect orders 0 F` (F another in-sync replica): every node's answer
    follows etcd again (leader F, epoch + 1, F's address), mqctl's too, and /metrics of
    node 1 counts the partitions each node leads (mqd_repl_partitions_led) as etcd does."""

import importlib.util
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
from mqdcluster import Etcd, cluster_sets, create_spread, get_json, metrics_text, read_keys, repl_user_sets  # noqa: E402,E501
from mqdcluster import wait_for  # noqa: E402
from mqdtest import SLOW, Collect, check, log, skip  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "entity_auth", os.path.join(os.path.dirname(os.path.abspath(__file__)), "105-mgmt-entity-auth.py"))
entity_auth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(entity_auth)
Mgmt = entity_auth.Mgmt

RACKS = {1: "a", 2: "b", 3: "c"}
NPARTS = 6
T_ROUTE, T_TOPIC = "com.mqd:route", "com.mqd:topic"
PW = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "carl": "carl-pw"}


def start(t, etcd):
    conf = os.path.join(t.tmpdir, "nodes.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nallow_plain_without_tls = on\n")
        for u, p in PW.items():
            f.write(consoletest.mqd_passwd(u, p))
        f.write("[acl]\nallow admin all *\nallow alice send orders\nallow bob all other.*\n")
    mport = mqdtest.free_port()
    brokers = {}
    for i, r in RACKS.items():
        sets = cluster_sets(etcd, i, r, **repl_user_sets())
        if i == 1:
            sets["metrics_listen"] = "127.0.0.1:%d" % mport
        brokers[i] = t.broker("n%d" % i, start=False, sets=sets, conf=conf)
    for b in brokers.values():
        b.start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    return brokers, mport


def url_of(b, user):
    return b.url.replace("amqp://", "amqp://%s:%s@" % (user, PW[user]))


def mgmt(b, user):
    return Mgmt(b.url, user=user, password=PW[user], allowed_mechs="PLAIN")


def etcd_state(etcd):
    """(partition states by partition, node addresses by id) as etcd holds them."""
    ps = {p: get_json(etcd.port, "/mqd/partitions/orders/%d" % p) for p in range(NPARTS)}
    nodes = {i: get_json(etcd.port, "/mqd/nodes/%d" % i)["address"] for i in RACKS}
    return ps, nodes


def mismatch(ans, ps, nodes):
    """Why a route answer differs from etcd's state (None: it matches)."""
    if not ans or ans.get("topic") != "orders" or ans.get("partitions") != NPARTS:
        return "answer %r" % (ans,)
    routes = ans.get("routes") or []
    if [r["partition"] for r in routes] != list(range(NPARTS)):
        return "partitions %r" % [r.get("partition") for r in routes]
    for r in routes:
        e = ps[r["partition"]]
        got = (r["leader"], r["epoch"], list(r["replicas"]), list(r["isr"]), r["leader_address"])
        want = (e["leader"], e["epoch"], e["replicas"], e["isr"], nodes[e["leader"]])
        if got != want or r["leader_alive"] is not True:
            return "partition %d: %r, etcd %r" % (r["partition"], got, want)
    return None


def routes_match(m, etcd, name):
    """Waits until node m's READ matches etcd; returns the answer."""
    last = [None]

    def ok():
        ps, nodes = etcd_state(etcd)
        st, _, ans = m.request("READ", T_ROUTE, "orders")
        last[0] = (st, mismatch(ans, ps, nodes) if st == 200 else "status %s" % st)
        return ans if st == 200 and last[0][1] is None else None
    try:
        return wait_for("%s's routes to match etcd" % name, ok, 10)
    except mqdtest.TestFailure:
        log("last: %r" % (last[0],))
        raise


def send_through_leaders(brokers, ps):
    for p in range(NPARTS):
        c = BlockingConnection(brokers[ps[p]["leader"]].url, user="admin", password=PW["admin"],
                               allowed_mechs="PLAIN", timeout=10 * SLOW)
        s = c.create_sender("orders/Partitions/%d" % p)
        for i in range(10 + p):
            s.send(Message(body="p%d-%d" % (p, i), durable=True))
        c.close()


def check_watermarks(ms, etcd):
    ps, _ = etcd_state(etcd)
    for i, m in ms.items():
        ans = routes_match(m, etcd, "node %d" % i)
        for r in ans["routes"]:
            p, want = r["partition"], 10 + r["partition"]
            if ps[p]["leader"] == i:
                check(r["high_watermark"] == want and r["high_watermark_from"] == "leader",
                      "node %d (leader of %d): %r, want %d" % (i, p, r, want))
            else:
                check(r["high_watermark_from"] == "replica" and 0 <= r["high_watermark"] <= want,
                      "node %d (follower of %d): %r, want at most %d" % (i, p, r, want))

    def caught_up(i):
        st, _, ans = ms[i].request("READ", T_ROUTE, "orders")
        return st == 200 and all(r["high_watermark"] == 10 + r["partition"] for r in ans["routes"])
    for i in ms:
        wait_for("node %d's watermarks at 10 + P" % i, lambda i=i: caught_up(i), 10)


def mqctl_rows(b, user="admin"):
    rc, out, err = mqdtest.mqctl(url_of(b, user), "topic", "routes", "orders")
    check(rc == 0, "mqctl topic routes: rc %d %s" % (rc, err))
    lines = out.splitlines()
    head = lines[0].split()
    check(head[:4] == ["TOPIC", "PARTITION", "LEADER", "LEADER_ADDRESS"], "head %r" % head)
    return [dict(zip(head, ln.split())) for ln in lines[1:]]


def check_mqctl(b, etcd):
    ps, nodes = etcd_state(etcd)
    rows = mqctl_rows(b)
    check(len(rows) == NPARTS, "mqctl printed %d rows: %r" % (len(rows), rows))
    for r in rows:
        e = ps[int(r["PARTITION"])]
        check(r["TOPIC"] == "orders" and int(r["LEADER"]) == e["leader"] and
              r["LEADER_ADDRESS"] == nodes[e["leader"]] and int(r["EPOCH"]) == e["epoch"] and
              r["ISR"] == ",".join(str(x) for x in e["isr"]), "mqctl row %r, etcd %r" % (r, e))
    return rows


def metrics_led(mport):
    return {int(n): int(v) for n, v in
            re.findall(r'^mqd_repl_partitions_led\{node="(\d+)"\} (\d+)$', metrics_text(mport), re.M)}


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers, mport = start(t, etcd)
    coll = Collect()
    create_spread(etcd, url_of(brokers[1], "admin"), nparts=NPARTS)
    ps, nodes = etcd_state(etcd)
    leaders = [ps[p]["leader"] for p in range(NPARTS)]
    log("leaders %r, addresses %r" % (leaders, nodes))
    check(sorted(leaders.count(i) for i in RACKS) == [2, 2, 2], "leaders not spread: %r" % leaders)
    send_through_leaders(brokers, ps)
    ms = {i: mgmt(b, "admin") for i, b in brokers.items()}
    with coll.case("(a) every node's routes are etcd's; watermarks by who answers"):
        check_watermarks(ms, etcd)
        st, _, top = ms[2].request("READ", T_TOPIC, "orders")
        check(st == 200, "topic READ: %s" % st)
        for r in top["placement"]:
            e = ps[r["partition"]]
            check(r["leader"] == e["leader"] and r["leader_address"] == nodes[e["leader"]],
                  "placement row %r, etcd %r" % (r, e))
        st, _, lst = ms[3].request("QUERY", T_ROUTE)
        check(st == 200 and [x["topic"] for x in lst] == ["orders"] and mismatch(lst[0], ps, nodes) is None,
              "QUERY: %s %r" % (st, lst))
    with coll.case("(b) rights: send suffices, another topic's rights do not"):
        alice = mgmt(brokers[2], "alice")
        st, _, ans = alice.request("READ", T_ROUTE, "orders")
        check(st == 200 and mismatch(ans, *etcd_state(etcd)) is None, "alice READ: %s %r" % (st, ans))
        alice.close()
        bob = mgmt(brokers[2], "bob")
        st, desc, ans = bob.request("READ", T_ROUTE, "orders")
        check(st == 401 and ans is None, "bob READ: %s %s %r" % (st, desc, ans))
        st, desc, ans = bob.request("QUERY", T_ROUTE)
        check(st == 200 and ans == [], "bob QUERY: %s %s %r" % (st, desc, ans))
        bob.close()
        carl = mgmt(brokers[2], "carl")
        st, desc, ans = carl.request("QUERY", T_ROUTE)
        check(st == 401, "carl QUERY: %s %s %r" % (st, desc, ans))
        carl.close()
        rc, out, err = mqdtest.mqctl(url_of(brokers[3], "bob"), "topic", "routes", "orders")
        check(rc != 0 and "not allowed" in err and "orders" in err, "mqctl as bob: %d %r %r" % (rc, out, err))
    with coll.case("(c) mqctl topic routes prints etcd's routes; --json the READ's map"):
        check_mqctl(brokers[3], etcd)
        rc, out, err = mqdtest.mqctl(url_of(brokers[1], "admin"), "--json", "topic", "routes", "orders")
        check(rc == 0 and mismatch(json.loads(out), *etcd_state(etcd)) is None, "--json: %d %r %r" % (rc, out, err))
    with coll.case("(d) after a leader change every answer follows etcd"):
        old = ps[0]
        new = next(i for i in old["isr"] if i != old["leader"])
        rc, out, err = mqdtest.mqctl(url_of(brokers[1], "admin"), "cluster", "elect", "orders", "0", str(new))
        check(rc == 0, "elect: %d %s" % (rc, out + err))
        wait_for("etcd: orders/0 led by %d" % new, lambda: get_json(
            etcd.port, "/mqd/partitions/orders/0")["leader"] == new, 10)
        for i, m in ms.items():
            ans = routes_match(m, etcd, "node %d" % i)
            r0 = ans["routes"][0]
            check(r0["leader"] == new and r0["epoch"] == old["epoch"] + 1 and
                  r0["leader_address"] == nodes[new], "node %d: %r" % (i, r0))
        rows = check_mqctl(brokers[2], etcd)
        check(int(rows[0]["LEADER"]) == new, "mqctl row 0 %r" % rows[0])
        ps2, _ = etcd_state(etcd)
        want = {i: sum(1 for p in range(NPARTS) if ps2[p]["leader"] == i) for i in RACKS}
        wait_for("metrics %r" % want, lambda: metrics_led(mport) == want, 10)
    for m in ms.values():
        m.close()
    for b in brokers.values():
        b.check_alive("at the end")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
