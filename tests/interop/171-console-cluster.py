#!/usr/bin/python3
"""Issue 33 point 6: the console's cluster page (#/cluster) in a real headless browser
(Debian's chromium + chromium-driver over W3C WebDriver), against a real etcd and three
nodes (racks a/b/c); node 1 serves the console. Topic `orders` with 6 partitions and
replication_factor 3, leaders spread over the nodes by the controller. Asserts:
- the nodes table lists nodes 1, 2, 3, each alive, with the client address it registered
  in etcd (/mqd/nodes/ID), and exactly the controller etcd names (/mqd/controller) marked;
- the partitions table has one row per partition of orders whose leader, replicas and
  in-sync set are etcd's /mqd/partitions/orders/P, all in state ok, and 0
  under-replicated partitions;
- node 3 killed (SIGKILL): the page shows node 3 not alive, every partition whose in-sync
  set in etcd lost node 3 (all 6: each has a replica there) marked under-replicated (row
  class and state), the count at the top 6, leaders all alive nodes (1 or 2) as etcd has
  them; a screenshot of both states is saved under tests/artifacts/171-console-cluster/."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import consoletest  # noqa: E402
import mqdtest  # noqa: E402
import webdriver  # noqa: E402
from mqdcluster import Etcd, create_spread, get_json, start_nodes, wait_for  # noqa: E402
from mqdtest import check, log  # noqa: E402

TAB, ENTER = "\ue004", "\ue007"
RACKS = {1: "a", 2: "b", 3: "c"}
NPARTS = 6

ROWS_JS = """var r=[...document.querySelectorAll('#cluster-partitions tbody tr[data-topic="orders"]')];
return r.length === %d && r.map(e => ({p: Number(e.dataset.partition), state: e.dataset.state,
  cls: e.className, leader: e.querySelector('td.leader').textContent,
  replicas: e.querySelector('td.replicas').textContent, isr: e.querySelector('td.isr').textContent}));"""
NODES_JS = """var r=[...document.querySelectorAll('#nodes-table tbody tr')];
return r.length && r.map(e => ({id: Number(e.dataset.node), alive: e.querySelector('td.alive').textContent,
  controller: e.querySelector('td.controller').textContent, address: e.querySelector('td.address').textContent}));"""


def ids(v):
    return ", ".join(str(x) for x in v)


def etcd_parts(etcd):
    return {p: get_json(etcd.port, "/mqd/partitions/orders/%d" % p) for p in range(NPARTS)}


def page_matches(br, ps):
    """The page's rows once they equal etcd's states ps (None while they differ)."""
    rows = br.js(ROWS_JS % NPARTS)
    if not rows:
        return None
    for r in rows:
        s = ps[r["p"]]
        if (r["leader"], r["replicas"], r["isr"]) != (str(s["leader"]), ids(s["replicas"]), ids(s["isr"])):
            return None
    return rows


def body(t):
    etcd = Etcd(t)
    etcd.start()
    cport = mqdtest.free_port()
    user = {"user.admin." + k.strip(): v.strip() for k, v in (
        ln.split("=", 1) for ln in consoletest.mqd_passwd("admin", consoletest.PW["admin"]).splitlines()
        if "=" in ln)}
    brokers = start_nodes(t, etcd, RACKS, sets_of=lambda i: dict(
        user, **({"console_listen": "127.0.0.1:%d" % cport} if i == 1 else {})))
    mqdtest.wait_port(cport, 10 * mqdtest.SLOW, brokers[1].proc, "console")
    ps = create_spread(etcd, brokers[1].url)
    check(len({s["leader"] for s in ps.values()}) == 3, "leaders spread over 3 nodes: %r" % ps)
    addr = {i: get_json(etcd.port, "/mqd/nodes/%d" % i)["address"] for i in RACKS}
    art = webdriver.artifacts_dir("171-console-cluster")

    br = webdriver.Browser(t, height=1000)
    try:
        ui = "http://127.0.0.1:%d/ui/" % cport
        br.go(ui)
        br.wait_js("return document.activeElement && document.activeElement.id === 'login-user'", "login form")
        br.keys("admin" + TAB + consoletest.PW["admin"] + ENTER)
        br.wait_js("return document.getElementById('who').textContent", "logged in")
        br.go(ui + "#/cluster")
        br.wait_js(ROWS_JS % NPARTS, "partition rows", 20)
        ctl = get_json(etcd.port, "/mqd/controller")["id"]
        nodes = br.wait_js(NODES_JS, "node rows")
        check(sorted(n["id"] for n in nodes) == [1, 2, 3], "nodes on the page: %r" % nodes)
        for n in nodes:
            check(n["alive"] == "yes" and n["address"] == addr[n["id"]],
                  "node %d: alive %r address %r (etcd %r)" % (n["id"], n["alive"], n["address"], addr[n["id"]]))
            check((n["controller"] == "yes") == (n["id"] == ctl), "node %d controller mark %r (etcd: %d)"
                  % (n["id"], n["controller"], ctl))
        ps = etcd_parts(etcd)
        rows = wait_for("the page's partitions as etcd holds them", lambda: page_matches(br, ps), 10)
        check(all(r["state"] == "ok" and r["cls"] == "" for r in rows), "all ok: %r" % rows)
        check(br.js("return document.getElementById('cluster-urp').textContent") == "0", "0 under-replicated")
        log("cluster page: nodes %r, controller %d, leaders %r" % (
            [n["id"] for n in nodes], ctl, [r["leader"] for r in sorted(rows, key=lambda r: r["p"])]))
        check(br.screenshot(os.path.join(art, "cluster.png")) > 5000, "screenshot")

        brokers[3].kill()
        log("node 3 killed")
        wait_for("etcd: no partition led by 3 and none with 3 in sync", lambda: all(
            s and s["leader"] != 3 and 3 not in s["isr"] for s in etcd_parts(etcd).values()), 30)
        ps = etcd_parts(etcd)
        rows = wait_for("the page's partitions after the kill", lambda: page_matches(br, ps), 15)
        for r in rows:
            check(r["state"] == "under-replicated" and r["cls"] == "under-replicated"
                  and r["leader"] in ("1", "2"), "partition %d after the kill: %r" % (r["p"], r))
        urp = br.wait_js("var e=document.getElementById('cluster-urp'); return e && e.textContent === '%d' && e.textContent" % NPARTS,
                         "under-replicated count")
        n3 = br.wait_js("var e=document.querySelector('#nodes-table tr[data-node=\"3\"]');"
                        "return e && e.querySelector('td.alive').textContent === 'no' && e.className", "node 3 down")
        check(n3 == "down", "node 3 row class %r" % n3)
        log("after the kill: %s under-replicated on the page, leaders %r" % (
            urp, [r["leader"] for r in sorted(rows, key=lambda r: r["p"])]))
        check(br.screenshot(os.path.join(art, "cluster-node3-down.png")) > 5000, "screenshot")
    finally:
        br.quit()


mqdtest.main(body, timeout=300)
