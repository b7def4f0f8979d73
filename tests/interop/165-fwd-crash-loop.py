#!/usr/bin/python3
"""The leader crash loop with every client on a FOLLOWER (issue 33, acceptance point 2).
A real etcd and three mqd nodes (racks a/b/c, lease_ttl_ms 3000 x MQD_TEST_SLOW,
auto_leader_rebalance off, fast failover on), topic f3: 3 partitions, replication_factor
3, acks = all, min_insync_replicas 2, flush = sync, dedup_window_ms 60000.

The clients are all connected to node M (never killed) and stay there (mqdcrash.on_node):
- a Proton producer (mqdcrash.Producer: "s-<seq>", message-id = body, about 200 a second,
  20 unsettled, sends again what was not accepted) on the whole topic `f3`: M picks the
  partition per message and forwards it to its leader (src/fwd/send.c);
- two members of group g on `f3/ConsumerGroups/g` (each one link, accepting what it
  gets): M serves them with one leg per leader node (src/fwd/recv.c).

Each round (MQD_FWD_CRASH_ROUNDS, default 20): the victim V alternates between the two
other nodes; partition r % 3 is handed to V (`mqctl cluster elect`) unless it leads it;
once an acceptance came after that, V is SIGKILLed and started again once the producer's
sends in flight at the kill were all accepted. The round's pauses: kill -> the last of
the sends in flight at the kill accepted (send pause), kill -> the first delivery of a
record of the killed partition sent after the kill (receive pause).

At the end (producer paused, everything settled), the checks:
(a) 0 acknowledged lost: the group's members read every accepted seq;
(b) no (partition, offset) twice on one member link (they never release, their node
    never dies); offsets that go backwards on a link are counted and logged (a new leader
    redelivers from the group floor last logged, which can be up to the 1 s persist
    behind: those records went to the other member before, see the report);
(c) no link error, no reattach, no reconnect: each client kept the one link it opened
    (its node survived every round), and no send was rejected or released between a
    kill and the end of its round (the test's own `cluster elect` that hands a lead from
    M away makes M reject its waiting local sends, "send it again": counted apart);
(d) every round's send pause is at most lease_ttl_ms + 1 s x SLOW.
The FWDCRASH line has the figures: rounds, accepted, lost, duplicates, pauses p50/p99/max."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import TTL_MS, get_json, wait_for  # noqa: E402
from mqdcrash import (Producer, TopicMember, drain_fwd, fwd_checks, fwd_cluster, on_node,  # noqa: E402
                     pct)
from mqdtest import SLOW, check, log  # noqa: E402

ROUNDS = int(os.environ.get("MQD_FWD_CRASH_ROUNDS", "20") or "20")
TOPIC, PARTS = "f3", 3
RACKS = {1: "a", 2: "b", 3: "c"}


def pkey(p):
    return "/mqd/partitions/%s/%d" % (TOPIC, p)


def all_settled(etcd):
    """{partition: state} once every partition's ISR holds all three, else None."""
    out = {}
    for p in range(PARTS):
        ps = get_json(etcd.port, pkey(p))
        if not ps or sorted(ps["isr"]) != [1, 2, 3]:
            return None
        out[p] = ps
    return out


def elect(etcd, brokers, p, v):
    rc, out, err = mqdtest.mqctl(brokers[v].url, "cluster", "elect", TOPIC, str(p), str(v))
    check(rc == 0, "cluster elect %s %d %d: %s" % (TOPIC, p, v, out + err))
    wait_for("node %d leading %s/%d" % (v, TOPIC, p),
             lambda: get_json(etcd.port, pkey(p))["leader"] == v, 20)


