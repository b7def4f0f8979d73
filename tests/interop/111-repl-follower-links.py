#!/usr/bin/python3
"""Replication: only a partition's leader serves its links (issue 32 point 4). A real etcd
and three mqd nodes (racks a/b/c, lease_ttl_ms 3000 x MQD_TEST_SLOW, auto_leader_rebalance
off), topic r3: replication_factor 3, acks = all, min_insync_replicas 2, flush = sync. A
producer (100 a second, at-least-once), a browsing consumer and a member of group gc
that accepts what it gets (mqdcrash.py's Producer, Consumer and GroupConsumer) all follow
the leader across failovers, as the crash loop's do.

Before the fix a node served a consumer that reached it while it did not lead:
(a) the leader L, SIGKILLed and started again at once (etcd still names it leader: it
    hands the lead over to another in-sync replica, ctl.c), served links that came
    between its start and that hand-over, and went on serving them as a follower;
(b) after all three nodes were SIGKILLed, a node whose view lacked the leader's key (the
    leader's registration expired, it had not started yet) served the links it got;
and when the new leader's group-offset record reached such a follower, the member's
cursor moved back and the same offsets came again on the same link.

(a) 3 rounds: L SIGKILLed and started at once; the browser and the group member are sent
    to L as soon as its port listens (their attaches reach it while it loads its state
    and before its hand-over: checked in at least one round from its log and the
    connections' open times); then the ISR of 3 again and the member reading again.
(b) 2 rounds: all three SIGKILLed; once their keys have left etcd, the two that did not
    lead start (the first one's view lacks the leader's key) and both clients are sent
    to the first; the old leader starts 2 s x SLOW later.
(c) invariants over the whole run (mqdleaders.py):
    - the nodes' logs, in their own order: no member of a group of r3 joined on a node
      whose last r3/0 role line was not `leader` (or before any), and no node took
      another role while a member was attached;
    - every message either consumer got came from a node that led r3/0 then (its role
      lines; a step-down 2 s x SLOW before the client read it is allowed);
    - on each of the group member's links the offsets grow.
(d) drained: the browser and the group member got every accepted seq (0 lost); the
    replicas are byte-equal below the high watermark (mqdcrash.check_end)."""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import TTL_MS, Etcd, get_json, read_keys, start_nodes, wait_for  # noqa: E402
from mqdcrash import (KEY, TOPIC, Consumer, GroupConsumer, Producer, check_end,  # noqa: E402
                      create_topic, drain, settled_state)
from mqdleaders import delivery_violations, link_order_violations, log_time, scan_nodes  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
ROUNDS_A = 3
ROUNDS_B = 2


def reading_from_leader(etcd, gc, since):
    """The group member got a message from etcd's leader after wall-clock time since."""
    ps = get_json(etcd.port, KEY)
    lead = ps["leader"] if ps else None
    return any(n == lead and t > since for _, n, _, _, t in list(gc.deliveries)[-200:])


def settle(etcd, gc, what):
    wait_for("ISR of 3 after %s" % what, lambda: settled_state(etcd), 40)
    since = time.time()
    wait_for("the group member reading from the leader after %s (%s)" % (what, gc.status()),
             lambda: reading_from_leader(etcd, gc, since), 30)


