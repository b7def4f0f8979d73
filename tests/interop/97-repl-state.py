#!/usr/bin/python3
"""Replication: the state that moves with a partition's leader (issue 19 point 4). A real
etcd and three mqd nodes (racks a/b/c, lease_ttl_ms 3000 x MQD_TEST_SLOW), topic r97 with
1 partition, replication_factor 3, acks = all, dedup_window_ms 10 min.

(a) 100 sends m-0..m-99 (message-id = body) to the leader L, all accepted; both
    followers restarted (each rebuilds its dedup window from its log at start: m-*),
    back in the ISR; 10 sends d-0..d-9, accepted.
(b) group g reads partition 0 on L with 70 credit: accepts m-0..m-59, leaves m-60..m-69
    unsettled (in flight, the connection stays open).
(c) on L: transaction T1 sends c-0..c-9 and commits; T2 sends o-0..o-9 (each send
    accepted in T2) and stays open.
(d) both followers hold, before L dies: the group's committed offset 60 in their own
    meta.db (carried by the group-offset control record of L's log), 130 data records
    and T1's COMMIT marker.
(d2) T3 sends x-0..x-4 (accepted in T3, so replicated); both followers SIGSTOPped; T3's
    discharge gets no answer within 1.5 s: its COMMIT marker cannot replicate, and the
    leader announces a commit only once the marker is below the watermark (before the
    fix it was accepted at once, and lost with the leader).
(e) L is SIGKILLed (g's 10 deliveries in flight, T2 open, T3's discharge unanswered),
    the followers SIGCONTinued; a follower N is elected.
(f) g on N reads exactly m-60..m-99, d-0..d-9, c-0..c-9: not from the start, the 10 that were
    in flight redelivered (the bound: what was not accepted when L's last save of the
    group was replicated), T1's messages visible, none of T2's (rolled back); T3's
    (outcome unknown to its client: the marker may sit in a stopped follower's socket
    buffer) all 5 or none.
(g) d-5 sent again to N (same message-id; N's window from its start lacked it):
    accepted and not stored twice; a new group reading N from the start gets 121
    messages (+ T3's 5 if (f) saw them): m-0..m-99, d-0..d-9, c-0..c-9 and z-0 (sent
    after).
(h) both groups (g and the new one) attached on N with credit and idle after each
    accepted what remained (g: z-0, h-0; the other: h-0): over 4 s the leader appends at most 2 group records (one
    per group for that message), not one a second per group as each group's floor passes
    the other's record.
"""

import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (TTL_MS, Etcd, get_json, partition_bytes, start_nodes,  # noqa: E402
                        wait_for)
from mqdtest import SLOW, BlockingTxns, check, log, skip, txn_outcome_ok  # noqa: E402
from proton import Message  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
T = "r97"
KEY = "/mqd/partitions/%s/0" % T
GROUP_ADDR = "%s/ConsumerGroups/g/Partitions/0" % T


def kinds(raw):
    """The kind (low byte of the flags) of every record of raw."""
    out, pos = [], 0
    while pos + 29 <= len(raw):
        out.append(raw[pos + 28])
        pos += 4 + int.from_bytes(raw[pos:pos + 4], "little")
    return out