def one_round(r, etcd, brokers, m, prod, members):
    v = [i for i in sorted(RACKS) if i != m][r % 2]
    p = r % PARTS
    sts = wait_for("ISR of 3 everywhere before round %d" % r, lambda: all_settled(etcd), 40)
    if sts[p]["leader"] != v:
        elect(etcd, brokers, p, v)
        sts = wait_for("ISR of 3 after the election of round %d" % r, lambda: all_settled(etcd), 40)
    killed = sorted(q for q, ps in sts.items() if ps["leader"] == v)
    t_ready = time.monotonic()
    wait_for("an acceptance before round %d" % r, lambda: prod.first_ack_after(t_ready) is not None, 20)
    inflight = set(list(prod.inflight.values()) + list(prod.resend))
    seq_kill = prod.next_seq
    refused = sum(prod.rejects.values())
    t_kill, wall_kill = time.monotonic(), time.time()
    brokers[v].kill()

    def all_acked():
        acked = prod.acked
        if not all(s in acked for s in inflight):
            return None
        return max([acked[s][0] for s in inflight] + [prod.first_ack_after(t_kill) or 0]) or None
    t_ack = wait_for("round %d: the sends in flight at the kill accepted (%s)" % (r, prod.status()),
                     all_acked, 2 * TTL_MS / 1000 + 20)

    def first_new():
        ts = [t for c in members for (_, q), _, _, b, t in list(c.deliveries)
              if q in killed and t > wall_kill and int(b.split("-")[-1]) >= seq_kill]
        return min(ts) if ts else None
    t_recv = wait_for("round %d: a record of %r sent after the kill delivered" % (r, killed),
                      first_new, 2 * TTL_MS / 1000 + 20)
    refused = sum(prod.rejects.values()) - refused
    brokers[v].start()
    send_pause, recv_pause = t_ack - t_kill, t_recv - wall_kill
    log("round %d: killed node %d leading %s/%r; send pause %.2f s (%d in flight), receive pause "
        "%.2f s, sends refused %d; %s" % (r, v, TOPIC, killed, send_pause, len(inflight), recv_pause,
                                         refused, prod.status()))
    return send_pause, recv_pause, refused


def body(t):
    etcd, brokers = fwd_cluster(t, RACKS)
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", TOPIC, "--partitions", str(PARTS),
                                 "--config", "replication_factor=3", "--config", "acks=all",
                                 "--config", "min_insync_replicas=2", "--config", "flush=sync",
                                 "--config", "dedup_window_ms=60000")
    check(rc == 0, "topic create: %s" % (out + err))
    wait_for("ISR of 3 everywhere", lambda: all_settled(etcd), 40)
    m = 1
    ports = {m: brokers[m].port}
    prod = on_node(Producer, brokers[m].port)(etcd, pkey(0), ports, TOPIC, msg_ids=True).start_thread()
    members = [on_node(TopicMember, brokers[m].port)(etcd, pkey(0), ports, TOPIC, name=n).start_thread()
               for n in ("A", "B")]
    coll = mqdtest.Collect()
    rounds = []
    t_loop = time.monotonic()
    try:
        wait_for("the members reading through node %d" % m,
                 lambda: sum(len(c.deliveries) for c in members) > 50, 30)
        for r in range(1, ROUNDS + 1):
            rounds.append(one_round(r, etcd, brokers, m, prod, members))
        wait_for("ISR of 3 at the end", lambda: all_settled(etcd), 40)
        want = drain_fwd(prod, members)
    finally:
        for c in [prod] + members:
            c.stop_flag.set()
    wall = time.monotonic() - t_loop
    lost, dups = fwd_checks(coll, "FWDCRASH", prod, members, want, refused_ok=True)
    sends = [s for s, _, _ in rounds]
    recvs = [x for _, x, _ in rounds]
    refused = sum(x for _, _, x in rounds)
    with coll.case("(c2) no send refused from a kill to the end of its round"):
        check(not refused, "%d refused (all refusals: %r)" % (refused, prod.rejects))
    log("FWDCRASH sends refused: %d in the kill rounds, %d in all (the rest by the test's own "
        "elections: a node that hands a lead over rejects its waiting local sends)"
        % (refused, sum(prod.rejects.values())))
    log("FWDCRASH %d rounds in %.0f s: accepted %d, lost %d, duplicates on one link %d; send pause "
        "p50 %.2f p99 %.2f max %.2f s; receive pause p50 %.2f p99 %.2f max %.2f s (lease_ttl_ms %d); "
        "send pauses: %s" % (len(rounds), wall, len(want), len(lost), len(dups), pct(sends, 50),
                             pct(sends, 99), max(sends), pct(recvs, 50), pct(recvs, 99), max(recvs),
                             TTL_MS, " ".join("%.2f" % x for x in sends)))
    with coll.case("(d) each send pause at most lease_ttl_ms + 1 s"):
        check(max(sends) <= TTL_MS / 1000 + 1.0 * SLOW, "max send pause %.2f s" % max(sends))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=120 + ROUNDS * 20)
