#!/usr/bin/python3
"""Replication: only a partition's leader serves its links (issue 32 point 4). A real etcd
and three mqd nodes (racks a/b/c, lease_ttl_ms 3000 x MQD_TEST_SLOW, auto_leader_rebalance
off, fast_failover off: (a) needs the restarted leader to find itself still named leader,
which a fast failover, done before the restart completes, no longer lets it), topic r3: replication_factor 3, acks = all, min_insync_replicas 2, flush = sync. A
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

First both followers are restarted once while the group member reads on the leader, so
that every node holds the group in memory (loaded from the offsets the leader's records
gave its meta.db), as after any restart: that is what made the new leader log the group's
offset soon after it took over, and the follower serving the member move its cursor back.
(a) 3 rounds: L SIGKILLed and started at once; the browser and the group member are sent
    to L as soon as its port listens (their attaches reach it while it loads its state
    and before its hand-over: checked in at least one round from its log and the
    connections' open times) and are answered with amqp:link:redirect to the new leader
    once L handed over (each client that reached it then followed a redirect; before the
    fix they were served there); once L logged its role, a second member of gc reads slowly
    on the new leader for 2.5 s x SLOW (refused amqp:resource-locked if the first one is
    there already), so that the new leader logs group offsets below what L gave the first
    member, and they reach L (before the fix they moved the cursor of the member L served
    back: the same offsets again on its link); then the ISR of 3 again and the member
    reading from the leader again.
(b) 2 rounds: all three SIGKILLed; once their keys have left etcd, the two that did not
    lead start (the first one's view lacks the leader's key) and both clients are sent
    to the first; the old leader starts 2 s x SLOW later.
(c) invariants over the whole run (mqdleaders.py):
    - the nodes' logs, in their own order: no member of a group of r3 joined on a node
      whose last r3/0 role line was not `leader` (or before any), and no node took
      another role while a member was attached;
    - every message either consumer got came from a node that led r3/0 then (its role
      lines; a step-down 2 s x SLOW before the client read it is allowed);
    - on each link of the group's members the offsets grow.
(d) drained: the browser and the group's members got every accepted seq (0 lost); the
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
from mqdleaders import link_order_violations, log_time, scan_nodes, served_violations  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
ROUNDS_A = 3
ROUNDS_B = 2


def reading_from_leader(etcd, gc, since):
    """The group member got a message after wall-clock time since: from etcd's leader, or
    through another node, which forwards the link to the leader (issue 33)."""
    return any(t > since for _, _, _, _, t in list(gc.deliveries)[-200:])


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


class Visitor(mqdtest.Client):
    """A second member of group gc on one node for `secs` x SLOW seconds (it follows
    nothing) that reads slowly, one message every 0.25 s, and accepts each: the group's
    committed offset then moves slowly on that node. `deliveries` as GroupConsumer's (its
    link named `tag`), `link_cond` the condition it was refused or detached with."""

    class _Flow:
        def __init__(self, v):
            self.v = v

        def on_timer_task(self, e):
            if not self.v.done and self.v.rcv is not None:
                self.v.rcv.flow(1)

    def __init__(self, brokers, node, secs, tag):
        super().__init__(prefetch=0)
        self.url, self.node, self.secs, self.tag = brokers[node].url, node, secs, tag
        self.deliveries = []
        self.link_cond = None
        self.rcv = None

    def on_start(self, e):
        c = self.connect(e.container, self.url)
        self.rcv = e.container.create_receiver(c, "%s/ConsumerGroups/gc/Partitions/0" % TOPIC)
        self.rcv.flow(1)
        e.container.schedule(self.secs * SLOW, self)

    def on_timer_task(self, e):
        self.finish()

    def on_message(self, e):
        off = int(mqdtest.ann(e.message, "x-opt-offset", "-1"))
        self.deliveries.append((self.tag, self.node, off, e.message.body, time.time()))
        e.container.schedule(0.25, Visitor._Flow(self))

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = c.name if c else None
        self.finish()

    def got(self):
        return [(n, t, "%s, offset %d" % (k, o)) for k, n, o, _, t in self.deliveries]


def restart_round(r, etcd, brokers, clients, visitors):
    """(a): kills the leader, starts it at once, aims the clients at it; once it handed the
    lead over, a second member of the group reads on the new leader for 2.5 s (the new
    leader then logs the group's offsets, which reach the restarted node). Returns whether
    a client's connection opened before the node's first role line of this run."""
    ps = get_json(etcd.port, KEY)
    lead = ps["leader"]
    b = brokers[lead]
    red0 = [c.redirects for c in clients]
    err0 = [len(c.errors) for c in clients]
    t0 = time.time()
    b.kill()
    b.start()
    for c in clients:
        c.goto(b.port)
    wait_for("node %d's first role line" % lead, lambda: first_line_time(b.logs[-1], "repl: %s/0: " % TOPIC), 20)
    nl = get_json(etcd.port, KEY)["leader"]
    v = Visitor(brokers, nl, 2.5, "visitor a%d" % r)
    mqdtest.run_container(v, 30)
    visitors.append(v)
    log("round a%d: a second member of gc on node %d got %d messages%s" % (
        r, nl, len(v.deliveries), ", refused: %s" % v.link_cond if v.link_cond else ""))
    settle(etcd, clients[-1], "round a%d" % r)
    path = b.logs[-1]
    role_t = first_line_time(path, "repl: %s/0: " % TOPIC)
    opens = [t for c in clients for n, t in list(c.opens) if n == lead and t > t0]
    reached = [c for c in clients if role_t is not None and
               any(n == lead and t0 < t < role_t for n, t in list(c.opens))]
    early = bool(reached)
    # not served from its own log (the logs' check, (c)): forwarded to the new leader once
    # it handed over (issue 33), or, on a build without forwarding, redirected there
    errs = [c.errors[e:] for c, e in zip(clients, err0)]
    redirected = all(c.redirects > n or not er for c, n, er in zip(clients, red0, errs) if c in reached)
    ps2 = get_json(etcd.port, KEY)
    log("round a%d: node %d killed and started (epoch %d -> leader %d in epoch %d); its first role "
        "line %.3f s after the kill; the clients' connections opened there after %s s%s; the "
        "ones that did were forwarded (or redirected) since: %s (link errors this round: %r)"
        % (r, lead, ps["epoch"], ps2["leader"], ps2["epoch"], (role_t or t0) - t0,
           " ".join("%.3f" % (t - t0) for t in opens), " (before its role: in the window)" if early else "",
           redirected, errs))
    return early, redirected


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
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"auto_leader_rebalance": "off",
                                                     "fast_failover": "off"})
    ps = create_topic(etcd, brokers[1])
    wait_for("both followers fetching", lambda: brokers[ps["leader"]].log_text().count("fetches from") >= 2, 20)
    ports = {i: b.port for i, b in brokers.items()}
    prod = Producer(etcd, KEY, ports, TOPIC, rate=100).start_thread()
    cons = Consumer(etcd, KEY, ports, TOPIC).start_thread()
    gc = GroupConsumer(etcd, KEY, ports, TOPIC).start_thread()
    coll = mqdtest.Collect()
    visitors = []
    try:
        settle(etcd, gc, "the start")
        # every node holds group gc in memory, as after any restart (its meta.db has it from
        # the leader's offset records): the condition for the offsets going back
        lead = get_json(etcd.port, KEY)["leader"]
        for i in sorted(RACKS):
            if i != lead:
                time.sleep(2.5 * SLOW)  # the leader logs the group's offset (1 s persist)
                brokers[i].restart()
                settle(etcd, gc, "node %d's restart" % i)
        time.sleep(2.5 * SLOW)  # and the restarted followers follow a newer one
        with coll.case("(a) the leader restarted at once, the clients sent to it"):
            rounds = [restart_round(r, etcd, brokers, [cons, gc], visitors) for r in range(1, ROUNDS_A + 1)]
            early = sum(e for e, _ in rounds)
            check(early >= 1, "no client reached the restarted leader before its first role line "
                  "in %d rounds: the window was not tested" % ROUNDS_A)
            check(all(red for e, red in rounds if e), "a client that reached the restarted leader "
                  "before its hand-over was neither forwarded nor redirected: %r" % rounds)
        with coll.case("(b) all three killed, the followers started first, the clients sent to one"):
            for r in range(1, ROUNDS_B + 1):
                all_round(r, etcd, brokers, [cons, gc])
        ps = wait_for("ISR of 3 at the end", lambda: settled_state(etcd), 30)
        want = drain(prod, cons, etcd)
        group_got = lambda: set(list(gc.bodies)).union(*[{d[3] for d in v.deliveries} for v in visitors])
        wait_for("the group's members have every accepted seq (%s)" % gc.status(),
                 lambda: want <= group_got(), 30)
        gc.stop()
    finally:
        for c in (prod, cons, gc):
            c.stop_flag.set()
    log("%s; %s; %s" % (prod.status(), cons.status(), gc.status()))
    with coll.case("(d) 0 accepted seqs lost; replicas byte-equal below the HW"):
        check(want <= group_got(), "the group misses %d accepted seqs" % len(want - group_got()))
        check_end(brokers, ps, cons, want)  # stops the nodes: their logs are whole below
    bad, timelines = scan_nodes(brokers, TOPIC)
    got = cons.got() + gc.got() + [x for v in visitors for x in v.got()]
    late = served_violations(timelines, got, 2 * SLOW)  # forwarding: mqdleaders.py
    back = link_order_violations(list(gc.deliveries) + [d for v in visitors for d in v.deliveries])
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
