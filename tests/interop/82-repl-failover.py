#!/usr/bin/python3
"""Replication: failover and truncation by leader epoch (issue 19 point 3). A real etcd
and three mqd nodes (racks a/b/c, lease_ttl_ms 3000, replica_lag_ms 4000, both x MQD_TEST_SLOW), topic r3 with
replication_factor 3, acks = all.

(a) 1,000 sends to the leader L, all accepted (epoch 1).
(b) both followers SIGKILLed; 50 sends with mqd:acks = leader go to L (accepted on L's
    own log only); L is SIGKILLed before replica_lag_ms (4 s here) took the followers out
    of the ISR, and the two followers start again.
(c) the controller (one of the restarted nodes) elects a new leader N from the in-sync
    set within 2 x lease_ttl_ms + 6 s of L's kill: etcd's partition key names N (one of the two followers), epoch 2, and the dead L
    is out of the ISR. A send to the other follower is forwarded to N (accepted, src/fwd). The followers'
    log-end reports (/mqd/candidates/r3/0/<node>) are gone from etcd once N is elected.
(d) 100 sends to N with acks = all: all accepted (ISR of 2 = min_insync_replicas).
(e) L restarts: it sees it no longer leads, attaches with its last epoch 1 at offset 1,050,
    is told epoch 1 ends at 1,000 on N and truncates its log to 1,000 (its log says so),
    fetches the 100 of epoch 2 and rejoins the ISR (etcd lists 3).
(f) consumers on N read exactly 1,101 bodies in order (1,000 + the forwarded one + 100); none of the 50
    acks = leader ones, which only L had (the documented loss window of acks = leader).
(g) all stopped: the three logs are equal byte for byte, 1,101 records each, the first
    1,000 stamped epoch 1 and the last 101 epoch 2.
(h) restarted; two more topics with the same leader X, one with unclean_leader_election
    = on: both followers killed until the ISRs are X alone, X killed, one follower Y
    restarted: the unclean topic gets leader Y in epoch 2 with ISR [Y]; the clean one
    stays on X, epoch 1, ISR [X] (offline, logged by the controller)."""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (TTL_MS, Etcd, Receiver, Sender, get_json, stopped_logs_equal,  # noqa: E402
                        read_keys, wait_for, start_nodes, create_rf3)
from mqdtest import SLOW, check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
KEY = "/mqd/partitions/r3/0"
LAG_S = 4 * SLOW  # replica_lag_ms / 1000: L must die before the followers leave its ISR


def send(url, n, prefix, props=None):
    s = Sender(url, "r3", n, prefix, props=props)
    mqdtest.run_container(s, 60)
    log("%s: %s" % (prefix, s.status()))
    return s


