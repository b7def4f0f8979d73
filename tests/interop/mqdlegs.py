"""Shared by 128 and 129 (issue 33, the leader side of forwarding): a 6-partition RF-3 topic
whose leaders are spread over three nodes, and "legs": receivers attached with the link
property mqd:fwd-local-only = true (what a node that merges a client's receiver over the
partitions' leaders opens on each leader), all in one Proton container on its own
thread, each recording what it got and how its link ended."""

import shutil
import threading
import time

import mqdtest
from mqdcluster import Etcd, Props, get_json, start_nodes, wait_for
from mqdtest import SLOW, check, log, skip

try:
    from proton import Message, symbol
    from proton.handlers import MessagingHandler
    from proton.reactor import Container, Copy, Filter
except ImportError:  # pragma: no cover
    Message = None
    MessagingHandler = object

LOCAL_ONLY = {"mqd:fwd-local-only": True}


def parts_state(etcd, topic, n):
    """{partition: state} of topic's n partitions, or None while one has none yet."""
    out = {}
    for p in range(n):
        ps = get_json(etcd.port, "/mqd/partitions/%s/%d" % (topic, p))
        if not ps:
            return None
        out[p] = ps
    return out


def leaders(etcd, topic, n):
    st = parts_state(etcd, topic, n)
    return {p: ps["leader"] for p, ps in st.items()} if st else None


def spread_topic(etcd, brokers, topic, n=6):
    """mqctl topic create topic (n partitions, replication_factor 3) on node 1; once every
    partition has an in-sync set of 3, partition p is made led by node p % 3 + 1 (mqctl
    cluster elect where the controller placed it elsewhere). Returns {partition: leader}."""
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", topic, "--partitions", str(n),
                                 "--config", "replication_factor=3")
    check(rc == 0, "topic create %s: %s" % (topic, out + err))
    wait_for("%s: every partition with an in-sync set of 3" % topic,
             lambda: (lambda st: st and all(len(ps["isr"]) == 3 for ps in st.values()))(
                 parts_state(etcd, topic, n)), 30)
    for p, lead in sorted(leaders(etcd, topic, n).items()):
        want = p % 3 + 1
        if lead != want:
            rc, out, err = mqdtest.mqctl(brokers[1].url, "cluster", "elect", topic, str(p), str(want))
            check(rc == 0, "elect %s %d %d: %s" % (topic, p, want, out + err))
    want = {p: p % 3 + 1 for p in range(n)}
    wait_for("%s led as %r" % (topic, want), lambda: leaders(etcd, topic, n) == want, 20)
    return want


def spread_cluster(t, topic):
    """A real etcd, nodes 1-3 (racks a/b/c, auto_leader_rebalance off) and topic (6
    partitions, RF 3) led as spread_topic leaves it: (etcd, {id: broker}, {p: leader})."""
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, {1: "a", 2: "b", 3: "c"}, lambda i: {"auto_leader_rebalance": "off"})
    lead = spread_topic(etcd, brokers, topic)
    log("leaders %r" % lead)
    return etcd, brokers, lead


def elect(etcd, broker, topic, part, node, n=6):
    rc, out, err = mqdtest.mqctl(broker.url, "cluster", "elect", topic, str(part), str(node))
    check(rc == 0, "elect %s %d %d: rc %d %s" % (topic, part, node, rc, out + err))
    wait_for("%s/%d led by node %d" % (topic, part, node), lambda: leaders(etcd, topic, n)[part] == node, 10)


class Send(mqdtest.Client):
    """Sends bodies (a list) as durable messages to url/address, each with the partition
    key key_of(body) when given; done once every one is settled (accepted counted)."""

    def __init__(self, url, address, bodies, key_of=None):
        super().__init__()
        self.url, self.address, self.bodies, self.key_of = url, address, bodies, key_of
        self.sent = self.accepted = 0
        self.other = []

    def on_start(self, e):
        e.container.create_sender(self.connect(e.container, self.url), self.address)

    def on_sendable(self, e):
        while e.sender.credit and self.sent < len(self.bodies):
            b = self.bodies[self.sent]
            m = Message(body=b, durable=True)
            if self.key_of:
                m.annotations = {"x-opt-partition-key": self.key_of(b)}
            e.sender.send(m)
            self.sent += 1

    def _settled(self):
        if self.accepted + len(self.other) == len(self.bodies):
            self.finish()

    def on_accepted(self, e):
        self.accepted += 1
        self._settled()

    def on_rejected(self, e):
        self.other.append(str(e.delivery.remote.condition))
        self._settled()

    def on_released(self, e):
        self.other.append("released")
        self._settled()

    def status(self):
        return "sent %d accepted %d other %r" % (self.sent, self.accepted, self.other[:3])


def send_all(url, address, bodies, key_of=None):
    s = Send(url, address, bodies, key_of)
    mqdtest.run_container(s, 60)
    check(s.accepted == len(bodies), "%s via %s: %s" % (address, url, s.status()))


