#!/usr/bin/python3
"""Replication fencing on a live fetch link: a real mqd follower (node 2) and a real etcd,
with its leader (node 1) played by the test: a Proton container listening on loopback,
registered by the test as /mqd/nodes/1 (the JSON mqd writes, cluster/member_json.c) under
a lease it keeps alive, named leader of /mqd/partitions/fe/0 (replicas [1, 2]) with the
topic in /mqd/topics/fe. It speaks the fetch protocol of docs/replication.md: it accepts
the follower's $repl/fe/0 attach, records its properties, and ships runs as AMQP messages
(message annotations x-repl-base, x-repl-count, x-repl-hw as a map32, then one data
section) whose records are encoded as the store writes them (tests/fuzz/storerec.py),
each record's payload a real AMQP message.

(a) state epoch 1: the follower attaches with mqd:node-id 2, mqd:fetch-offset 0,
    mqd:last-epoch 0, mqd:epoch 1; two runs of 5 records of epoch 1 are appended and
    settled accepted.
(b) the test CASes the state to epoch 2, same leader: the follower closes the link it
    attached under epoch 1 (logged) and attaches again with mqd:epoch 2, fetch-offset 10,
    last-epoch 1; a run of epoch 1 the leader then puts on the old link is not appended
    and not accepted; a run of 5 records of epoch 2 on the new link is.
(c) a run whose records carry epoch 3 (the state says 2) is rejected, the follower
    closes the link, reads its partition key again (logged) and attaches again with
    mqd:epoch 2 at the same fetch offset.
(d) a run with one record's CRC damaged is rejected (logged "not appended (corrupt
    data)"), nothing of it appended: the next attach asks for the same offset; a good
    run there is accepted.
(e) the follower stopped: its segment files hold exactly the 20 accepted records, byte
    for byte as shipped, offsets 0..19, epochs 1 (10) then 2 (10)."""

import os
import queue
import shutil
import signal
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz"))
import mqdtest  # noqa: E402
import storerec  # noqa: E402
from mqdcluster import Etcd, b64, cluster_sets, partition_bytes, post, read_keys, wait_for  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

from proton import Message  # noqa: E402
from proton.handlers import MessagingHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

TOPIC = "fe"
KEY = "/mqd/partitions/%s/0" % TOPIC
LEADER, FOLLOWER = 1, 2
LEASE_S = 60  # the scripted leader's node key lives while the test keeps its lease alive


def sym(s):
    return b"\xa3" + bytes([len(s)]) + s.encode()


def run_msg(base, count, hw, data):
    """The fetch stream's message as a leader encodes it (repl/wire.c)."""
    m = sym("x-repl-base") + b"\x80" + struct.pack(">Q", base)
    m += sym("x-repl-count") + b"\x70" + struct.pack(">I", count)
    m += sym("x-repl-hw") + b"\x80" + struct.pack(">Q", hw)
    ann = b"\x00\x53\x72\xd1" + struct.pack(">II", len(m) + 4, 6) + m
    return ann + (b"\x00\x53\x75\xb0" + struct.pack(">I", len(data)) + data if data else b"")


def records(base, n, epoch, prefix):
    """n records from offset base, stamped with epoch, each payload an AMQP message."""
    ts = int(time.time() * 1000)
    return b"".join(storerec.record(base + i, ts, Message(body="%s-%d" % (prefix, base + i),
                                                           durable=True).encode(), epoch=epoch)
                    for i in range(n))


def epochs_offsets(raw):
    out, pos = [], 0
    while pos + 4 <= len(raw):
        n = int.from_bytes(raw[pos:pos + 4], "little")
        out.append((int.from_bytes(raw[pos + 8:pos + 16], "little"),
                    int.from_bytes(raw[pos + 24:pos + 28], "little")))
        pos += 4 + n
    return out


