#!/usr/bin/python3
"""Issue 33 point 4: amqp:link:redirect when the attach asks for it. A real etcd and three
nodes (racks a/b/c), topic `orders` with 6 partitions and replication_factor 3 (leaders
spread, two per node); every client connects to node 1 first.

(a) a sender to orders/Partitions/P (P led by another node) with the link property
    mqd:redirect = true is refused with amqp:link:redirect whose info names 127.0.0.1,
    the leader's port (etcd's nodes/LEADER address) and the address orders/Partitions/P;
    following it (a new connection there, the same property) its 20 sends are all
    accepted, and the leader's routes give that partition a high watermark of 20.
(b) a receiver of orders/ConsumerGroups/g/Partitions/P with the property: the same
    redirect; following it, it reads those 20 messages in order.
(c) no link property, the connection's open desires the capability amqp:link:redirect
    (as the Event Hubs receiver-redirect design asks): the same redirect for another
    partition led elsewhere.
(c2) no property, the attach itself desires amqp:link:redirect (rhea, as the Event Hubs
    SDKs' receiver-redirect prototype attaches): redirected to the leader (skipped
    without node and rhea).
(d) the property on a link to a partition node 1 leads: attached and served there (10
    sends accepted); mqd:redirect = 5 is refused with amqp:invalid-field.
(e) node 1's /metrics counts 4 requested link redirects (3 without rhea) (mqd_redirects_total{kind=
    "link_requested"}). A link without the property or capability gets what main gives
    by default (logged only: forwarding changes it)."""

import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, Props, Receiver, Sender, create_spread, get_json, metrics_text, route_read, start_nodes  # noqa: E402,E501
from mqdtest import SLOW, Collect, check, log, skip  # noqa: E402

from proton import symbol  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
NPARTS = 6
REDIRECT = "amqp:link:redirect"
ASK = {"mqd:redirect": True}


class AskingReceiver(Receiver):
    """mqdcluster's Receiver with link properties (and an ack of each message)."""

    def __init__(self, url, address, n, props, idle_s=2.0):
        super().__init__(url, address, n, idle_s)
        self.props = props

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        e.container.create_receiver(c, self.address, options=[Props(self.props)])
        e.container.schedule(0.2, self)


class CapSender(Sender):
    """mqdcluster's Sender whose connection's open desires amqp:link:redirect."""

    def on_start(self, e):
        c = self.connect(e.container, self.url, desired_capabilities=[symbol(REDIRECT)])
        e.container.create_sender(c, self.address)


RHEA = r"""
const rhea = require('rhea');
const [port, address] = process.argv.slice(1);
const c = rhea.create_container({id: 'rhea-131'});
const conn = c.connect({host: '127.0.0.1', port: +port, reconnect: false});
const out = (o) => { console.log(JSON.stringify(o)); process.exit(0); };
conn.open_receiver({source: {address}, desired_capabilities: 'amqp:link:redirect'});
// mqd answers a refused attach with an attach and a detach at once: wait for the detach
c.on('receiver_open', () => setTimeout(() => out({open: true}), 2000));
c.on('receiver_error', (ctx) => {
  const e = ctx.receiver.error || {};
  out({condition: e.condition, info: e.info || {}});
});
setTimeout(() => out({timeout: true}), 10000);
"""


def rhea_attach(port, address):
    """A rhea receiver whose attach desires amqp:link:redirect: its outcome as a dict, or
    None without node and rhea."""
    node = shutil.which("node") or shutil.which("nodejs")
    mods = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node", "node_modules")
    if not node or not os.path.isdir(os.path.join(mods, "rhea")):
        return None
    p = subprocess.run([node, "-e", RHEA, str(port), address], capture_output=True, text=True,
                       timeout=60 * SLOW, env=dict(os.environ, NODE_PATH=mods))
    log("rhea: rc %d %r %r" % (p.returncode, p.stdout.strip(), p.stderr.strip()[-300:]))
    return json.loads(p.stdout.strip().splitlines()[0])


def run(client, what):
    mqdtest.run_container(client, 60)
    log("%s: %s, link %r" % (what, client.status(), client.link_cond))
    return client