def first_line_time(path, needle):
    """The time of the first line of the log at path that holds needle, or None."""
    try:
        with open(path, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                if needle in line:
                    return log_time(line[:23])
    except OSError:
        pass
    return None


def restart_round(r, etcd, brokers, clients):
    """(a): kills the leader, starts it at once, aims the clients at it. Returns whether a
    client's connection opened before the node's first role line of this run."""
    ps = get_json(etcd.port, KEY)
    lead = ps["leader"]
    b = brokers[lead]
    t0 = time.time()
    b.kill()
    b.start()
    for c in clients:
        c.goto(b.port)
    settle(etcd, clients[-1], "round a%d" % r)
    path = b.logs[-1]
    role_t = first_line_time(path, "repl: %s/0: " % TOPIC)
    opens = [t for c in clients for n, t in list(c.opens) if n == lead and t > t0]
    early = role_t is not None and any(t < role_t for t in opens)
    ps2 = get_json(etcd.port, KEY)
    log("round a%d: node %d killed and started (epoch %d -> leader %d in epoch %d); its first role "
        "line %.3f s after the kill; the clients' connections opened there after %s s%s"
        % (r, lead, ps["epoch"], ps2["leader"], ps2["epoch"], (role_t or t0) - t0,
           " ".join("%.3f" % (t - t0) for t in opens), " (before its role: in the window)" if early else ""))
    return early


def all_round(r, etcd, brokers, clients):
    """(b): kills all three, starts the followers first, aims the clients at the first."""
    ps = get_json(etcd.port, KEY)
    lead = ps["leader"]
    for i in sorted(brokers, key=lambda i: i != lead):
        brokers[i].kill()
    wait_for("every node's key gone from etcd", lambda: not read_keys(etcd.port, "/mqd/nodes/"),
             TTL_MS / 1000 + 15)
    first, second = [i for i in sorted(brokers) if i != lead]
    brokers[first].start()
    for c in clients:
        c.goto(brokers[first].port)
    brokers[second].start()
    time.sleep(2 * SLOW)
    brokers[lead].start()
    settle(etcd, clients[-1], "round b%d" % r)
    ps2 = get_json(etcd.port, KEY)
    log("round b%d: all killed (leader %d, epoch %d); nodes %d, %d, then %d started; leader %d in epoch %d"
        % (r, lead, ps["epoch"], first, second, lead, ps2["leader"], ps2["epoch"]))


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"auto_leader_rebalance": "off"})
    ps = create_topic(etcd, brokers[1])
    wait_for("both followers fetching", lambda: brokers[ps["leader"]].log_text().count("fetches from") >= 2, 20)
    ports = {i: b.port for i, b in brokers.items()}
    prod = Producer(etcd, KEY, ports, TOPIC, rate=100).start_thread()
    cons = Consumer(etcd, KEY, ports, TOPIC).start_thread()
    gc = GroupConsumer(etcd, KEY, ports, TOPIC).start_thread()
    coll = mqdtest.Collect()
    early = 0
    try:
        settle(etcd, gc, "the start")
        with coll.case("(a) the leader restarted at once, the clients sent to it"):
            for r in range(1, ROUNDS_A + 1):
                early += restart_round(r, etcd, brokers, [cons, gc])
            check(early >= 1, "no client reached the restarted leader before its first role line "
                  "in %d rounds: the window was not tested" % ROUNDS_A)
        with coll.case("(b) all three killed, the followers started first, the clients sent to one"):
            for r in range(1, ROUNDS_B + 1):
                all_round(r, etcd, brokers, [cons, gc])
        ps = wait_for("ISR of 3 at the end", lambda: settled_state(etcd), 30)
        want = drain(prod, cons, etcd, gc)
    finally:
        for c in (prod, cons, gc):
            c.stop_flag.set()
    log("%s; %s; %s" % (prod.status(), cons.status(), gc.status()))
    with coll.case("(d) 0 accepted seqs lost; replicas byte-equal below the HW"):
        check(want <= gc.bodies, "the group member misses %d accepted seqs" % len(want - gc.bodies))
        check_end(brokers, ps, cons, want)  # stops the nodes: their logs are whole below
    bad, timelines = scan_nodes(brokers, TOPIC)
    got = cons.got() + gc.got()
    late = delivery_violations(timelines, got, 2 * SLOW)
    back = link_order_violations(gc.deliveries)
    log("(c): %d messages to the clients (%d to the group member on %d links), %d role lines; "
        "log violations %d, messages not from the leader %d, offsets backwards on a link %d"
        % (len(got), len(gc.deliveries), gc.links, sum(len(v) for v in timelines.values()),
           len(bad), len(late), len(back)))
    with coll.case("(c) no member joined or stayed on a node that did not lead"):
        check(not bad, "%d: %s" % (len(bad), "; ".join(bad[:5])))
    with coll.case("(c) every message came from the leader"):
        check(not late, "%d: %s" % (len(late), "; ".join(late[:5])))
    with coll.case("(c) on each link of the group member the offsets grow"):
        check(not back, "%d times (link, node, previous offset, offset): %r" % (len(back), back[:5]))
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=420)
