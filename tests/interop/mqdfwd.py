"""Shared helpers of the forwarding tests (121-123, issue 33): a cluster of three nodes
whose clients log in with SASL PLAIN under an [acl], a 6-partition topic with
replication_factor 3 led by every node, keyed senders that record every outcome, and a
read of every partition from its leader."""

import os
import shutil
import time

import consoletest
import mqdtest
from mqdcluster import Etcd, cluster_sets, get_json, read_keys, repl_user_sets, wait_for
from mqdtest import SLOW, check, log, skip

from proton import Message, symbol

RACKS = {1: "a", 2: "b", 3: "c"}
PW = {"admin": "admin-pw", "carol": "carol-pw"}
NPARTS = 6


def start_cluster(t, etcd, extra=None, anonymous=None, more=""):
    """Three nodes sharing one config file (users admin and carol, an [acl] that gives
    carol orders.* only, the replication user), started; {id: Broker}. anonymous: a topic
    pattern anonymous clients (the Event Hubs SDKs' SASL ANONYMOUS) get every right on;
    more: config sections appended."""
    conf = os.path.join(t.tmpdir, "fwd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = %s\nallow_plain_without_tls = on\n"
                "auto_leader_rebalance = off\n" % ("on" if anonymous else "off"))
        for u, p in PW.items():
            f.write(consoletest.mqd_passwd(u, p))
        f.write("[acl]\nallow admin all *\nallow carol all orders.*\n")
        if anonymous:
            f.write("allow * all %s\n" % anonymous)
        f.write(more)
    sets = dict(repl_user_sets())
    sets.update(extra or {})
    brokers = {i: t.broker("n%d" % i, start=False, conf=conf,
                           sets=cluster_sets(etcd, i, r, **sets)) for i, r in RACKS.items()}
    for b in brokers.values():
        b.start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    return brokers


def cluster_with_topic(t, topic, spread=True, topic_extra=(), **kw):
    """etcd, the three nodes and topic (6 partitions, replication_factor 3) created on
    node 1; with spread, its leaders checked to be on every node. (etcd, brokers, leaders)."""
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_cluster(t, etcd, **kw)
    lead = create_topic(etcd, brokers[1], topic, extra=topic_extra)
    log("leaders of %s: %r" % (topic, lead))
    if spread:
        check(set(lead.values()) == {1, 2, 3}, "leaders not spread over the 3 nodes: %r" % lead)
    return etcd, brokers, lead


def url_as(b, user):
    return b.url.replace("amqp://", "amqp://%s:%s@" % (user, PW[user]))


def create_topic(etcd, b, topic, nparts=NPARTS, extra=()):
    """mqctl topic create (as admin), replication_factor 3; waits for every partition's
    state with a full in-sync set; {partition: leader}."""
    cfg = ["--config", "replication_factor=3"]
    if not any(e.startswith("dedup_window_ms=") for e in extra):
        cfg += ["--config", "dedup_window_ms=600000"]
    for e in extra:
        cfg += ["--config", e]
    rc, out, err = mqdtest.mqctl(url_as(b, "admin"), "topic", "create", topic, "--partitions",
                                 str(nparts), *cfg)
    check(rc == 0, "topic create %s: %s" % (topic, out + err))

    def states():
        ps = [get_json(etcd.port, "/mqd/partitions/%s/%d" % (topic, p)) for p in range(nparts)]
        return ps if all(s and len(s["isr"]) == 3 for s in ps) else None
    ps = wait_for("%s placed with full in-sync sets" % topic, states, 30)
    return {p: s["leader"] for p, s in enumerate(ps)}


def leaders_of(etcd, topic, nparts=NPARTS):
    return {p: get_json(etcd.port, "/mqd/partitions/%s/%d" % (topic, p))["leader"]
            for p in range(nparts)}


def keyed(i, nkeys, tag):
    """Message i of a keyed run: key k<i % nkeys>, body "<tag>:<key>:<i>", message-id."""
    k = "k%d" % (i % nkeys)
    return Message(body="%s:%s:%d" % (tag, k, i), id="%s-%d" % (tag, i), durable=True,
                   annotations={symbol("x-opt-partition-key"): k})


