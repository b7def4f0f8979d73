#!/usr/bin/python3
"""Issue 33 point 6: mqctl against any node gives the cluster's truth. A real etcd and
three nodes (racks a/b/c); topic `orders` with 6 partitions and replication_factor 3,
leaders spread over the nodes (two each). 10 + P messages sent to orders/Partitions/P
through node 1 (forwarded to each leader); a consumer group g1 takes and
accepts the first 3 messages of every partition (through the partition's leader). Asserts, with mqctl --json run against
each of the three nodes:
- node 1's /metrics: mqd_fwd_sends_accepted_total and the count of the new histogram
  mqd_fwd_send_added_seconds are the sends it forwarded (those to partitions 1 does not
  lead); mqd_fwd_node_up{node} 1 for nodes 2 and 3, connected at least once, no drop,
  and mqd_fwd_node_send_backlog_bytes 0 once all are settled; the consumer below, through
  node 1 (not partition 0's leader), counted in mqd_fwd_recv_relay_seconds;
- topic list: orders with 6 partitions and 6 * 10 + 15 messages, on every node (a
  follower's own count: the consumer group's offset records its replica copied are no
  messages there either);
- topic describe orders: per partition start 0, end 10 + P, messages 10 + P, and the
  partition's leader as etcd names it, the same on every node (a follower's figures are
  its replica's, caught up to the leader's high watermark: the command waits for that);
- group describe orders g1: per partition committed 3, log_end 10 + P, lag 7 + P, the same
  on every node; total lag sum(7 + P);
- group reset orders g1 --to offset 5 through a node that leads none of partitions 0 and
  1 (--partitions 0,1 led elsewhere): every node's describe then shows committed 5 for
  those two, and a consumer of g1 through another node than partition 0's leader gets offset 5 of
  partition 0 first."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, create_spread, metrics_text, start_nodes, wait_for  # noqa: E402
from mqdtest import SLOW, check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
NPARTS = 6
FIRST = 3


def metric_values(text):
    """{'name{labels}': value} of a /metrics page."""
    out = {}
    for ln in text.splitlines():
        if ln and not ln.startswith("#"):
            k, v = ln.rsplit(" ", 1)
            out[k] = float(v)
    return out


def ctl_json(b, *args):
    rc, out, err = mqdtest.mqctl(b.url, "--json", *args)
    check(rc == 0, "mqctl %s on %s: %s" % (" ".join(args), b.url, out + err))
    return json.loads(out)


def parts_of(doc, key):
    return {p["partition"]: p for p in doc[key]}


def body(t):
    etcd = Etcd(t)
    etcd.start()
    mport = mqdtest.free_port()
    brokers = start_nodes(t, etcd, RACKS, sets_of=lambda i: {"metrics_listen": "127.0.0.1:%d" % mport} if i == 1 else {})
    ps = create_spread(etcd, brokers[1].url)
    leader = {p: ps[p]["leader"] for p in range(NPARTS)}
    check(sorted(leader.values()) == [1, 1, 2, 2, 3, 3], "leaders spread: %r" % leader)

    c = BlockingConnection(brokers[1].url, timeout=30 * SLOW)
    for p in range(NPARTS):
        s = c.create_sender("orders/Partitions/%d" % p)
        for i in range(10 + p):
            s.send(Message(body="p%d-%d" % (p, i)))
        s.close()
    c.close()
    log("sent 10 + P to each partition through node 1")
    # every send to a cluster topic goes through fwd, the ones to partitions node 1 leads
    # too (on its loopback node connection: a step-down re-sends them, src/fwd/send.c)
    forwarded = sum(10 + p for p in range(NPARTS))
    m = metric_values(metrics_text(mport))
    check(m.get("mqd_fwd_sends_accepted_total") == forwarded == m.get("mqd_fwd_send_added_seconds_count")
          and m.get('mqd_fwd_send_added_seconds_bucket{le="+Inf"}') == forwarded,
          "node 1 forwarded %d sends: %r" % (forwarded, {k: v for k, v in m.items() if "fwd_send" in k}))
    for n in (2, 3):
        lab = '{node="%d"}' % n
        check(m.get("mqd_fwd_node_up" + lab) == 1 and m.get("mqd_fwd_node_connects_total" + lab) >= 1
              and m.get("mqd_fwd_node_disconnects_total" + lab) == 0
              and m.get("mqd_fwd_node_send_backlog_bytes" + lab) == 0,
              "node 1's forwarding connection to node %d: %r" % (n, {k: v for k, v in m.items() if lab in k}))
    log("node 1 /metrics: %d forwarded sends accepted, added time sum %.4f s; connections to 2, 3 up"
        % (forwarded, m.get("mqd_fwd_send_added_seconds_sum", 0)))
    for p in range(NPARTS):  # through each partition's leader: committed exactly FIRST
        c = BlockingConnection(brokers[leader[p]].url, timeout=30 * SLOW)
        r = c.create_receiver("orders/ConsumerGroups/g1/Partitions/%d" % p, credit=FIRST)
        for i in range(FIRST):
            m = r.receive(timeout=20 * SLOW)
            check(m.body == "p%d-%d" % (p, i), "g1 partition %d got %r" % (p, m.body))
            r.accept()
        r.close()
        c.close()
    log("g1 took %d of each partition through its leader" % FIRST)

    want_msgs = {p: 10 + p for p in range(NPARTS)}
    def listed(i):
        row = [x for x in ctl_json(brokers[i], "topic", "list") if x["name"] == "orders"]
        check(len(row) == 1 and row[0]["partitions"] == NPARTS, "node %d topic list: %r" % (i, row))
        return row[0]["messages"] == sum(want_msgs.values()) and row[0]

    for i in brokers:  # a replica's count leaves out the group records it copied, as the leader's
        wait_for("node %d lists orders with %d messages" % (i, sum(want_msgs.values())), lambda: listed(i), 10)

    def describe_all():
        """{node: {partition: (start, end, messages, from_node, from)}} of topic describe."""
        out = {}
        for i, b in brokers.items():
            d = ctl_json(b, "topic", "describe", "orders")
            out[i] = {p["partition"]: (p["start"], p["end"], p["messages"], p.get("from_node"), p.get("from"))
                      for p in d["partition_info"]}
            check(d["messages"] == sum(want_msgs.values()), "node %d: topic messages %r" % (i, d["messages"]))
        return out

    figs = describe_all()
    for i in brokers:
        check(figs[i] == figs[1], "node %d describe differs from node 1's:\n%r\n%r" % (i, figs[i], figs[1]))
        for p, (start, end, n, src, how) in figs[i].items():
            check(start == 0 and n == want_msgs[p] and end >= n and src == leader[p] and how == "leader",
                  "node %d partition %d: %r (leader %d)" % (i, p, figs[i][p], leader[p]))
    log("topic describe on every node: %r" % {p: figs[1][p][:3] for p in range(NPARTS)})

    def group_all(want):
        out = {}
        for i, b in brokers.items():
            d = ctl_json(b, "group", "describe", "orders", "g1")
            out[i] = {p["partition"]: (p["committed"], p["log_end"], p["lag"], p.get("from_node"))
                      for p in d["partitions"]}
            if any(out[i][p][0] != want[p] for p in range(NPARTS)):
                log("node %d: group g1 %r, want committed %r" % (i, out[i], want))
                return None
            check(d["lag"] == sum(v[2] for v in out[i].values()), "node %d: group lag %r" % (i, d["lag"]))
        return out

    g = wait_for("committed 3 everywhere", lambda: group_all({p: FIRST for p in range(NPARTS)}), 10)
    for i in brokers:
        check(g[i] == g[1], "node %d group describe differs:\n%r\n%r" % (i, g[i], g[1]))
        for p, (com, end, lag, src) in g[i].items():
            check(end == figs[1][p][1] and lag == end - com and src == leader[p],
                  "node %d group partition %d: %r" % (i, p, g[i][p]))
    log("group describe on every node: %r" % g[1])

    via = [n for n in RACKS if n not in (leader[0], leader[1])]
    check(via, "a node leading neither partition 0 nor 1: leaders %r" % leader)
    via = via[0]

    def reset():
        rc, out, err = mqdtest.mqctl(brokers[via].url, "--json", "group", "reset", "orders", "g1",
                                     "--to", "5", "--partitions", "0,1")
        return (rc, out, err) if rc != 4 else None  # 409 while a forwarded leg detaches

    rc, out, err = wait_for("group reset through node %d" % via, reset, 10)
    check(rc == 0, "reset through node %d: %s" % (via, out + err))
    rep = json.loads(out)
    got = {p["partition"]: (p["committed"], p.get("from_node")) for p in rep["partitions"]}
    check(got == {0: (5, leader[0]), 1: (5, leader[1])}, "reset answer: %r" % got)
    want = {p: 5 if p < 2 else FIRST for p in range(NPARTS)}
    g = wait_for("committed 5 on partitions 0, 1 from every node", lambda: group_all(want), 10)
    log("after the reset through node %d (leaders of 0, 1: %d, %d): %r" % (via, leader[0], leader[1], g[1]))
    third = 1 if leader[0] != 1 else [n for n in RACKS if n != leader[0]][0]  # not partition 0's leader
    c = BlockingConnection(brokers[third].url, timeout=30 * SLOW)
    r = c.create_receiver("orders/ConsumerGroups/g1/Partitions/0", credit=1)
    m = r.receive(timeout=20 * SLOW)
    r.accept()
    c.close()
    check(m.body == "p0-5", "g1 partition 0 through node %d starts at %r" % (third, m.body))
    log("a g1 consumer through node %d starts partition 0 at %s" % (third, m.body))
    if third == 1:  # forwarded from partition 0's leader: node 1 timed its relay
        m = metric_values(metrics_text(mport))
        check(m.get("mqd_fwd_recv_deliveries_total", 0) >= 1
              and m.get("mqd_fwd_recv_relay_seconds_count") == m.get("mqd_fwd_recv_deliveries_total"),
              "node 1's forwarded receive metrics: %r" % {k: v for k, v in m.items() if "fwd_recv" in k})


mqdtest.main(body, timeout=300)