def msgs(prefix, n):
    return [Message(id="%s-%d" % (prefix, i), body="%s-%d" % (prefix, i), durable=True) for i in range(n)]


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    from proton.utils import BlockingConnection
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS)
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", T, "--partitions", "1",
                                 "--config", "replication_factor=3", "--config", "dedup_window_ms=600000")
    check(rc == 0, "topic create %s: %s" % (T, out + err))
    ps = wait_for(KEY, lambda: get_json(etcd.port, KEY), 10)
    old = ps["leader"]
    fs = [i for i in RACKS if i != old]
    L = brokers[old]
    wait_for("both followers fetching", lambda: L.log_text().count("fetches from") >= 2, 20)
    coll = mqdtest.Collect()
    conns = []  # the blocking connections to L, open until it is killed
    with coll.case("(a) 100 accepted on the leader"):
        mqdtest.send(L.url, T, msgs("m", 100))
        for f in fs:
            brokers[f].stop()
            brokers[f].start()
        wait_for("ISR of 3", lambda: sorted(get_json(etcd.port, KEY)["isr"]) == [1, 2, 3], 20)
        mqdtest.send(L.url, T, msgs("d", 10))
    with coll.case("(b) group g: 60 accepted, 10 in flight on the leader"):
        gc = BlockingConnection(L.url, timeout=30 * SLOW)
        conns.append(gc)
        rcv = gc.create_receiver(GROUP_ADDR, credit=70)
        got = []
        for i in range(70):
            m = rcv.receive(timeout=30 * SLOW)
            got.append(m.body)
            if i < 60:
                rcv.accept()
        check(got == ["m-%d" % i for i in range(70)], "g got %r..%r" % (got[:2], got[-2:]))
        # an attach answered on the same connection: the dispositions before it arrived
        gc.create_sender(T).close()
        wait_for("the leader's meta.db: g at 60",
                 lambda: mqdtest.group_offsets(L.data_dir, T, "g") == {0: 60}, 20)
    with coll.case("(c) T1 committed, T2 open on the leader"):
        tc = BlockingConnection(L.url, timeout=30 * SLOW)
        conns.append(tc)
        bt = BlockingTxns(tc)
        snd = tc.create_sender(T)
        t1 = bt.declare()
        res = bt.wait_settled([bt.send(snd, m, t1) for m in msgs("c", 10)])
        check(all(txn_outcome_ok(r[0], r[1], t1) for r in res), "T1 send outcomes %s" % res[:2])
        ok, st, cond = bt.discharge(t1, False)
        check(ok, "T1 commit: outcome %s %s" % (st, cond))
        t2 = bt.declare()
        res = bt.wait_settled([bt.send(snd, m, t2) for m in msgs("o", 10)])
        check(all(txn_outcome_ok(r[0], r[1], t2) for r in res), "T2 send outcomes %s" % res[:2])
    with coll.case("(d) the followers have g's offset 60, 130 records and T1's marker"):
        for f in fs:
            b = brokers[f]
            wait_for("node %d: g at 60 in its meta.db" % f,
                     lambda b=b: mqdtest.group_offsets(b.data_dir, T, "g") == {0: 60}, 20)
            k = wait_for("node %d: 130 data records and a COMMIT marker" % f,
                         lambda b=b: (lambda k: k if k.count(0) == 130 and 1 in k else None)(
                             kinds(partition_bytes(b, T, 0))), 20)
            log("node %d: kinds %r" % (f, {x: k.count(x) for x in set(k)}))
    stopped, t3_seen = [], []
    with coll.case("(d2) a commit is not announced before its marker replicated"):
        from proton import Delivery, Described, symbol
        from proton import Timeout as PTimeout
        t3 = bt.declare()
        res = bt.wait_settled([bt.send(snd, m, t3) for m in msgs("x", 5)])
        check(all(txn_outcome_ok(r[0], r[1], t3) for r in res), "T3 send outcomes %s" % res[:2])
        for f in fs:
            os.kill(brokers[f].proc.pid, signal.SIGSTOP)
            stopped.append(f)
        d3 = bt.coord.link.send(Message(body=Described(symbol("amqp:discharge:list"), [t3, False])))
        try:
            tc.wait(lambda: d3.remote_state != 0, timeout=1.5 * SLOW, msg="T3's discharge")
        except PTimeout:
            pass
        log("T3's discharge with both followers stopped: remote state %s" % d3.remote_state)
        check(d3.remote_state != Delivery.ACCEPTED,
              "T3's commit was accepted while its marker could not replicate")
    with coll.case("(e) leader killed, a follower elected"):
        L.kill()  # conns are left as they are: closing would wait for the dead peer
        for f in stopped:
            os.kill(brokers[f].proc.pid, signal.SIGCONT)
        ps = wait_for("a new leader in etcd", lambda: (lambda p: p if p and p["leader"] != old else None)(
            get_json(etcd.port, KEY)), 2 * TTL_MS / 1000 + 6)
        new = ps["leader"]
        check(new in fs and ps["epoch"] == 2, "state %r" % ps)
        N = brokers[new]
        wait_for("node %d leads" % new, lambda: "%s/0: leader (leader %d, epoch 2)" % (T, new) in N.log_text(), 10)
    with coll.case("(f) g resumes on the new leader at 60; T1 visible, T2 rolled back"):
        r = mqdtest.receive(N.url, GROUP_ADDR, idle=3.0 * SLOW, timeout=60 * SLOW)
        got = r.bodies()
        want = ["m-%d" % i for i in range(60, 100)] + ["d-%d" % i for i in range(10)] + \
            ["c-%d" % i for i in range(10)]
        log("g on node %d: %d messages, %r..%r" % (new, len(got), got[:1], got[-1:]))
        check(not [b for b in got if b.startswith("o-")], "T2's messages visible: %d" %
              len([b for b in got if b.startswith("o-")]))
        t3_seen = [b for b in got if b.startswith("x-")]
        log("T3 after failover: %d of 5 visible" % len(t3_seen))
        check(t3_seen in ([], ["x-%d" % i for i in range(5)]), "T3 not atomic: %r" % t3_seen)
        want += t3_seen
        check(got == want, "g got %d (%r..%r), want %d (m-60..m-99, d-*, c-*)" %
              (len(got), got[:2], got[-2:], len(want)))
    with coll.case("(g) a duplicate send after failover is recognised"):
        s = mqdtest.send(N.url, T, msgs("d", 6)[5:] + msgs("z", 1))
        check(s.accepted == 2, "accepted %d of 2" % s.accepted)
        r = mqdtest.receive(N.url, "%s/ConsumerGroups/all/Partitions/0" % T, idle=3.0 * SLOW, timeout=60 * SLOW)
        got = r.bodies()
        want = ["m-%d" % i for i in range(100)] + ["d-%d" % i for i in range(10)] + \
            ["c-%d" % i for i in range(10)] + t3_seen + ["z-0"]
        check(got.count("d-5") == 1, "d-5 stored %d times" % got.count("d-5"))
        check(got == want, "a new group got %d (%r), want %d" % (len(got), got[-3:], len(want)))
    with coll.case("(h) idle groups do not make each other log group records"):
        hc = BlockingConnection(N.url, timeout=30 * SLOW)
        rs = [hc.create_receiver("%s/ConsumerGroups/%s/Partitions/0" % (T, g), credit=10)
              for g in ("g", "all")]
        mqdtest.send(N.url, T, msgs("h", 1))
        for r, want in zip(rs, (["z-0", "h-0"], ["h-0"])):  # g had not read z-0 yet
            got = []
            for _ in want:
                got.append(r.receive(timeout=30 * SLOW).body)
                r.accept()
            check(got == want, "got %r, want %r" % (got, want))
        hc.create_sender(T).close()  # the accepts arrived
        time.sleep(2.0 * SLOW)  # the persist (1 s) logged both floors
        before = kinds(partition_bytes(N, T, 0)).count(4)
        time.sleep(4.0)
        after = kinds(partition_bytes(N, T, 0)).count(4)
        log("group records on node %d: %d, 4 s later %d" % (new, before, after))
        check(after - before <= 2, "%d group records appended by idle groups in 4 s" % (after - before))
        hc.close()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