class Sender(mqdtest.Client):
    """Sends the messages of make(i) for i < n on one link (address None: the anonymous
    relay), at most `window` unsettled; records which indexes were accepted (by tag), the
    other outcomes, the link's error, and the time of each acceptance."""

    def __init__(self, url, address, n, make, window=200, user="admin", until=None):
        super().__init__()
        self.url, self.address, self.n, self.make, self.window = url, address, n, make, window
        self.user = user
        self.until = until  # a callable: stop sending new messages once it returns true
        self.sent = 0
        self.ok = []
        self.bad = []  # (index, state, condition name, description)
        self.link_cond = None
        self.by_tag = {}
        self.accept_times = []

    def on_start(self, e):
        c = self.connect(e.container, self.url, user=self.user, password=PW[self.user],
                         allowed_mechs="PLAIN")
        self.snd = e.container.create_sender(c, self.address)

    def on_sendable(self, e):
        self._send()

    def _send(self):
        s = self.snd
        while s.credit and self.sent < self.n and \
                self.sent - len(self.ok) - len(self.bad) < self.window:
            if self.until and self.until():
                self.n = self.sent
                break
            d = s.send(self.make(self.sent))
            self.by_tag[d.tag] = self.sent
            self.sent += 1
        if self.sent == self.n and len(self.ok) + len(self.bad) == self.n:
            self.finish()

    def on_accepted(self, e):
        self.ok.append(self.by_tag.get(e.delivery.tag))
        self.accept_times.append(time.monotonic())
        self._send()

    def _other(self, e, state):
        c = e.delivery.remote.condition
        self.bad.append((self.by_tag.get(e.delivery.tag), state, c.name if c else None,
                         c.description if c else None))
        self._send()

    def on_rejected(self, e):
        self._other(e, "rejected")

    def on_released(self, e):
        self._other(e, "released")

    def on_modified(self, e):
        self._other(e, "modified")

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description) if c else (None, None)
        self.finish()

    def status(self):
        return "sent %d accepted %d other %d" % (self.sent, len(self.ok), len(self.bad))


def send_all(url, address, n, make, timeout=120, **kw):
    s = Sender(url, address, n, make, **kw)
    mqdtest.run_container(s, timeout)
    check(s.link_cond is None and s.error is None,
          "sender to %s: link error %r / %r" % (address, s.link_cond, s.error))
    check(not s.bad, "sends to %s not accepted: %r" % (address, s.bad[:5]))
    check(len(s.ok) == n, "%d of %d sends to %s accepted" % (len(s.ok), n, address))
    return s


def read_partitions(brokers, etcd, topic, group, nparts=NPARTS):
    """Every message body of every partition of topic, read from its leader in a new group:
    {partition: [body, ...]} in offset order."""
    out = {}
    for p, lead in sorted(leaders_of(etcd, topic, nparts).items()):
        r = mqdtest.Receiver(url_as(brokers[lead], "admin"),
                             "%s/ConsumerGroups/%s/Partitions/%d" % (topic, group, p),
                             idle=2.0 * SLOW)
        mqdtest.run_container(r, 120)
        check(r.error is None, "read of %s/%d from node %d: %s" % (topic, p, lead, r.error))
        out[p] = [m.body for m in r.got]
        log("%s/%d (node %d): %d messages" % (topic, p, lead, len(out[p])))
    return out


def check_keyed(parts, tag, n, nkeys, nparts=NPARTS):
    """Every body "<tag>:<key>:<i>" for i < n is in the partition murmur2(key) picks, once,
    and each key's indexes grow along its partition."""
    seen = {}
    for p, bodies in parts.items():
        last = {}
        for b in bodies:
            if not isinstance(b, str) or not b.startswith(tag + ":"):
                continue
            _, k, i = b.split(":")
            i = int(i)
            want = mqdtest.kafka_partition(k, nparts)
            check(want == p, "%s (key %s) in partition %d, murmur2 picks %d" % (b, k, p, want))
            check(i not in seen, "%s stored twice (partitions %d and %d)" % (b, seen.get(i, -1), p))
            seen[i] = p
            check(last.get(k, -1) < i, "key %s out of order in partition %d: %d after %d"
                  % (k, p, i, last.get(k, -1)))
            last[k] = i
    missing = [i for i in range(n) if i not in seen]
    check(not missing, "%d of %d %s messages missing, e.g. %r" % (len(missing), n, tag, missing[:5]))
