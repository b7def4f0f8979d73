#!/usr/bin/python3
"""Consumer-group rebalance under load: a producer sends 20,000 keyed messages (200 keys)
at a steady pace (~1,000/s) to a 6-partition topic while members of group g join and
leave:
   t=0   member A attaches (before the producer starts)
   t=3s  member B (in-process) and member K (a subprocess) attach
   t=8s  B detaches cleanly
   t=10s K stops settling (holds its unsettled deliveries, at most its credit of 40)
   t=12s K is SIGKILLed (no detach, no close)
Afterwards: every accepted message was received at least once; a message received
twice was one K held unsettled when killed (nothing else is duplicated); each member's
stream is in send order per key and per partition; once all is consumed and A
detached cleanly, a new member of g receives nothing (committed offsets = log end,
also read from meta.db); after a broker restart (SIGKILL) a new member again receives
nothing."""

import os
import signal
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, run_container  # noqa: E402
from mqdtest import receive_ff as receive  # noqa: E402

from proton import Message, symbol  # noqa: E402

N = 20000
KEYS = 200
PARTS = 6
T = "rebal41"
G = T + "/ConsumerGroups/g"
PACE = 50          # messages per tick
TICK = 0.05        # -> 1,000/s, 20 s of production
T_JOIN, T_LEAVE, T_HOLD, T_KILL = 3.0, 8.0, 10.0, 12.0
K_CREDIT = 40

# Member K, run as `/usr/bin/python3 -c K_SCRIPT URL ADDR LOGFILE HOLDFILE`: accepts each
# message (logging "R key seq pid off" on arrival, "A pid off" once settled) until
# HOLDFILE exists, then keeps receiving but settles nothing ("H" marks the switch).
K_SCRIPT = r'''
import os, sys, time
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
url, addr, logf, holdf, credit = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
fd = os.open(logf, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
def w(s):
    os.write(fd, (s + "\n").encode())
class K(MessagingHandler):
    def __init__(self):
        super().__init__(prefetch=0, auto_accept=False)
        self.hold = False
    def on_start(self, event):
        c = event.container.connect(url, reconnect=False)
        self.r = event.container.create_receiver(c, addr, name="member-K")
        self.r.flow(credit)
        event.container.schedule(0.05, self)
    def on_link_opened(self, event):
        w("OPEN")
    def on_timer_task(self, event):
        if not self.hold and os.path.exists(holdf):
            self.hold = True
            w("H")
        event.container.schedule(0.05, self)
    def on_message(self, event):
        m, d = event.message, event.delivery
        a = m.annotations or {}
        w("R %s %d %d" % (m.body, int(a[[k for k in a if str(k) == "x-opt-partition-id"][0]]),
                          int(a[[k for k in a if str(k) == "x-opt-offset"][0]])))
        if not self.hold:
            d.update(d.ACCEPTED)
            d.settle()
            self.r.flow(1)
            w("A %s" % m.body)
    def on_link_error(self, event):
        w("LINKERR %s" % event.link.remote_condition)
Container(K()).run()
'''


def key_of(i):
    return "key-%03d" % (i % KEYS)


