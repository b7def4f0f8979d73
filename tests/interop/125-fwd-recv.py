#!/usr/bin/python3
"""Forwarded receivers (issue 33 point 1, receives): any node serves a receiver whose
partitions other nodes lead. A real etcd and three mqd nodes (racks a/b/c), topic fr: 6
partitions, replication_factor 3, its leaders spread over the three nodes by the
controller. N keyed messages are sent to each partition's leader (`fr/Partitions/P`,
bodies "<key>:<seq>", three keys per partition), so that every node leads records.

(a) `fr/ConsumerGroups/ga/Partitions/P` through a node X that does not lead P: it reads
    exactly P's messages, in order, with x-opt-offset 0, 1, ... and x-opt-partition-id P;
    the first one released comes again (same offset) on the same link; K accepted, the
    link closed and attached again through X: the next offset read is K (the commit
    reached the leader); the link was answered by X (never amqp:link:redirect).
(b) a `$shared` receiver on `fr` through one node that does not lead every partition
    (legs to every leader, this node included): every message exactly once, per-key order.
(c) group `fr/ConsumerGroups/g1` with one member on each of two different nodes: every
    message exactly once overall, per-key order, each partition read by one member only.
(e) a browser of `fr` (copy mode) through a node that does not lead every partition
    asks for everything with a drain of 1,000 credits: it gets every message once, per-key
    order, and then its credit is drained (0, not draining): the client's drain went to
    every leg and came back once all were drained.
(d) with users and an [acl] (user `reader` may receive from fr, user `nobody` may not),
    `nobody`'s receiver on `fr/ConsumerGroups/gd/Partitions/P` through a non-leader is
    refused at attach with amqp:unauthorized-access; `reader`'s reads P's messages (the
    leader authorized the forwarded link as `reader`, mqd:fwd-user)."""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, cluster_sets, get_json, read_keys, repl_user_sets, wait_for  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

try:
    from proton import Message
except ImportError:  # pragma: no cover
    Message = None

RACKS = {1: "a", 2: "b", 3: "c"}
TOPIC = "fr"
NPARTS = 6
PER_PART = 60  # messages per partition
KEYS = 3


def passwd_hash(user, pw):
    import subprocess
    exe = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    r = subprocess.run([exe, "--plain", "--iterations", "1000", user], input=(pw + "\n").encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return [ln.split("=", 1)[1].strip() for ln in r.stdout.decode().splitlines()
            if ln.startswith("password_hash")][0]


def leaders(etcd):
    return {p: get_json(etcd.port, "/mqd/partitions/%s/%d" % (TOPIC, p))["leader"] for p in range(NPARTS)}


def all_isr(etcd):
    for p in range(NPARTS):
        ps = get_json(etcd.port, "/mqd/partitions/%s/%d" % (TOPIC, p))
        if not ps or sorted(ps["isr"]) != [1, 2, 3]:
            return None
    return True


class PartSender(mqdtest.Client):
    """Sends PER_PART messages to each `fr/Partitions/P` on its leader's url."""

    def __init__(self, urls, user=None):
        super().__init__(auto_settle=True)
        self.urls, self.user = urls, user
        self.sent = {}
        self.accepted = 0
        self.rejected = []

    def on_start(self, e):
        for p, url in self.urls.items():
            kw = {"user": self.user[0], "password": self.user[1], "allowed_mechs": "PLAIN",
                  "allow_insecure_mechs": True} if self.user else {}
            c = self.connect(e.container, url, **kw)
            e.container.create_sender(c, "%s/Partitions/%d" % (TOPIC, p))

    def on_sendable(self, e):
        p = int(e.sender.target.address.rsplit("/", 1)[1])
        n = self.sent.get(p, 0)
        while e.sender.credit and n < PER_PART:
            key = "p%d-k%d" % (p, n % KEYS)
            e.sender.send(Message(body="%s:%d" % (key, n), durable=True,
                                  annotations={"x-opt-partition-key": key}))
            n += 1
        self.sent[p] = n

    def on_accepted(self, e):
        self.accepted += 1
        if self.accepted + len(self.rejected) == NPARTS * PER_PART:
            self.finish()

    def on_rejected(self, e):
        self.rejected.append(str(e.delivery.remote.condition))
        self.on_accepted(e)
        self.accepted -= 1

    def status(self):
        return "accepted %d rejected %d" % (self.accepted, len(self.rejected))


class Reader(mqdtest.Client):
    """One receiver on `address` through url: records (body, offset, partition); accepts
    each unless told otherwise; releases the first one once when release_first; stops
    after `n` deliveries or idle_s without one (after the first)."""

    def __init__(self, url, address, n=None, idle_s=3.0, release_first=False, user=None, accept=True):
        super().__init__(auto_accept=False, prefetch=10)
        self.url, self.address, self.n, self.idle_s = url, address, n, idle_s * SLOW
        self.release_first, self.user, self.do_accept = release_first, user, accept
        self.got = []
        self.released = None
        self.link_cond = None
        self.last = None
        self.opened = False

    def on_start(self, e):
        kw = {"user": self.user[0], "password": self.user[1], "allowed_mechs": "PLAIN",
              "allow_insecure_mechs": True} if self.user else {}
        c = self.connect(e.container, self.url, **kw)
        self.rcv = e.container.create_receiver(c, self.address)
        e.container.schedule(0.2, self)

    def on_link_opened(self, e):
        self.opened = True

    def on_timer_task(self, e):
        if self.done:
            return
        if self.last and time.monotonic() - self.last > self.idle_s:
            self.finish()
            return
        e.container.schedule(0.2, self)

    def on_message(self, e):
        m = e.message
        off = int(mqdtest.ann(m, "x-opt-offset", "-1"))
        part = int(mqdtest.ann(m, "x-opt-partition-id", "-1"))
        self.last = time.monotonic()
        if self.release_first and self.released is None:
            self.released = (m.body, off)
            self.got.append((m.body, off, part, "released"))
            self.release(e.delivery, delivered=False)
            return
        self.got.append((m.body, off, part, "ok"))
        if self.do_accept:
            self.accept(e.delivery)
        if self.n is not None and len([g for g in self.got if g[3] == "ok"]) >= self.n:
            self.finish()

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description) if c else (None, None)
        self.finish()

    def status(self):
        return "%s: got %d, link %s" % (self.address, len(self.got), self.link_cond)