def epochs(raw):
    """The epoch field of every data record (len | crc | offset | ts | epoch | flags ...;
    the group-offset control records the consumers of (f) leave are not counted)."""
    out, pos = [], 0
    while pos + 4 <= len(raw):
        n = int.from_bytes(raw[pos:pos + 4], "little")
        if raw[pos + 28] == 0:
            out.append(int.from_bytes(raw[pos + 24:pos + 28], "little"))
        pos += 4 + n
    return out


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"replica_lag_ms": int(LAG_S * 1000)})
    ps = create_rf3(etcd, brokers[1])
    old = ps["leader"]
    fs = [i for i in RACKS if i != old]
    L = brokers[old]
    wait_for("both followers fetching", lambda: L.log_text().count("fetches from") >= 2, 20)
    coll = mqdtest.Collect()
    with coll.case("(a) 1,000 accepted in epoch 1"):
        s = send(L.url, 1000, "m")
        check(s.accepted == 1000 and not s.rejected, "accepted %d, rejected %r" % (s.accepted, s.rejected[:2]))
    with coll.case("(b) followers killed, 50 acks=leader sends, L killed, followers back"):
        for f in fs:
            brokers[f].kill()
        s = send(L.url, 50, "ldr", props={"mqd:acks": "leader"})
        check(s.accepted == 50, "acks=leader: accepted %d, rejected %r" % (s.accepted, s.rejected[:2]))
        isr_before = sorted(get_json(etcd.port, KEY)["isr"])
        L.kill()
        t_kill = time.monotonic()
        check(isr_before == [1, 2, 3], "the ISR shrank before L was killed: %r" % isr_before)
        for f in fs:
            brokers[f].start()
    with coll.case("(c) a new leader from the ISR, epoch 2"):
        limit = 2 * TTL_MS / 1000 + 6
        ps = wait_for("a new leader in etcd", lambda: (lambda p: p if p and p["leader"] != old else None)(
            get_json(etcd.port, KEY)), limit)
        took = time.monotonic() - t_kill
        log("new state %r %.2f s after the kill" % (ps, took))
        check(ps["leader"] in fs and ps["epoch"] == 2, "state %r" % ps)
        check(old not in ps["isr"] and ps["leader"] in ps["isr"], "isr %r" % ps["isr"])
        new = ps["leader"]
        other = [f for f in fs if f != new][0]
        N = brokers[new]
        wait_for("node %d leads" % new, lambda: "r3/0: leader (leader %d, epoch 2)" % new in N.log_text(), 10)
        r = send(brokers[other].url, 1, "x")
        check(r.link_cond is None and r.accepted == 1 and not r.rejected,
              "a send through node %d: %r %s" % (other, r.link_cond, r.status()))
        # the election by log end is decided: its reports are deleted (cand.c)
        wait_for("no log-end report of r3/0 left in etcd",
                 lambda: not read_keys(etcd.port, "/mqd/candidates/r3/0/"), 5)
        lines = [ln for b in brokers.values() for ln in b.log_text().splitlines()]
        reported = [ln for ln in lines if "r3/0: leader %d gone: reporting log end" % old in ln]
        cleared = [ln for ln in lines if "/mqd/candidates/r3/0/*: " in ln and "reports deleted" in ln]
        log("reports written: %d; deleted: %r" % (len(reported), cleared))
        check(not reported or cleared, "%d reports written, no controller logged deleting them" % len(reported))
    with coll.case("(d) 100 accepted by the new leader"):
        wait_for("the other follower fetching from N", lambda: "fetches from" in N.log_text(), 10)
        s = send(N.url, 100, "n")
        check(s.accepted == 100 and not s.rejected, "accepted %d, rejected %r" % (s.accepted, s.rejected[:2]))
    with coll.case("(e) the old leader truncates by epoch and rejoins"):
        L.start()
        wait_for("ISR of 3", lambda: sorted(get_json(etcd.port, KEY)["isr"]) == [1, 2, 3], 20)
        text = L.log_text()
        check("truncating 1050 -> 1000" in text, "no truncation 1050 -> 1000 in the old leader's log")
    with coll.case("(f) consumers on the new leader read the 1,101, none of the 50"):
        r = Receiver(N.url, "r3/ConsumerGroups/g/Partitions/0", None, idle_s=2.0)
        mqdtest.run_container(r, 60)
        want = ["m-%d" % i for i in range(1000)] + ["x-0"] + ["n-%d" % i for i in range(100)]
        check(not [b for b in r.bodies if b.startswith("ldr-")], "acks=leader records visible")
        check(r.bodies == want, "read %d, want %d" % (len(r.bodies), len(want)))
    with coll.case("(g) the logs are equal byte for byte, epochs 1 then 2"):
        raw = stopped_logs_equal(brokers, "r3", 0, new, 1101)
        ep = epochs(raw[new])
        check(ep == [1] * 1000 + [2] * 101, "epochs %r..%r" % (ep[:2], ep[-2:]))
    with coll.case("(h) no live in-sync replica: offline unless unclean_leader_election = on"):
        for b in brokers.values():
            b.start()
        wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
        # two topics whose placement starts at the same node: the same leader
        names = [n for n in ("u%d" % i for i in range(200)) if fnv1a(n) % 3 == fnv1a("uc") % 3]
        clean, unclean = names[0], "uc"
        for name, flag in ((unclean, "on"), (clean, "off")):
            rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", name, "--partitions", "1",
                                         "--config", "replication_factor=3",
                                         "--config", "unclean_leader_election=" + flag)
            check(rc == 0, "topic create %s: %s" % (name, err))
        key = {n: "/mqd/partitions/%s/0" % n for n in (clean, unclean)}
        st = {n: wait_for(key[n], lambda n=n: get_json(etcd.port, key[n]), 10) for n in key}
        x = st[unclean]["leader"]
        check(st[clean]["leader"] == x, "leaders differ: %r" % st)
        y, z = [i for i in RACKS if i != x]
        wait_for("both fetching", lambda: brokers[x].log_text().count("fetches from") >= 4, 20)
        brokers[y].kill()
        brokers[z].kill()
        for n in key:
            wait_for("ISR of %s shrinks to the leader" % n,
                     lambda n=n: get_json(etcd.port, key[n])["isr"] == [x], 10 + LAG_S)
        brokers[x].kill()
        brokers[y].start()
        got = wait_for("an unclean leader for %s" % unclean, lambda: (lambda p: p if p["leader"] == y else None)(
            get_json(etcd.port, key[unclean])), 2 * TTL_MS / 1000 + 6)
        log("unclean: %r" % got)
        check(got["epoch"] == 2 and got["isr"] == [y], "unclean election state %r" % got)
        c = get_json(etcd.port, key[clean])
        check(c["leader"] == x and c["epoch"] == 1 and c["isr"] == [x],
              "the clean topic's partition moved: %r" % c)
        ctl = [b for b in brokers.values() if b.alive() and "no live in-sync replica: offline" in b.log_text()]
        check(ctl, "no controller logged %s/0 offline" % clean)
    coll.finish()


def fnv1a(s):
    """The controller's name hash (ctl.c): where a topic's placement starts."""
    h = 2166136261
    for ch in s.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