class Scenario(Client):
    def __init__(self, t, url):
        super().__init__(prefetch=0, auto_accept=False)
        self.t = t
        self.url = url
        self.klog = os.path.join(t.tmpdir, "memberK.log")
        self.khold = os.path.join(t.tmpdir, "memberK.hold")
        self.streams = defaultdict(list)   # member -> [(body, pid, off)]
        self.late = defaultdict(int)       # member -> deliveries after its close
        self.sent = 0
        self.confirmed = 0
        self.not_accepted = []
        self.t0 = None
        self.steps = [(T_JOIN, self.join_more), (T_LEAVE, self.leave_b), (T_HOLD, self.hold_k),
                      (T_KILL, self.kill_k)]
        self.kproc = None
        self.links = {}
        self.closing = set()
        self.all_in = None
        self.snd = None

    # ---- members
    def add_member(self, container, name):
        conn = self.connect(container, self.url)
        r = container.create_receiver(conn, G, name="member-" + name)
        r.member = name
        r.flow(100)
        self.links[name] = r
        return r

    def on_start(self, event):
        self.container = event.container
        self.add_member(event.container, "A")

    def on_link_opened(self, event):
        if event.receiver is not None and getattr(event.receiver, "member", None) == "A" and self.snd is None:
            log("member A attached; producer starts")
            self.t0 = time.monotonic()
            conn = self.connect(event.container, self.url)
            self.snd = event.container.create_sender(conn, T)
            event.container.schedule(TICK, self)
        elif event.receiver is not None:
            log("member %s attached" % event.receiver.member)

    def join_more(self):
        self.add_member(self.container, "B")
        self.kproc = self.t.spawn(["/usr/bin/python3", "-c", K_SCRIPT, self.url, G, self.klog, self.khold,
                                   str(K_CREDIT)])
        log("member B attaching; member K spawned (pid %d)" % self.kproc.pid)

    def leave_b(self):
        log("member B detaches cleanly (%d received)" % len(self.streams["B"]))
        self.closing.add("B")
        self.links["B"].close()

    def hold_k(self):
        with open(self.khold, "w"):
            pass
        log("member K told to stop settling")

    def kill_k(self):
        check(self.kproc.poll() is None, "member K exited early: %s" % self.kproc.returncode)
        os.kill(self.kproc.pid, signal.SIGKILL)
        self.kproc.wait(timeout=10)
        log("member K SIGKILLed")

    # ---- producer pacing and schedule
    def on_timer_task(self, event):
        if self.done:
            return
        el = time.monotonic() - self.t0
        while self.steps and el >= self.steps[0][0]:
            self.steps.pop(0)[1]()
        n = 0
        while self.snd.credit and self.sent < N and n < PACE and self.sent < (el / TICK + 1) * PACE:
            i = self.sent
            k = key_of(i)
            self.snd.send(Message(body="%s:%03d" % (k, i // KEYS), annotations={symbol("x-opt-partition-key"): k}))
            self.sent += 1
            n += 1
        # keep every member's credit topped up to 100
        for name, r in self.links.items():
            if name not in self.closing and r.credit < 100:
                r.flow(100 - r.credit)
        if self.all_in is None and self.confirmed == N and not self.steps and self.covered():
            self.all_in = time.monotonic()
        if self.all_in is not None and time.monotonic() - self.all_in > 2.0 and "A" not in self.closing:
            log("everything received; member A detaches cleanly")
            self.closing.add("A")
            self.links["A"].close()
        event.container.schedule(TICK, self)

    def covered(self):
        got = set(b for v in self.streams.values() for (b, _, _) in v)
        got |= set(b for (b, _, _) in k_received(self.klog)[0])
        return len(got) >= N

    def on_accepted(self, event):
        self.confirmed += 1

    def on_rejected(self, event):
        self.not_accepted.append(("rejected", event.delivery.remote.condition))

    def on_released(self, event):
        self.not_accepted.append(("released", event.delivery.remote.condition))

    def on_message(self, event):
        name = event.receiver.member
        if name in self.closing:
            self.late[name] += 1  # arrived after our detach: not consumed (broker releases it)
            return
        m = event.message
        pid, off = mqdtest.check_delivery_annotations(m, where=m.body)
        self.streams[name].append((m.body, pid, off))
        event.delivery.update(event.delivery.ACCEPTED)
        event.delivery.settle()

    def on_link_closed(self, event):
        if getattr(event.link, "member", None):
            log("member %s detached (condition %s)" % (event.link.member, event.link.remote_condition))
            event.link.connection.close()
            if event.link.member == "A":
                self.finish()

    def on_transport_closed(self, event):
        super().on_transport_closed(event)
        if self.error:
            self.done = True  # fail fast: the broker went away

    def status(self):
        return "sent %d, confirmed %d, received %s, K %d" % (
            self.sent, self.confirmed, {k: len(v) for k, v in self.streams.items()}, len(k_received(self.klog)[0]))


def k_received(path):
    """(received [(body, pid, off)], accepted set, received after hold set, opened)"""
    rec, acc, held, hold, opened = [], set(), set(), False, False
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if not p or not line.endswith("\n"):
                    continue
                if p[0] == "OPEN":
                    opened = True
                elif p[0] == "H":
                    hold = True
                elif p[0] == "R":
                    rec.append((p[1], int(p[2]), int(p[3])))
                    if hold:
                        held.add(p[1])
                elif p[0] == "A":
                    acc.add(p[1])
    except OSError:
        pass
    return rec, acc, held, opened


def check_stream(name, stream):
    per_key = defaultdict(list)
    per_part = defaultdict(list)
    for (bd, pid, off) in stream:
        k, s = bd.split(":")
        per_key[k].append(int(s))
        per_part[pid].append(off)
    for k, seqs in per_key.items():
        check(all(a < b for a, b in zip(seqs, seqs[1:])), "member %s: key %s out of send order: %s"
              % (name, k, seqs[:30]))
    for p, offs in per_part.items():
        check(all(a < b for a, b in zip(offs, offs[1:])), "member %s: partition %d offsets out of order: %s"
              % (name, p, offs[:30]))
    return sorted(per_part)


def body(t):
    b = t.broker(sets={"topic.%s.partitions" % T: PARTS})
    h = Scenario(t, b.url)
    try:
        run_container(h, 120)
    finally:
        log(h.status())
    check(not h.not_accepted, "sends not accepted: %s" % h.not_accepted[:5])
    check(h.confirmed == N, "%d of %d sends accepted" % (h.confirmed, N))

    krec, kacc, kheld, kopened = k_received(h.klog)
    check(kopened, "member K never attached")
    unsettled_k = set(bd for (bd, _, _) in krec) - kacc
    log("K: %d received, %d accepted, %d held unsettled when killed; B: %d before detach, %d after; A: %d"
        % (len(krec), len(kacc), len(unsettled_k), len(h.streams["B"]), h.late["B"], len(h.streams["A"])))
    check(len(krec) > 0, "member K received nothing (it should have owned 2 of 6 partitions)")
    check(len(h.streams["B"]) > 0, "member B received nothing")
    check(unsettled_k, "member K held no unsettled deliveries when killed (the kill tested nothing)")

    everything = [bd for v in h.streams.values() for (bd, _, _) in v] + [bd for (bd, _, _) in krec]
    counts = defaultdict(int)
    for bd in everything:
        counts[bd] += 1
    want = set("%s:%03d" % (key_of(i), i // KEYS) for i in range(N))
    missing = want - set(counts)
    check(not missing, "%d accepted messages never received, e.g. %s" % (len(missing), sorted(missing)[:5]))
    dups = set(bd for bd, c in counts.items() if c > 1)
    bad_dups = dups - unsettled_k
    log("duplicates: %d (all must be among K's %d unsettled)" % (len(dups), len(unsettled_k)))
    check(not bad_dups, "%d messages received twice that K did not hold unsettled, e.g. %s"
          % (len(bad_dups), sorted(bad_dups)[:5]))
    check(all(c <= 2 for c in counts.values()), "a message received more than twice")
    redelivered = unsettled_k & set(bd for v in h.streams.values() for (bd, _, _) in v)
    check(redelivered == unsettled_k, "K's unsettled deliveries not all redelivered to others: %d of %d"
          % (len(redelivered), len(unsettled_k)))

    for name in ("A", "B"):
        parts = check_stream(name, h.streams[name])
        log("member %s: partitions %s" % (name, parts))
    log("member K: partitions %s" % check_stream("K", krec))

    log_end = defaultdict(int)
    for (bd, pid, off) in [x for v in h.streams.values() for x in v] + krec:
        log_end[pid] = max(log_end[pid], off + 1)
    log("log end per partition: %s" % dict(sorted(log_end.items())))

    # all consumed, A detached cleanly: a new member gets nothing
    r = receive(b.url, G, idle=3.0, close="link", timeout=30)
    check(not r.got, "after everything was consumed, a new member of g received %d messages, e.g. %s"
          % (len(r.got), r.bodies()[:5]))
    time.sleep(1.5)
    offs = mqdtest.group_offsets(b.data_dir, T, "g")
    log("committed offsets in meta.db: %s" % (offs,))
    if offs is not None:
        check(offs == dict(log_end), "committed offsets %s != log end %s" % (offs, dict(log_end)))
    b.restart(kill=True)
    r = receive(b.url, G, idle=3.0, close="link", timeout=30)
    check(not r.got, "after a broker restart a new member of g received %d messages, e.g. %s"
          % (len(r.got), r.bodies()[:5]))


if __name__ == "__main__":
    mqdtest.main(body, timeout=175)