def per_key_order(bodies):
    """Violations of per-key order (seq must grow per key)."""
    last, bad = {}, []
    for b in bodies:
        k, s = b.rsplit(":", 1)
        if int(s) <= last.get(k, -1):
            bad.append(b)
        last[k] = int(s)
    return bad


def expected(p):
    return ["p%d-k%d:%d" % (p, n % KEYS, n) for n in range(PER_PART)]


def case_a(brokers, lead, coll):
    p = 0
    x = next(i for i in sorted(brokers) if i != lead[p])
    addr = "%s/ConsumerGroups/ga/Partitions/%d" % (TOPIC, p)
    with coll.case("(a) one partition through a non-leader: P's messages in order, offsets, release, commit"):
        r = Reader(brokers[x].url, addr, n=PER_PART, release_first=True)
        mqdtest.run_container(r, 60)
        log("(a) node %d (partition %d led by %d): %s" % (x, p, lead[p], r.status()))
        check(r.link_cond is None, "link refused or detached: %r" % (r.link_cond,))
        ok = [(b, o, q) for b, o, q, s in r.got if s == "ok"]
        # the released offset 0 comes again once (after what the link's credit had
        # already taken); the rest in order
        check(sorted(b for b, _, _ in ok) == sorted(expected(p)), "bodies not partition %d's: %r" % (p, ok[:5]))
        check(sorted(o for _, o, _ in ok) == list(range(PER_PART)), "offsets: %r" % [o for _, o, _ in ok][:10])
        rest = [o for _, o, _ in ok if o != 0]
        check(rest == list(range(1, PER_PART)), "offsets not in order: %r" % rest[:10])
        check(all(int(b.rsplit(":", 1)[1]) == o for b, o, _ in ok), "offset and body disagree")
        check(all(q == p for _, _, q in ok), "x-opt-partition-id not %d" % p)
        check(r.released == (expected(p)[0], 0), "released %r" % (r.released,))
        # accept K, detach, attach again: the next offset is K
        k = 10
        r2 = Reader(brokers[x].url, "%s/ConsumerGroups/gk/Partitions/%d" % (TOPIC, p), n=k)
        mqdtest.run_container(r2, 60)
        check([o for _, o, _, _ in r2.got] == list(range(k)), "first %d: %r" % (k, r2.got))
        time.sleep(1.5 * SLOW)  # the leader persists the group's offset (1 s)
        r3 = Reader(brokers[x].url, "%s/ConsumerGroups/gk/Partitions/%d" % (TOPIC, p), n=1)
        mqdtest.run_container(r3, 60)
        log("(a) after %d accepted and a new attach: %r" % (k, r3.got[:1]))
        check(r3.got and r3.got[0][1] == k, "reattached link read %r, not offset %d" % (r3.got[:1], k))


