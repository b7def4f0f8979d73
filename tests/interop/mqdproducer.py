"""The producer of the replication fault tests (95, 96): batches of 10 durable messages
with unique bodies ("p-<seq>", seq rising) and mqd:acks = all, each batch to the node etcd
names as the partition's leader at that moment; every outcome is kept with the node, the
batch's start and the time it was seen, so a test can count acknowledgements per node
around a cut or a kill."""

import threading
import time

import mqdtest
from mqdcluster import Props, get_json

try:
    from proton import Message
except ImportError:  # pragma: no cover
    Message = None


class Batch(mqdtest.Client):
    """Sends bodies to url/address (mqd:acks = all) and records (body, outcome, time)."""

    def __init__(self, url, address, bodies, out):
        super().__init__(auto_settle=True)
        self.url, self.address, self.bodies, self.out = url, address, bodies, out
        self.by_tag = {}
        self.sent = 0

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        e.container.create_sender(c, self.address, options=[Props({"mqd:acks": "all"})])

    def on_sendable(self, e):
        while e.sender.credit and self.sent < len(self.bodies):
            b = self.bodies[self.sent]
            d = e.sender.send(Message(body=b, durable=True))
            self.by_tag[d.tag] = b
            self.sent += 1

    def _outcome(self, e, what):
        c = e.delivery.remote.condition if what == "rejected" else None
        self.out.append((self.by_tag.get(e.delivery.tag), what, c.name if c else None,
                         c.description if c else None, time.monotonic()))
        if len(self.out) >= len(self.bodies):
            self.finish()

    def on_accepted(self, e):
        self._outcome(e, "accepted")

    def on_rejected(self, e):
        self._outcome(e, "rejected")

    def on_released(self, e):
        self._outcome(e, "released")

    def on_link_error(self, e):
        self.finish()

    def on_transport_closed(self, e):
        super().on_transport_closed(e)
        self.done = True  # a refused connect has no connection to count as closed

    def status(self):
        return "%d of %d settled" % (len(self.out), len(self.bodies))


class Producer:
    """Batches to the node etcd names leader under key, until stopped (or max_msgs). events: per
    message (node, body, outcome, condition, description, t_sent, t_outcome)."""

    def __init__(self, etcd, key, brokers, address, max_msgs=40000):
        self.etcd, self.key, self.brokers, self.address = etcd, key, brokers, address
        self.max_msgs = max_msgs
        self.events, self.errors = [], []
        self.batches = []  # (node, start, end, outcomes, error or None)
        self.seq = 0
        self.stop = threading.Event()
        self.hold = threading.Event()  # set: no new batch (idle says none is under way)
        self.idle = threading.Event()
        self.th = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self.stop.is_set() and self.seq < self.max_msgs:
            if self.hold.is_set():
                self.idle.set()
                time.sleep(0.05)
                continue
            self.idle.clear()
            try:
                leader = get_json(self.etcd.port, self.key)["leader"]
            except Exception as e:  # etcd is never cut from the test: a real error
                self.errors.append("etcd read: %s" % e)
                time.sleep(0.1)
                continue
            bodies = ["p-%d" % (self.seq + i) for i in range(10)]
            self.seq += 10
            out = []
            t0 = time.monotonic()
            err = None
            try:
                mqdtest.run_container(Batch(self.brokers[leader].url, self.address, bodies, out), 30)
            except Exception as e:  # a connection lost or refused: try the leader again
                err = "batch to %d: %s" % (leader, e)
                self.errors.append(err)
                time.sleep(0.1)
            self.batches.append((leader, t0, time.monotonic(), len(out), err))
            self.events += [(leader, b, o, cn, cd, t0, t) for b, o, cn, cd, t in out]
            if not [o for o in out if o[1] == "accepted"]:
                time.sleep(0.05)  # refused at once: no busy loop of connections

    def pause(self, timeout):
        self.idle.clear()
        self.hold.set()
        self.idle.wait(timeout)

    def resume(self):
        self.hold.clear()

    def accepted(self, node=None, after=None, before=None, sent_after=None):
        return [ev for ev in self.events if ev[2] == "accepted" and (node is None or ev[0] == node)
                and (after is None or ev[6] >= after) and (before is None or ev[6] < before)
                and (sent_after is None or ev[5] >= sent_after)]