def check_redirect(cond, leader_port, address, what):
    check(cond is not None, "%s: not refused" % what)
    name, desc, info = cond
    info = {str(k): v for k, v in info.items()}
    check(name == REDIRECT and info.get("network-host") == "127.0.0.1" and
          int(info.get("port", 0)) == leader_port and info.get("address") == address,
          "%s: %s %r %r (leader's port %d)" % (what, name, desc, info, leader_port))
    return "amqp://%s:%d" % (info["network-host"], int(info["port"])), info["address"]


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    mport = mqdtest.free_port()
    brokers = start_nodes(t, etcd, RACKS,
                          sets_of=lambda i: {"metrics_listen": "127.0.0.1:%d" % mport} if i == 1 else {})
    ps = create_spread(etcd, brokers[1].url, nparts=NPARTS)
    leaders = [ps[p]["leader"] for p in range(NPARTS)]
    away = [p for p in range(NPARTS) if leaders[p] != 1]
    here = [p for p in range(NPARTS) if leaders[p] == 1]
    check(len(away) >= 2 and here, "leaders not spread: %r" % leaders)
    port_of = {i: int(get_json(etcd.port, "/mqd/nodes/%d" % i)["address"].rsplit(":", 1)[1]) for i in RACKS}
    check(port_of == {i: b.port for i, b in brokers.items()}, "registered ports %r" % port_of)
    n1 = brokers[1].url
    coll = Collect()
    p, q = away[0], away[1]
    addr = "orders/Partitions/%d" % p
    with coll.case("(a) a sender that asks is redirected; following it, 20 sends accepted"):
        s = run(Sender(n1, addr, 20, "a", props=ASK), "asking sender on node 1")
        check(s.sent == 0 and s.accepted == 0, "node 1 took sends: %s" % s.status())
        url, to = check_redirect(s.link_cond, port_of[leaders[p]], addr, "sender")
        s2 = run(Sender(url, to, 20, "a", props=ASK), "sender on the leader")
        check(s2.link_cond is None and s2.accepted == 20 and not s2.rejected, "on the leader: %s" % s2.status())
        st, rep = route_read(brokers[leaders[p]].url)
        r = rep["routes"][p]
        check(r["high_watermark"] == 20 and r["leader"] == leaders[p], "the leader's route: %r" % r)
    with coll.case("(b) a receiver that asks is redirected; following it, the 20 in order"):
        gaddr = "orders/ConsumerGroups/g/Partitions/%d" % p
        r = run(AskingReceiver(n1, gaddr, 20, ASK), "asking receiver on node 1")
        check(not r.bodies, "node 1 delivered %r" % r.bodies[:3])
        url, to = check_redirect(r.link_cond, port_of[leaders[p]], gaddr, "receiver")
        r2 = run(AskingReceiver(url, to, 20, ASK), "receiver on the leader")
        check(r2.link_cond is None and r2.bodies == ["a-%d" % i for i in range(20)],
              "on the leader: %r %r" % (r2.link_cond, r2.bodies))
    with coll.case("(c) the connection's desired capability asks too"):
        caddr = "orders/Partitions/%d" % q
        s = run(CapSender(n1, caddr, 5, "c"), "sender with the capability")
        check(s.sent == 0, "node 1 took sends: %s" % s.status())
        check_redirect(s.link_cond, port_of[leaders[q]], caddr, "capability sender")
    asked = 3
    with coll.case("(c2) the attach's own desired capability (rhea)"):
        raddr = "orders/ConsumerGroups/eh/Partitions/%d" % q
        got = rhea_attach(brokers[1].port, raddr)
        if got is None:
            log("node or rhea missing: (c2) skipped")
        else:
            asked += 1
            info = got.get("info", {})
            check(got.get("condition") == REDIRECT and info.get("network-host") == "127.0.0.1" and
                  int(info.get("port", 0)) == port_of[leaders[q]] and info.get("address") == raddr,
                  "rhea: %r (leader's port %d)" % (got, port_of[leaders[q]]))
    with coll.case("(d) led here: served; a bad mqd:redirect is refused"):
        s = run(Sender(n1, "orders/Partitions/%d" % here[0], 10, "d", props=ASK), "asking sender, led here")
        check(s.link_cond is None and s.accepted == 10, "led here: %s %r" % (s.status(), s.link_cond))
        s = run(Sender(n1, addr, 1, "e", props={"mqd:redirect": 5}), "mqd:redirect = 5")
        check(s.link_cond and s.link_cond[0] == "amqp:invalid-field" and "mqd:redirect" in s.link_cond[1],
              "bad value: %r" % (s.link_cond,))
    with coll.case("(e) metrics; no property: today's default (not asserted)"):
        s = run(Sender(n1, addr, 1, "f"), "sender without the property")
        log("without the property: %r, %s" % (s.link_cond, s.status()))
        got = re.findall(r'^mqd_redirects_total\{kind="link_requested"\} (\d+)$', metrics_text(mport), re.M)
        check(got == [str(asked)], "requested link redirects: %r, want %d" % (got, asked))
    for b in brokers.values():
        b.check_alive("at the end")
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
