#!/usr/bin/python3
"""Replication: a follower that fell behind the leader's retention (issue 19; Kafka's
out-of-range replica fetch). A real etcd and three mqd nodes, topic s34 with
replication_factor 3, segment_bytes 4 KiB and retention_bytes 16 KiB (replicated with the
topic, so on every node), replica_lag_ms 2000 x MQD_TEST_SLOW.

(a) 200 sends accepted, ISR of 3 in etcd.
(b) follower F stopped (SIGTERM); 2,000 more sends accepted by the leader and the other
    follower; the leader's retention deletes segments until its log start is above F's
    log end (read from F's files: 200).
(c) F restarted: the leader refuses its fetch offset 200 as below its log start and
    names the start (mqd:repl:below-log-start, mqd:log-start); F resets its replica to
    it (its log says so), catches up and rejoins the ISR: etcd's ISR holds 3 within
    30 s x SLOW. Before the change F stayed out of the ISR (the leader refused it with
    amqp:precondition-failed on every attach).
(d) F's partition as describe shows it: start = the offset it reset to, >= the leader's
    start then; messages = end - start (a reset replica counts only what it holds).
(e) mqctl cluster elect moves the leadership to F; a consumer group reading from F gets
    exactly the messages F's log holds, in order: m2-k .. m2-1999 for F's start offset
    200 + k, nothing older.
(f) all stopped: the three logs are equal byte for byte from the highest log start of
    the three on."""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (Etcd, Receiver, Sender, get_json, partition_bytes,  # noqa: E402
                        start_nodes, wait_for)
from mqdtest import SLOW, check, fail, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
T = "s34"
KEY = "/mqd/partitions/%s/0" % T
LAG_MS = int(2000 * SLOW)
N1, N2 = 200, 2000


def isr(etcd):
    ps = get_json(etcd.port, KEY)
    return sorted(ps["isr"]) if ps else None


def send(url, n, prefix):
    s = Sender(url, T, n, prefix)
    mqdtest.run_container(s, 120)
    log("%s: %s" % (prefix, s.status()))
    check(s.link_cond is None, "%s: link refused %r" % (prefix, s.link_cond))
    check(s.accepted == n and not s.rejected, "%s: accepted %d of %d, rejected %r"
          % (prefix, s.accepted, n, s.rejected[:2]))
    return s


def seg_bases(b):
    d = os.path.join(b.data_dir, "topics", T, "0")
    return sorted(int(n[:-4]) for n in os.listdir(d) if n.endswith(".log"))


def records(raw):
    """[(offset, record bytes)] of raw (len u32 | crc u32 | offset u64 | ...)."""
    out, pos = [], 0
    while pos + 16 <= len(raw):
        n = int.from_bytes(raw[pos:pos + 4], "little")
        out.append((int.from_bytes(raw[pos + 8:pos + 16], "little"), raw[pos:pos + 4 + n]))
        pos += 4 + n
    return out