class ScriptedLeader(MessagingHandler):
    """Node 1: accepts $repl/ attaches (kept in `links`, their properties in `attaches`),
    ships the runs the test queues (ship) and records each run's outcome (`outcomes[name]`:
    accepted, or rejected with its condition) and each link the follower closed
    (`closed`: link number, monotonic time, condition)."""

    def __init__(self, port):
        super().__init__(peer_close_is_error=False)
        self.port = port
        self.cmds = queue.Queue()
        self.links, self.attaches, self.closed = [], [], []
        self.outcomes = {}
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.err = None

    def on_start(self, e):
        self.acceptor = e.container.listen("127.0.0.1:%d" % self.port)
        self.ready.set()
        e.container.schedule(0.02, self)

    def on_timer_task(self, e):
        while not self.cmds.empty():
            try:
                self.cmds.get()()
            except Exception as x:  # noqa: B902 - reported to the test thread
                self.err = "scripted leader: %r" % (x,)
        if self.stopping.is_set():
            self.acceptor.close()
            for c in {lk.connection for lk in self.links}:
                c.close()
            return
        e.container.schedule(0.02, self)

    def on_link_opening(self, e):
        lk = e.link
        if not lk.is_sender or not (lk.remote_source.address or "").startswith("$repl/"):
            lk.close()
            return
        props = {str(k): v for k, v in (lk.remote_properties or {}).items()}
        if lk.state & lk.LOCAL_UNINIT:
            lk.source.copy(lk.remote_source)
            lk.target.copy(lk.remote_target)
            lk.open()
        self.links.append(lk)
        self.attaches.append((time.monotonic(), props))
        log("leader: attach %d from the follower: %r" % (len(self.links), props))

    def on_link_remote_close(self, e):
        if e.link in self.links:
            c = e.link.remote_condition
            self.closed.append((self.links.index(e.link) + 1, time.monotonic(), c.name if c else None))
            log("leader: the follower closed link %d (%s)" % (self.closed[-1][0], self.closed[-1][2]))

    def _outcome(self, e, what):
        c = e.delivery.remote.condition
        self.outcomes[e.delivery.tag] = (what, c.name if c else None)
        log("leader: run %s %s" % (e.delivery.tag, what))

    def on_accepted(self, e):
        self._outcome(e, "accepted")

    def on_rejected(self, e):
        self._outcome(e, "rejected")

    def on_released(self, e):
        self._outcome(e, "released")

    def on_modified(self, e):
        self._outcome(e, "modified")

    def ship(self, link_no, name, base, count, hw, data):
        """Queues one run on link number link_no (1-based); returns at once."""
        def go():
            lk = self.links[link_no - 1]
            lk.delivery(name)
            lk.stream(run_msg(base, count, hw, data))
            lk.advance()
            log("leader: run %s (%d records from %d, %d bytes) on link %d, credit %d"
                % (name, count, base, len(data), link_no, lk.credit))
        self.cmds.put(go)

    def outcome(self, name):
        return self.outcomes.get(name)


ACCEPTED, REJECTED = "accepted", "rejected"


class Lease:
    """A lease of etcd kept alive by a thread (every 2 s) until stop()."""

    def __init__(self, etcd, ttl):
        self.etcd = etcd
        self.id = int(post(etcd.port, "/v3/lease/grant", {"TTL": ttl})["ID"])
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop_flag.wait(2.0):
            try:
                post(self.etcd.port, "/v3/lease/keepalive", {"ID": str(self.id)})
            except OSError:
                pass

    def stop(self):
        self.stop_flag.set()
        self.thread.join(5)


def put(etcd, key, value, lease=0):
    body = {"key": b64(key), "value": b64(value)}
    if lease:
        body["lease"] = str(lease)
    post(etcd.port, "/v3/kv/put", body)


def cas_state(etcd, value):
    """Compare-and-swap of the partition state on its current mod_revision."""
    r = post(etcd.port, "/v3/kv/range", {"key": b64(KEY)})
    rev = r["kvs"][0]["mod_revision"]
    t = post(etcd.port, "/v3/kv/txn", {
        "compare": [{"key": b64(KEY), "target": "MOD", "result": "EQUAL", "mod_revision": rev}],
        "success": [{"request_put": {"key": b64(KEY), "value": b64(value)}}]})
    check(t.get("succeeded"), "CAS of %s failed: %r" % (KEY, t))


def state(epoch):
    return '{"leader":%d,"epoch":%d,"replicas":[%d,%d],"isr":[%d,%d]}' % (
        LEADER, epoch, LEADER, FOLLOWER, LEADER, FOLLOWER)


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    port = mqdtest.free_port()
    leader = ScriptedLeader(port)
    th = threading.Thread(target=lambda: Container(leader).run(), daemon=True)
    th.start()
    check(leader.ready.wait(10), "the scripted leader did not listen")
    lease = Lease(etcd, LEASE_S)
    put(etcd, "/mqd/nodes/%d" % LEADER, '{"id":%d,"address":"127.0.0.1:%d","rack":"a","started":%d}'
        % (LEADER, port, int(time.time() * 1000)), lease.id)
    put(etcd, "/mqd/topics/%s" % TOPIC, '{"config":{},"partitions":1,"replication_factor":2}')
    put(etcd, KEY, state(1))
    f = t.broker("n%d" % FOLLOWER, start=False, sets=cluster_sets(etcd, FOLLOWER, "b"))
    f.start()
    try:
        run_cases(etcd, leader, f)
    finally:
        leader.stopping.set()
        th.join(10)
        lease.stop()


def wait_attach(leader, n, timeout=10):
    wait_for("attach %d from the follower" % n, lambda: len(leader.attaches) >= n, timeout)
    return leader.attaches[n - 1][1]


def wait_outcome(leader, name, timeout=10):
    return wait_for("the outcome of run %s" % name, lambda: leader.outcome(name) or (
        leader.err and mqdtest.fail(leader.err)), timeout)