def case_b(brokers, lead, coll):
    counts = {i: sum(1 for v in lead.values() if v == i) for i in brokers}
    x = min(brokers, key=lambda i: counts[i])  # a node that does not lead every partition
    with coll.case("(b) $shared receiver on the topic through node %d: everything once, per-key order" % x):
        r = Reader(brokers[x].url, TOPIC, n=NPARTS * PER_PART, idle_s=5.0)
        mqdtest.run_container(r, 120)
        log("(b) %s" % r.status())
        check(r.link_cond is None, "link refused or detached: %r" % (r.link_cond,))
        bodies = [b for b, _, _, _ in r.got]
        want = sorted(b for p in range(NPARTS) for b in expected(p))
        check(sorted(bodies) == want, "got %d (%d distinct) of %d" % (len(bodies), len(set(bodies)), len(want)))
        bad = per_key_order(bodies)
        check(not bad, "per-key order broken: %r" % bad[:5])


class Group(mqdtest.Client):
    """Members of one group, each on its own node, accepting all. They get credit only
    once every member's link is open and 1 s x SLOW passed (every leader's group has all
    their legs: the partitions are assigned once, not moved by a member joining later);
    stops when the union reaches `total` and is idle."""

    class _Go:
        def __init__(self, g):
            self.g = g

        def on_timer_task(self, e):
            for r in self.g.rcvs:
                r.flow(10)

    def __init__(self, urls, address, total):
        super().__init__(prefetch=0)
        self.urls, self.address, self.total = urls, address, total
        self.got = {}
        self.link_cond = None
        self.last = time.monotonic()
        self.rcvs = []
        self.opened = 0

    def on_start(self, e):
        for i, url in enumerate(self.urls):
            c = self.connect(e.container, url)
            self.rcvs.append(e.container.create_receiver(c, self.address, name="member-%d" % i))
            self.got["member-%d" % i] = []
        e.container.schedule(0.2, self)

    def on_link_opened(self, e):
        self.opened += 1
        if self.opened == len(self.urls):
            e.container.schedule(1.0 * SLOW, Group._Go(self))

    def on_timer_task(self, e):
        if self.done:
            return
        n = sum(len(v) for v in self.got.values())
        if n >= self.total and time.monotonic() - self.last > 2 * SLOW:
            self.finish()
            return
        e.container.schedule(0.2, self)

    def on_message(self, e):
        m = e.message
        self.got[e.link.name].append((m.body, int(mqdtest.ann(m, "x-opt-partition-id", "-1"))))
        self.last = time.monotonic()
        e.link.flow(1)

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description) if c else (None, None)
        self.finish()

    def status(self):
        return "members got %r, link %s" % ({k: len(v) for k, v in self.got.items()}, self.link_cond)


def case_c(brokers, lead, coll):
    a, b = sorted(brokers)[:2]
    with coll.case("(c) group members on nodes %d and %d: everything once, per-key order, exclusive partitions" % (a, b)):
        g = Group([brokers[a].url, brokers[b].url], "%s/ConsumerGroups/g1" % TOPIC, NPARTS * PER_PART)
        mqdtest.run_container(g, 120)
        log("(c) %s" % g.status())
        check(g.link_cond is None, "link refused or detached: %r" % (g.link_cond,))
        allb = [b for v in g.got.values() for b, _ in v]
        want = sorted(b for p in range(NPARTS) for b in expected(p))
        check(sorted(allb) == want, "got %d (%d distinct) of %d" % (len(allb), len(set(allb)), len(want)))
        for m, v in g.got.items():
            bad = per_key_order([b for b, _ in v])
            check(not bad, "%s: per-key order broken: %r" % (m, bad[:5]))
        parts = {m: {p for _, p in v} for m, v in g.got.items()}
        both = set.intersection(*parts.values()) if parts else set()
        check(not both, "partitions read by both members: %r" % sorted(both))
        check(all(parts.values()), "a member read nothing: %r" % parts)