class Legs(MessagingHandler):
    """Receivers with mqd:fwd-local-only, one per entry of `legs` ({name: (url, address)},
    the name is also the link's name), each on its own connection (browse:
    distribution-mode copy, browsers). Every message is accepted once received, but on a
    leg held with hold_leg: then at accept_held. got: (leg, partition, offset, body,
    time); ends: (leg, condition name, description, time) of every link or connection
    that ended other than by close(); props: {leg: the link properties of the broker's
    attach}."""

    def __init__(self, legs, credit=20, browse=False):
        super().__init__(prefetch=credit, auto_accept=False)
        self.legs, self.browse = dict(legs), browse
        self.hold, self.held = set(), {}  # legs whose deliveries wait for accept_held()
        self.got, self.ends = [], []
        self.props, self.links, self.conns = {}, {}, {}
        self.closing = set()
        self.lock = threading.Lock()
        self.cmds = []
        self.stop_flag = threading.Event()
        self.thread = None

    def _open(self, container, name):
        url, address = self.legs[name]
        c = container.connect(url, reconnect=False)
        self.conns[name] = c
        # a browser replays from the first record (a plain one of T shows only what is
        # still on the queue, issue 39 point 1: the queue legs read everything before)
        first = Filter({symbol("rabbitmq:stream-offset-spec"): "first"})
        opts = [Props(LOCAL_ONLY)] + ([Copy(), first] if self.browse else [])
        self.links[name] = container.create_receiver(c, address, name=name, options=opts)

    def _leg(self, link):
        for n, l in self.links.items():
            if l == link:
                return n
        return None

    def on_start(self, e):
        self.container = e.container
        for n in self.legs:
            self._open(e.container, n)
        e.container.schedule(0.05, self)

    def on_timer_task(self, e):
        with self.lock:
            cmds, self.cmds = self.cmds, []
        for cmd, name in cmds:
            if cmd == "close":
                self.closing.add(name)
                self.links[name].close()
            elif cmd == "accept":
                self.hold.discard(name)
                for d in self.held.pop(name, []):
                    self.accept(d)
            elif cmd == "open":
                self.closing.discard(name)
                self._open(self.container, name)
        if self.stop_flag.is_set():
            for n, c in self.conns.items():
                self.closing.add(n)
                c.close()
            return
        self.container.schedule(0.05, self)

    def on_link_opened(self, e):
        n = self._leg(e.link)
        if n:
            self.props[n] = {str(k): v for k, v in dict(e.link.remote_properties or {}).items()}

    def on_message(self, e):
        n = self._leg(e.link)
        part = int(mqdtest.ann(e.message, "x-opt-partition-id", "-1"))
        off = int(mqdtest.ann(e.message, "x-opt-offset", "-1"))
        self.got.append((n, part, off, e.message.body, time.time()))
        if n in self.hold:
            self.held.setdefault(n, []).append(e.delivery)
        else:
            self.accept(e.delivery)

    def _ended(self, name, cond):
        if name and name not in self.closing:
            self.ends.append((name, cond.name if cond else None, cond.description if cond else None,
                              time.time()))

    def on_link_remote_close(self, e):
        self._ended(self._leg(e.link), e.link.remote_condition)
        e.link.close()

    def on_transport_error(self, e):
        for n, c in self.conns.items():
            if c == e.connection:
                self._ended(n, e.transport.condition)

    def on_connection_error(self, e):
        pass

    def on_session_error(self, e):
        pass

    def on_link_error(self, e):
        pass

    # --- from the test's thread
    def start(self):
        self.thread = threading.Thread(target=lambda: Container(self).run(), daemon=True)
        self.thread.start()
        return self

    def close_leg(self, name):
        with self.lock:
            self.cmds.append(("close", name))

    def hold_leg(self, name):
        """From now on name's deliveries stay unsettled until accept_held(name)."""
        with self.lock:
            self.hold.add(name)

    def accept_held(self, name):
        with self.lock:
            self.cmds.append(("accept", name))

    def open_leg(self, name, url, address):
        with self.lock:
            self.legs[name] = (url, address)
            self.cmds.append(("open", name))

    def stop(self):
        self.stop_flag.set()
        if self.thread:
            self.thread.join(10 * SLOW)

    def snapshot(self):
        return list(self.got)

    def wait_count(self, n, timeout=30, what=""):
        wait_for("%d messages on the legs %s(have %d)" % (n, what, len(self.got)),
                 lambda: len(self.got) >= n, timeout)
        time.sleep(0.5 * SLOW)  # and no more than that
        return self.snapshot()


def by_partition(got):
    """{partition: [(offset, body, leg)] in arrival order}."""
    out = {}
    for leg, p, off, b, _ in got:
        out.setdefault(p, []).append((off, b, leg))
    return out


def log_legs(got):
    per = {}
    for leg, p, _, _, _ in got:
        per.setdefault(leg, {}).setdefault(p, 0)
        per[leg][p] += 1
    log("per leg, messages per partition: %r" % per)
