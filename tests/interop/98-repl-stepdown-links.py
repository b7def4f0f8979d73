#!/usr/bin/python3
"""Links on a leader that steps down (docs/replication.md, Moving leadership): the topic's
consumer links bound to the partition that moved (or to the whole topic), browsers
included, stay attached and are served from the new leader through this node (forwarded:
src/fwd/recv.c; group members: test 160); only one that asked for redirects (link
property mqd:redirect = true) is detached with amqp:link:redirect naming the new leader
(network-host, port, address: the attach-time redirect's answer), so such a client moves
at once, as a Kafka client does on NOT_LEADER; a producer's link stays where it is and
its sends are forwarded to the new leader (src/fwd, issue 33). A real etcd and three mqd nodes (racks a/b/c), topic r3 with
replication_factor 3 and acks = all, and topic r3x whose one partition has the same
leader L.

(a) a producer sending to the address r3 (paced, 1,000 a second, 50 unsettled at most), a
    browsing consumer of r3/ConsumerGroups/crash/Partitions/0 and a second one whose
    attach asks for redirects (mqdcrash.py's clients: they follow a redirect's port) are
    attached to L and have 200 acceptances and 100 reads each; a receiver of r3x is
    attached to L.
(b) `mqctl cluster elect r3 0 F`: within 2 s the redirect-asking consumer's link is
    detached with amqp:link:redirect whose info names 127.0.0.1, F's port and an address
    of r3 and it continues on F; the plain browser's link stays attached to L (never
    detached: before, it was redirected too, and a client that does not follow redirects
    lost it) and reads what is sent after the move, served from F through L; the
    producer's link stays attached to L (never detached) and gets 200 more acceptances
    after the move, its sends forwarded by L to F.
(c) the producer stopped: each consumer reads every accepted send exactly once, in send
    order, offsets one by one (the browser: no position twice across the move); sends not accepted (rejected as the leader changed, or in
    flight at the detach) are not sent again and appear at most once.
(d) the r3x receiver, whose partition did not move, is still attached to L and gets a
    message sent to r3x after the move."""

import os
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Receiver, Sender, create_rf3, get_json, start_nodes, wait_for, Etcd  # noqa: E402
from mqdcrash import Consumer, Producer, REDIRECT, body_of  # noqa: E402,F401
from mqdtest import SLOW, check, log, skip  # noqa: E402
from mqdcluster import Props  # noqa: E402
from proton.reactor import Copy, Selector  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
KEY = "/mqd/partitions/r3/0"


def fnv1a(s):
    """The controller's name hash (ctl.c): where a topic's placement starts."""
    h = 2166136261
    for ch in s.encode():
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


class Closes:
    """Records every detach of the client's current link: (monotonic time, condition
    name, info as a dict with str keys)."""

    def on_link_remote_close(self, e):
        if self._mine(e):
            c = e.link.remote_condition
            self.closes.append((time.monotonic(), c.name if c else None,
                                {str(k): v for k, v in dict(c.info or {}).items()} if c else {}))
        super().on_link_remote_close(e)