class Drainer(mqdtest.Client):
    """A browser of `address` that asks for `n` with drain; done once the drain ended."""

    def __init__(self, url, address, n):
        super().__init__(prefetch=0)
        self.url, self.address, self.n = url, address, n
        self.got = []
        self.link_cond = None
        self.drained = False

    def on_start(self, e):
        from proton import symbol
        from proton.reactor import Copy, Filter
        c = self.connect(e.container, self.url)
        # a replay from the first record: a plain browser of T shows only what is still on
        # the queue (issue 39 point 1), and (b) consumed everything before
        first = Filter({symbol("rabbitmq:stream-offset-spec"): "first"})
        self.rcv = e.container.create_receiver(c, self.address, options=[Copy(), first])
        self.rcv.drain(self.n)
        e.container.schedule(0.2, self)

    def on_timer_task(self, e):
        if self.done:
            return
        if self.got and self.rcv.credit == 0 and not self.rcv.draining():
            self.drained = True
            self.finish()
            return
        e.container.schedule(0.1, self)

    def on_message(self, e):
        self.got.append(e.message.body)

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description) if c else (None, None)
        self.finish()

    def status(self):
        return "browser got %d, credit %d, link %s" % (len(self.got), self.rcv.credit, self.link_cond)


def case_e(brokers, lead, coll):
    counts = {i: sum(1 for v in lead.values() if v == i) for i in brokers}
    x = max(brokers, key=lambda i: counts[i])
    with coll.case("(e) a browser through node %d drains: everything once, then credit 0" % x):
        d = Drainer(brokers[x].url, TOPIC, 1000)
        mqdtest.run_container(d, 60)
        log("(e) %s" % d.status())
        check(d.link_cond is None and d.drained, "not drained: %s" % d.status())
        want = sorted(b for p in range(NPARTS) for b in expected(p))
        check(sorted(d.got) == want, "got %d (%d distinct) of %d" % (len(d.got), len(set(d.got)), len(want)))
        check(not per_key_order(d.got), "per-key order broken")


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    if Message is None:
        skip("proton not importable")
    etcd = Etcd(t)
    etcd.start()
    users = repl_user_sets()
    users["user.reader.password_hash"] = passwd_hash("reader", "r3ad")
    users["user.nobody.password_hash"] = passwd_hash("nobody", "n0pe")
    conf = os.path.join(t.tmpdir, "acl.conf")
    with open(conf, "w") as f:  # nobody may not read fr; everyone else may do everything
        f.write("[acl]\ndeny nobody all fr\nallow * all *\n")
    brokers = {}
    for i, rack in RACKS.items():
        b = t.broker("n%d" % i, start=False,
                     sets=cluster_sets(etcd, i, rack, auto_leader_rebalance="off", **users))
        b.conf = conf
        b.start()
        brokers[i] = b
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", TOPIC, "--partitions", str(NPARTS),
                                 "--config", "replication_factor=3")
    check(rc == 0, "topic create: %s" % (out + err))
    wait_for("every partition placed with an ISR of 3", lambda: all_isr(etcd), 40)
    lead = leaders(etcd)
    log("leaders: %r" % lead)
    check(len(set(lead.values())) == 3, "the leaders are not spread over the three nodes: %r" % lead)
    s = PartSender({p: brokers[lead[p]].url for p in range(NPARTS)})
    mqdtest.run_container(s, 60)
    check(s.accepted == NPARTS * PER_PART, "sends: %s %r" % (s.status(), s.rejected[:3]))
    coll = mqdtest.Collect()
    case_a(brokers, lead, coll)
    case_b(brokers, lead, coll)
    case_c(brokers, lead, coll)
    case_e(brokers, lead, coll)
    p = 1
    x = next(i for i in sorted(brokers) if i != lead[p])
    with coll.case("(d) the ACL holds through a non-leader: refused at attach / read as the client's user"):
        r = Reader(brokers[x].url, "%s/ConsumerGroups/gd/Partitions/%d" % (TOPIC, p), n=1, user=("nobody", "n0pe"))
        mqdtest.run_container(r, 30)
        log("(d) nobody: %s" % r.status())
        check(r.link_cond and r.link_cond[0] == "amqp:unauthorized-access" and not r.got,
              "nobody's receiver: %r, got %d" % (r.link_cond, len(r.got)))
        r = Reader(brokers[x].url, "%s/ConsumerGroups/gd/Partitions/%d" % (TOPIC, p), n=PER_PART,
                   user=("reader", "r3ad"))
        mqdtest.run_container(r, 60)
        log("(d) reader: %s" % r.status())
        check(r.link_cond is None and [b for b, _, _, _ in r.got] == expected(p),
              "reader's receiver: %r, got %d" % (r.link_cond, len(r.got)))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
