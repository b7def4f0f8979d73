#!/usr/bin/python3
"""Replication: a leader whose log fails (issue 19; the commit tap of repl/leader.c).

The leader ships each group-commit batch to its followers before its own write and sync
(mqd_plog_set_commit_tap), so when its write fails the followers may hold records its
log lost. Resuming such a log in the same epoch would reuse those offsets for other
records; so a failed leader hands the partition over and resumes only as a follower
(repl/move.c). A real etcd and three mqd nodes, each data directory on its own 48 MiB
tmpfs this test mounts (root only; 77 otherwise), disk_free_limit = 0 (so the write
itself meets the full disk), partition_resume_ms = 500; topic r3, RF 3, acks = all.

(a) 100 sends to the leader: all accepted, the in-sync set is 3.
(b) the leader's file system filled but for ~1 MiB; 160 sends of 16 KiB to it: each gets
    an outcome, some are rejected with amqp:resource-limit-exceeded "disk full ... may or
    may not be stored" (not "stored nothing": a follower may hold it), the accepted ones
    come first.
(c) etcd names another leader in a newer epoch, and the old one is out of the in-sync
    set; the old leader's log stays failed while it leads (it does not resume in place).
(d) a consumer on the new leader reads every accepted message, in order; anything else
    it reads is one of the rejected sends (their records may have reached a follower
    before the leader's write failed: at least once, never a lost acknowledgement).
(e) the filler removed: the old leader resumes as a follower, cuts its log back by
    epoch and catches up: etcd's in-sync set holds the three nodes again.
(f) 50 more sends to the new leader are accepted; all stopped, the three logs are equal
    byte for byte."""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (Etcd, get_json, partition_bytes, count_records, wait_for,  # noqa: E402
                        cluster_sets, read_keys, create_rf3)
from mqdtest import SLOW, check, log, skip  # noqa: E402
from proton import Message  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
TOPIC = "r3"
KEY = "/mqd/partitions/r3/0"
N = 160
SIZE = 16 * 1024
LEFT = 1 << 20


def body(t):
    if os.geteuid() != 0:
        skip("needs root (tmpfs mounts)")
    mnts = {}
    for i in RACKS:
        m = os.path.join(t.tmpdir, "disk%d" % i)
        os.makedirs(m)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", m],
                          stderr=subprocess.PIPE).returncode != 0:
            skip("cannot mount a tmpfs")
        mnts[i] = m
    try:
        etcd = Etcd(t)
        etcd.start()
        nodes = {i: t.broker("n%d" % i, start=False, data_dir=os.path.join(mnts[i], "data"),
                             sets=cluster_sets(etcd, i, r, disk_free_limit=0,
                                               partition_resume_ms=500))
                 for i, r in RACKS.items()}
        for b in nodes.values():
            b.start()
        wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
        ps = create_rf3(etcd, nodes[1], TOPIC)
        wait_for("isr of 3", lambda: len(get_json(etcd.port, KEY)["isr"]) == 3, 20)
        old = ps["leader"]
        lb = nodes[old]
        log("leader %d, epoch %d" % (old, ps["epoch"]))
        # etcd's first state already lists an ISR of 3: wait for the node to take the role
        wait_for("node %d leads" % old, lambda: "r3/0: leader (leader %d, epoch 1)" % old in lb.log_text(), 20)

        # (a)
        warm = [Message(body="warm-%d" % i, durable=True) for i in range(100)]
        mqdtest.send(lb.url, TOPIC, warm)

        # (b)
        mqdtest.fill_disk(mnts[old], LEFT)
        msgs = [Message(body="m%03d-" % i + "x" * SIZE, durable=True) for i in range(N)]
        s = mqdtest.TrackingSender(lb.url, TOPIC, msgs)
        mqdtest.run_container(s, 60 * SLOW)
        bad = sorted(i for i, _, _ in s.outcomes if i is not None)
        log("accepted %d, not accepted %d" % (s.accepted, len(s.outcomes)))
        check(s.accepted + len(s.outcomes) == N, "outcomes %d of %d" % (s.accepted + len(s.outcomes), N))
        check(len(s.outcomes) > 0, "every send was accepted: the disk never filled")
        check(sorted(s.ok) == list(range(s.accepted)), "accepted sends are not a prefix: %r" % s.ok[:10])
        for idx, state, cond in s.outcomes:
            check(cond is not None and cond.name == "amqp:resource-limit-exceeded" and
                  "may or may not be stored" in (cond.description or ""),
                  "send %s: outcome %s condition %s" % (idx, state, cond))

        # (c)
        st = wait_for("a new leader after the old one's log failed",
                      lambda: (lambda p: p if p and p["leader"] != old else None)(
                          get_json(etcd.port, KEY)), 20)
        log("new leader %d, epoch %d, isr %r" % (st["leader"], st["epoch"], st["isr"]))
        check(st["epoch"] > ps["epoch"], "epoch %d not above %d" % (st["epoch"], ps["epoch"]))
        check(old not in st["isr"], "the failed leader is still in the in-sync set %r" % st["isr"])
        nl = nodes[st["leader"]]

        # (d)
        want = [m.body for m in warm] + [msgs[i].body for i in range(s.accepted)]
        extra_ok = set(msgs[i].body for i in bad)
        r = mqdtest.receive(nl.url, TOPIC, idle=2.0 * SLOW, timeout=60 * SLOW)
        got = [m.body for m in r.got]
        acc = [b for b in got if b not in extra_ok]
        check(acc == want, "the new leader serves %d accepted messages, want %d (first: %r)"
              % (len(acc), len(want), [b[:8] for b in acc[:3]]))
        log("the new leader serves %d messages: %d accepted, %d of the rejected ones"
            % (len(got), len(acc), len(got) - len(acc)))

        # (e)
        os.unlink(os.path.join(mnts[old], "filler"))
        wait_for("the old leader back in the in-sync set",
                 lambda: old in (get_json(etcd.port, KEY) or {}).get("isr", []), 40)

        # (f)
        more = [Message(body="after-%d" % i, durable=True) for i in range(50)]
        mqdtest.send(nl.url, TOPIC, more)
        wait_for("isr of 3 after the last sends", lambda: len(get_json(etcd.port, KEY)["isr"]) == 3, 20)
        time.sleep(1.0 * SLOW)
        for b in nodes.values():
            b.stop()
        raw = {i: partition_bytes(b, TOPIC, 0) for i, b in nodes.items()}
        n = {i: count_records(v) for i, v in raw.items()}
        log("data records per node %r" % n)
        check(n[st["leader"]] == len(got) + 50, "the new leader holds %d data records, want %d"
              % (n[st["leader"]], len(got) + 50))
        for i in nodes:
            check(raw[i] == raw[st["leader"]], "node %d differs from the leader (%d vs %d bytes)"
                  % (i, len(raw[i]), len(raw[st["leader"]])))
    finally:
        for b in t.brokers:
            if b.proc and b.proc.poll() is None:
                b.stop()
        for m in mnts.values():
            subprocess.run(["umount", "-l", m])


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