class OnceProducer(Closes, Producer):
    """mqdcrash's Producer, but each message is sent once: one not accepted is not sent
    again (rejected: kept with its condition; in flight when its link went: `unknown`),
    so every accepted body must be read exactly once."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.closes, self.rejected_seqs, self.unknown = [], [], []

    def link_lost(self):
        self.unknown.extend(self.inflight.values())
        self.inflight = {}

    def _settled(self, e, accepted):
        if e.link != self.link:
            return
        seq = self.inflight.pop(e.delivery.tag, None)
        if seq is None:
            return
        if accepted:
            self.acked.setdefault(seq, (time.monotonic(), self.node))
            return
        cond = e.delivery.remote.condition if e.delivery.remote_state == e.delivery.REJECTED else None
        name = cond.name if cond else "released"
        self.rejected_seqs.append((seq, name))
        self.rejects[name] = self.rejects.get(name, 0) + 1


class ClosesConsumer(Closes, Consumer):
    def __init__(self, *a, redirect=False, **kw):
        super().__init__(*a, **kw)
        self.closes = []
        self.want_redirect = redirect

    def attach(self, conn):
        if not self.want_redirect:
            return super().attach(conn)
        sel = Selector("amqp.annotation.x-opt-offset >= '%d'" % (self.last + 1))
        return self.container.create_receiver(conn, self.address,
                                              options=[Copy(), sel, Props({"mqd:redirect": True})])


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS)
    ports = {i: b.port for i, b in brokers.items()}
    ps = create_rf3(etcd, brokers[1])
    lid = ps["leader"]
    L = brokers[lid]
    other = next(n for n in ("r3x%d" % i for i in range(300)) if fnv1a(n) % 3 == fnv1a("r3") % 3)
    ox = create_rf3(etcd, brokers[1], other)
    check(ox["leader"] == lid, "%s is led by %d, r3 by %d" % (other, ox["leader"], lid))
    wait_for("ISR of 3", lambda: len(get_json(etcd.port, KEY)["isr"]) == 3, 20)
    wait_for("four followers fetching from L", lambda: L.log_text().count("fetches from") >= 4, 20)
    fid = [i for i in RACKS if i != lid][0]
    coll = mqdtest.Collect()
    prod = OnceProducer(etcd, KEY, ports, "r3", prefix="s", rate=1000, window=50).start_thread()
    cons = ClosesConsumer(etcd, KEY, ports, "r3").start_thread()
    rcons = ClosesConsumer(etcd, KEY, ports, "r3", redirect=True).start_thread()
    rx = Receiver(L.url, other, 1, idle_s=10 ** 6)
    rt = threading.Thread(target=lambda: mqdtest.run_container(rx, 120), daemon=True)
    rt.start()
    try:
        with coll.case("(a) a producer and a consumer at work on the leader L"):
            wait_for("200 acceptances and 100 reads each", lambda: len(prod.acked) >= 200 and
                     len(cons.seen) >= 100 and len(rcons.seen) >= 100, 20)
            check(prod.node == lid and cons.node == lid and rcons.node == lid,
                  "attached to %r / %r / %r, L is %d" % (prod.node, cons.node, rcons.node, lid))
            check(not prod.closes and not cons.closes and not rcons.closes,
                  "detached before the move: %r %r %r" % (prod.closes, cons.closes, rcons.closes))
        with coll.case("(b) elect F: the redirect-asking consumer redirected to F within 2 s, "
                       "the browser and the producer stay"):
            t0 = time.monotonic()
            rc, out, err = mqdtest.mqctl(L.url, "cluster", "elect", "r3", "0", str(fid))
            check(rc == 0 and "node %d leads r3/0 in epoch 2" % fid in out, "elect: rc %d %s" % (rc, out + err))
            wait_for("the redirect-asking consumer's link detached", lambda: rcons.closes, 10)
            for who, c in (("redirect-asking consumer", rcons),):
                when, name, info = c.closes[0]
                log("%s detached %.3f s after the elect: %s %r" % (who, when - t0, name, info))
                check(name == REDIRECT and info.get("network-host") == "127.0.0.1" and
                      int(info.get("port", 0)) == brokers[fid].port and
                      str(info.get("address", "")).startswith("r3"),
                      "the %s's detach: %s %r (F's port %d)" % (who, name, info, brokers[fid].port))
                check(when - t0 < 2 * SLOW, "the %s was detached %.2f s after the elect" % (who, when - t0))
            n0 = len(prod.acked)
            wait_for("200 more acceptances after the move (forwarded to F)",
                     lambda: sum(1 for tm, _ in list(prod.acked.values()) if tm > t0 + 2 * SLOW) >= 200, 20)
            last = max(cons.seen)
            wait_for("the browser reads past what was sent before the move", lambda: max(cons.seen) >= last + 200, 20)
            check(prod.node == lid and cons.node == lid and rcons.node == fid,
                  "now on %r / %r / %r, L is %d, F is %d" % (prod.node, cons.node, rcons.node, lid, fid))
            check(not prod.closes and not cons.closes and len(rcons.closes) == 1,
                  "detaches: producer %r browser %r redirect-asking consumer %r"
                  % (prod.closes, cons.closes, rcons.closes))
            log("%s; %d acceptances before the move; rejected %r; in flight at the detach %r" % (
                prod.status(), n0, prod.rejected_seqs, prod.unknown))
        with coll.case("(c) every accepted send read exactly once, in order"):
            prod.paused = True
            wait_for("the producer idle", lambda: not prod.inflight, 10)
            acked = set(prod.acked)
            for who, c in (("browser", cons), ("redirect-asking consumer", rcons)):
                wait_for("the %s has every accepted send" % who,
                         lambda: acked <= {int(b.split("-")[1]) for b in list(c.seen.values())}, 20)
                time.sleep(0.5 * SLOW)
                offs = sorted(c.seen)
                seqs = [int(c.seen[o].split("-")[1]) for o in offs]
                log("%s: %s; read %d (offsets %d..%d)" % (who, c.status(), len(seqs), offs[0], offs[-1]))
                check(not c.order_errors, "%s: offsets not one by one: %r" % (who, c.order_errors[:5]))
                check(offs == list(range(offs[0], offs[0] + len(offs))), "%s: gaps in the offsets read" % who)
                dups = sorted({q for q in seqs if seqs.count(q) > 1})
                check(seqs == sorted(seqs) and not dups, "%s: bodies out of send order or twice (twice: %d, "
                      "first %r)" % (who, len(dups), dups[:5]))
                check(acked <= set(seqs), "%s: accepted but not read: %r" % (who, sorted(acked - set(seqs))[:5]))
                sent = set(range(prod.next_seq))
                check(set(seqs) <= sent, "%s: read bodies never sent: %r" % (who, sorted(set(seqs) - sent)[:5]))
                extra = sorted(set(seqs) - acked)
                log("%s: read but not accepted (rejected or in flight at the detach, stored before): %r"
                    % (who, extra))
        with coll.case("(d) a link of a partition that did not move stays"):
            s = Sender(L.url, other, 1, "x")
            mqdtest.run_container(s, 30)
            check(s.accepted == 1, "send to %s on L: %s %r" % (other, s.status(), s.link_cond))
            rt.join(10 * SLOW)
            check(rx.bodies == ["x-0"] and rx.link_cond is None and not rx.error,
                  "the %s receiver: %r %r %r" % (other, rx.bodies, rx.link_cond, rx.error))
    finally:
        prod.stop()
        cons.stop()
        rcons.stop()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