def describe(b):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "describe", T)
    if rc != 0:
        fail("describe on %s: %s" % (b.name, out + err))
    return json.loads(out)["partition_info"][0]


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"replica_lag_ms": LAG_MS})
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", T, "--partitions", "1",
                                 "--config", "replication_factor=3", "--config", "segment_bytes=4KiB",
                                 "--config", "retention_bytes=16KiB")
    check(rc == 0, "topic create: %s" % (out + err))
    ps = wait_for(KEY, lambda: get_json(etcd.port, KEY), 10)
    leader = ps["leader"]
    f, other = [i for i in RACKS if i != leader]
    L, F = brokers[leader], brokers[f]
    wait_for("both followers fetching", lambda: L.log_text().count("fetches from") >= 2, 20)
    coll = mqdtest.Collect()
    with coll.case("(a) 200 accepted, ISR of 3"):
        send(L.url, N1, "m1")
        wait_for("ISR of 3", lambda: isr(etcd) == [1, 2, 3], 10)
    with coll.case("(b) follower %d stopped; retention on the leader passes its log end" % f):
        F.stop()
        fr = records(partition_bytes(F, T, 0))
        f_end = fr[-1][0] + 1 if fr else seg_bases(F)[0]
        log("follower %d stopped with log end %d" % (f, f_end))
        check(f_end == N1, "follower log end %d, want %d" % (f_end, N1))
        send(L.url, N2, "m2")
        start = wait_for("the leader's log start past %d" % f_end,
                         lambda: (lambda s: s if s > f_end else None)(seg_bases(L)[0]), 20)
        log("leader's log start %d (%d segments), end %d" % (start, len(seg_bases(L)), N1 + N2))
        check(start > f_end and start < N1 + N2, "leader start %d" % start)
    with coll.case("(c) follower %d restarted: resets to the leader's log start, rejoins the ISR" % f):
        F.start()
        t0 = mqdtest.time.monotonic()
        try:
            wait_for("ISR of 3 again", lambda: isr(etcd) == [1, 2, 3], 30)
        except mqdtest.TestFailure:
            fail("ISR %r %.0f s after the restart (leader said: %r)" % (
                isr(etcd), 30 * SLOW, [ln for ln in L.log_text().splitlines() if "fetch link" in ln][-2:]))
        log("ISR of 3 %.2f s after the restart" % (mqdtest.time.monotonic() - t0))
        lt = F.log_text()
        check("replica reset to the leader's log start" in lt, "no reset in follower %d's log" % f)
        log("ISR %r; follower: %r" % (isr(etcd), [ln for ln in lt.splitlines() if "reset" in ln][-2:]))
    with coll.case("(d) the reset replica counts only what it holds"):
        wait_for("follower %d at the end" % f, lambda: describe(F)["end"] == N1 + N2, 10)
        p = describe(F)
        log("follower %d: %r" % (f, p))
        check(p["start"] >= start and p["start"] == seg_bases(F)[0], "start %r (leader's was %d)" % (p, start))
        check(p["messages"] == p["end"] - p["start"], "messages %r" % p)
    with coll.case("(e) failover to follower %d: a consumer reads exactly the retained messages" % f):
        rc, out, err = mqdtest.mqctl(L.url, "cluster", "elect", T, "0", str(f))
        check(rc == 0, "elect: %s" % (out + err))
        wait_for("node %d leads" % f, lambda: (get_json(etcd.port, KEY) or {}).get("leader") == f, 10)
        fstart = seg_bases(F)[0]
        for attempt in range(20):  # until node f has read that it leads (a redirect before)
            r = Receiver(F.url, "%s/ConsumerGroups/g/Partitions/0" % T, None, idle_s=3.0)
            mqdtest.run_container(r, 60)
            if r.link_cond is None:
                break
            log("attempt %d: %r" % (attempt, r.link_cond[:2]))
            mqdtest.time.sleep(0.5 * SLOW)
        check(r.link_cond is None, "consumer refused %r" % (r.link_cond,))
        want = ["m2-%d" % (i - N1) for i in range(fstart, N1 + N2)]
        log("read %d from node %d (start %d): %r .. %r" % (len(r.bodies), f, fstart, r.bodies[:1], r.bodies[-1:]))
        check(r.bodies == want, "read %d, want %d (m2-%d on); first difference at %s" % (
            len(r.bodies), len(want), fstart - N1, next(
                (i for i, (a, b) in enumerate(zip(r.bodies, want)) if a != b), min(len(r.bodies), len(want)))))
    with coll.case("(f) the three logs are equal byte for byte from the highest log start on"):
        mqdtest.time.sleep(1.0 * SLOW)
        for b in brokers.values():
            b.stop()
        recs = {i: records(partition_bytes(b, T, 0)) for i, b in brokers.items()}
        top = max(v[0][0] for v in recs.values() if v)
        tails = {i: b"".join(r for o, r in v if o >= top) for i, v in recs.items()}
        log("from offset %d: %r bytes" % (top, {i: len(v) for i, v in tails.items()}))
        check(tails[f] and tails[f] == tails[leader] == tails[other], "logs differ from %d" % top)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