def run_cases(etcd, leader, f):
    coll = mqdtest.Collect()
    shipped = b""
    with coll.case("(a) epoch 1: two runs appended and accepted"):
        p = wait_attach(leader, 1, 20)
        check(p == {"mqd:node-id": FOLLOWER, "mqd:fetch-offset": 0, "mqd:last-epoch": 0, "mqd:epoch": 1},
              "first attach's properties %r" % p)
        a, b = records(0, 5, 1, "a"), records(5, 5, 1, "a")
        leader.ship(1, "A", 0, 5, 0, a)
        check(wait_outcome(leader, "A") == (ACCEPTED, None), "run A: %r" % (leader.outcome("A"),))
        leader.ship(1, "B", 5, 5, 5, b)
        check(wait_outcome(leader, "B") == (ACCEPTED, None), "run B: %r" % (leader.outcome("B"),))
        shipped += a + b
    with coll.case("(b) epoch 2, same leader: a run on the old link is not appended; attach with mqd:epoch 2"):
        # The run must reach the follower after the new state: the follower is stopped
        # while etcd's watch event and then the run go into its sockets, in that order.
        os.kill(f.pid, signal.SIGSTOP)
        try:
            cas_state(etcd, state(2))
            time.sleep(0.3)  # the watch event is in the follower's socket
            leader.ship(1, "C", 10, 5, 10, records(10, 5, 1, "c"))
            time.sleep(0.3)  # and the run of epoch 1 behind it, on link 1
        finally:
            os.kill(f.pid, signal.SIGCONT)
        t0 = time.monotonic()
        wait_for("the follower closing link 1", lambda: any(i == 1 for i, _, _ in leader.closed), 10)
        p = wait_attach(leader, 2)
        log("link 1 closed, attach 2 %.3f s after SIGCONT" % (leader.attaches[1][0] - t0))
        check(p == {"mqd:node-id": FOLLOWER, "mqd:fetch-offset": 10, "mqd:last-epoch": 1, "mqd:epoch": 2},
              "second attach's properties %r (fetch-offset 15 would mean run C was appended)" % p)
        e = records(10, 5, 2, "e")
        leader.ship(2, "E", 10, 5, 10, e)
        check(wait_outcome(leader, "E") == (ACCEPTED, None), "run E on link 2: %r" % (leader.outcome("E"),))
        shipped += e
        check(leader.outcome("C") is None or leader.outcome("C")[0] != ACCEPTED,
              "run C on the old link: %r" % (leader.outcome("C"),))
        log("run C on the old link: %r" % (leader.outcome("C"),))
        check("the partition is in epoch 2 now: closing the fetch link attached in epoch 1" in f.log_text(),
              "the follower did not log why it closed link 1")
    with coll.case("(c) records of epoch 3 under state epoch 2: rejected, etcd read again"):
        reads = f.log_text().count("state read again: leader 1, epoch 2")
        leader.ship(2, "D", 15, 5, 15, records(15, 5, 3, "d"))
        check(wait_outcome(leader, "D")[0] == REJECTED, "run D: %r" % (leader.outcome("D"),))
        wait_for("the follower closing link 2", lambda: any(i == 2 for i, _, _ in leader.closed), 10)
        p = wait_attach(leader, 3)
        check(p["mqd:epoch"] == 2 and p["mqd:fetch-offset"] == 15 and p["mqd:last-epoch"] == 2,
              "third attach's properties %r" % p)
        text = f.log_text()
        check("run with records of epoch 3, newer than 2: reading the partition's state again" in text,
              "no log of the epoch 3 run")
        check(text.count("state read again: leader 1, epoch 2") > reads, "the follower did not read etcd again")
    with coll.case("(d) a damaged record: rejected, nothing appended"):
        bad = bytearray(records(15, 5, 2, "x"))
        bad[4] ^= 0xFF  # the first record's CRC
        leader.ship(3, "F", 15, 5, 15, bytes(bad))
        check(wait_outcome(leader, "F")[0] == REJECTED, "run F: %r" % (leader.outcome("F"),))
        p = wait_attach(leader, 4)
        check(p["mqd:fetch-offset"] == 15 and p["mqd:epoch"] == 2, "fourth attach's properties %r" % p)
        check("not appended (corrupt data)" in f.log_text(), "no log of the damaged run")
        g = records(15, 5, 2, "g")
        leader.ship(4, "G", 15, 5, 20, g)
        check(wait_outcome(leader, "G") == (ACCEPTED, None), "run G: %r" % (leader.outcome("G"),))
        shipped += g
    with coll.case("(e) the follower's log: the 20 accepted records, byte for byte"):
        check(leader.err is None, leader.err)
        f.stop()
        raw = partition_bytes(f, TOPIC, 0)
        eo = epochs_offsets(raw)
        log("follower's log: %d records, %d bytes; offsets %d..%d" % (
            len(eo), len(raw), eo[0][0] if eo else -1, eo[-1][0] if eo else -1))
        check([o for o, _ in eo] == list(range(20)), "offsets %r" % [o for o, _ in eo])
        check([e for _, e in eo] == [1] * 10 + [2] * 10, "epochs %r" % [e for _, e in eo])
        check(raw == shipped, "the log differs from the accepted runs (%d vs %d bytes)" % (len(raw), len(shipped)))
        keys = read_keys(etcd.port, "/mqd/partitions/")
        log("etcd: %r" % {k: v[0].decode() for k, v in keys.items()})
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=120)
