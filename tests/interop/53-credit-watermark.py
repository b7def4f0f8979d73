#!/usr/bin/python3
"""Link credit and the disk watermark (issue 16, points 2 and 6).

(a) Credit is enforced (AMQP 1.0 2.6.7). A raw producer is granted N = link_credit
    credit by mqd; a forged flow frame fed into its own Proton transport makes it believe
    it has N + K, and it sends N + K transfers in one TCP write. mqd must store and
    accept exactly the first N (counted with a receiver: bodies and offsets 0..N-1),
    detach the link with amqp:link:transfer-limit-exceeded and accept none of the K,
    while a bystander client keeps doing round trips. The same for messages of two
    frames each (a delivery counts once), for the anonymous relay link, $management
    and the transaction coordinator (granted 100). An honest sender of multi-frame messages gets all of its 3 N through.
(b) The disk watermark (needs root to mount a 64 MiB tmpfs; else exit 77 after (a)).
    With disk_free_limit = 24 MiB, a producer of 512 KiB messages with 1,000 credit
    cannot carry the free space below disk_free_limit - BOUND (statvfs sampled every
    20 ms); meanwhile, with the watermark hit, `mqctl status`, `mqctl topic describe T`,
    a transaction's declare and discharge, and `mqctl topic delete T` succeed, and after the delete producers get through. The
    lone producer is never refused (it waits for credit). Then three producers at once
    (each link gets a share of the headroom): still within the
    bound, what the store refuses (if anything) carries amqp:resource-limit-exceeded."""

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, Collect, check, log  # noqa: E402

from proton import Data, Delivery, Endpoint, Message, Terminus  # noqa: E402
from proton.utils import BlockingConnection  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bad_input", os.path.join(os.path.dirname(os.path.abspath(__file__)), "10-bad-input.py"))
bad_input = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bad_input)
Bystander, frame = bad_input.Bystander, bad_input.frame


_hspec = importlib.util.spec_from_file_location(
    "hostile", os.path.join(os.path.dirname(os.path.abspath(__file__)), "50-hostile.py"))
hostile = importlib.util.module_from_spec(_hspec)
_hspec.loader.exec_module(hostile)
# 50-hostile's raw client: it takes input larger than the transport's capacity (a burst of
# dispositions can exceed its input buffer)
RawAmqp = hostile.RawAmqp


N = 20          # link_credit of broker (a)
K = 10          # transfers sent beyond it
FRAME = 512     # broker (a)'s max_frame_size: a 700-byte body takes two frames
TMPFS_MIB = 64
LIMIT_MIB = 24  # disk_free_limit of broker (b)
MSG = 512 * 1024
BOUND = 1 << 20  # free space may fall at most this far below disk_free_limit (b)


# ---------------------------------------------------------------- (a) credit

def forged_flow(credit, channel=0, handle=0):
    """A flow frame as mqd would send it for its first receiving link (channel 0, handle
    0) with `credit` and delivery-count 0, and a wide session window."""
    d = Data()
    d.put_described()
    d.enter()
    d.put_ulong(0x13)
    d.put_list()
    d.enter()
    d.put_null()          # next-incoming-id: none, so incoming-window is taken as is
    d.put_uint(1 << 20)   # incoming-window
    d.put_uint(0)         # next-outgoing-id
    d.put_uint(1 << 20)   # outgoing-window
    d.put_uint(handle)
    d.put_uint(0)         # delivery-count
    d.put_uint(credit)    # link-credit
    d.exit()
    d.exit()
    return frame(d.encode(), 0, channel)


def flush_once(r):
    """Everything the client's transport has to send, in one sendall (one TCP segment
    on loopback for what these cases send): mqd decodes it all before it writes again."""
    out = b""
    while r.t.pending() > 0:
        chunk = r.t.peek(r.t.pending())
        out += chunk
        r.t.pop(len(chunk))
    r.sock.sendall(out)
    return len(out)


def over_credit(b, name, target, body_len, to=None, credit=N, coordinator=False):
    """Sends credit + K transfers on a link granted `credit`; returns (accepted indices,
    other outcomes, link condition, bytes written)."""
    r = RawAmqp(b.port)
    # room for the whole burst at once, so it goes out as one segment
    r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    r.open()
    ssn = r.c.session()
    ssn.open()
    snd = ssn.sender(name)
    snd.target.address = target
    if coordinator:
        snd.target.type = Terminus.COORDINATOR
    snd.open()
    check(r.pump(lambda: snd.credit == credit or r.closed_by_peer, timeout=10),
          "%s: mqd did not grant %d credit (credit %d)" % (name, credit, snd.credit))
    r.t.push(forged_flow(credit + K))
    check(snd.credit == credit + K, "%s: forged flow gave credit %d, want %d"
          % (name, snd.credit, credit + K))
    dlvs = []
    for i in range(credit + K):
        m = Message(body="%s-%d-" % (name, i) + "x" * body_len, address=to)
        d = snd.delivery(str(i))
        snd.send(m.encode())
        snd.advance()
        dlvs.append(d)
    wrote = flush_once(r)
    closed = lambda: snd.state & Endpoint.REMOTE_CLOSED  # noqa: E731
    settled_n = lambda: sum(1 for d in dlvs if d.remote_state)  # noqa: E731
    r.pump(lambda: closed() and settled_n() >= credit or r.closed_by_peer, timeout=15)
    r.pump(lambda: False, timeout=0.5)  # anything late would show here
    cond = snd.remote_condition
    acc = [i for i, d in enumerate(dlvs) if d.remote_state == Delivery.ACCEPTED]
    other = [(i, d.remote_state) for i, d in enumerate(dlvs)
             if d.remote_state and d.remote_state != Delivery.ACCEPTED]
    check(not r.closed_by_peer, "%s: mqd closed the connection (%s): %s"
          % (name, r.closed_by_peer, r.c.remote_condition))
    snd.close()
    r.pump(lambda: snd.state & Endpoint.LOCAL_CLOSED and closed(), timeout=5)
    r.sock.close()
    log("%s: %d transfers (%d bytes in one write): accepted %d (%s..%s), other %r, "
        "link condition %s" % (name, credit + K, wrote, len(acc), acc[:1], acc[-1:], other[:3], cond))
    return acc, other, cond, wrote


def stored(b, address):
    """(bodies, offsets) of everything stored in topic `address`."""
    rcv = mqdtest.receive(b.url, address, idle=3.0 * mqdtest.SLOW, timeout=60)
    offs = [mqdtest.ann(m, "x-opt-sequence-number") for m in rcv.got]
    return [m.body for m in rcv.got], offs


def check_exceeded(name, acc, cond, want_accepted=True):
    check(cond is not None and cond.name == "amqp:link:transfer-limit-exceeded",
          "%s: link condition %s, want amqp:link:transfer-limit-exceeded" % (name, cond))
    if want_accepted:
        check(acc == list(range(N)), "%s: accepted %d transfers %s, want exactly the first %d"
              % (name, len(acc), acc[:3] + ["..."] + acc[-3:], N))


def check_stored(b, name, topic):
    bodies, offs = stored(b, topic)
    names = [s.rstrip("x") if isinstance(s, str) else s for s in bodies]
    want = ["%s-%d-" % (name, i) for i in range(N)]
    log("%s: topic %s holds %d messages, offsets %s..%s" % (name, topic, len(bodies),
                                                           offs[:1], offs[-1:]))
    check(len(bodies) == N, "%s: topic %s holds %d messages, want %d (credit)" % (name, topic, len(bodies), N))
    check(names == want, "%s: stored %r..., want %r..." % (name, names[:3], want[:3]))
    check(offs == list(range(N)), "%s: offsets %s..., want 0..%d" % (name, offs[:5], N - 1))


def part_a(t, coll):
    b = t.broker(name="credit", sets={"link_credit": N, "max_frame_size": FRAME, "disk_free_limit": 0})
    by = Bystander(b.url)
    by.start()
    try:
        with coll.case("single-frame transfers beyond credit"):
            acc, other, cond, _ = over_credit(b, "small", "credit-small", 50)
            check_exceeded("small", acc, cond)
            check_stored(b, "small", "credit-small")
        with coll.case("two-frame transfers beyond credit (a delivery counts once)"):
            acc, other, cond, wrote = over_credit(b, "big", "credit-big", 700)
            check(wrote > (N + K) * 700, "big: wrote only %d bytes" % wrote)
            check_exceeded("big", acc, cond)
            check_stored(b, "big", "credit-big")
        with coll.case("anonymous relay beyond credit"):
            acc, other, cond, _ = over_credit(b, "relay", None, 50, to="credit-relay")
            check_exceeded("relay", acc, cond)
            check_stored(b, "relay", "credit-relay")
        with coll.case("$management beyond credit"):
            # requests without reply-to: each is rejected, then the link is detached
            acc, other, cond, _ = over_credit(b, "mgmt", "$management", 10)
            check_exceeded("mgmt", acc, cond, want_accepted=False)
            done = sorted(acc + [i for i, _ in other])
            check(done == list(range(N)), "mgmt: outcomes for requests %s, want the first %d only"
                  % (done[:3] + ["..."] + done[-3:], N))
        with coll.case("transaction coordinator beyond credit"):
            # not declares: each is refused; mqd grants the coordinator 100 at attach
            acc, other, cond, _ = over_credit(b, "coord", None, 10, credit=100, coordinator=True)
            check_exceeded("coord", acc, cond, want_accepted=False)
            done = sorted(acc + [i for i, _ in other])
            check(done == list(range(100)), "coord: outcomes for %d transfers, want the first 100 only"
                  % len(done))
        with coll.case("honest sender, two-frame messages: all through"):
            msgs = [Message(body="honest-%d-" % i + "y" * 1500) for i in range(3 * N)]
            s = mqdtest.send(b.url, "credit-honest", msgs, timeout=60)
            check(s.link_condition is None, "honest sender's link closed: %s" % s.link_condition)
            bodies, offs = stored(b, "credit-honest")
            check(len(bodies) == 3 * N and offs == list(range(3 * N)),
                  "honest: %d stored, want %d" % (len(bodies), 3 * N))
    finally:
        by.stop_flag = True
        by.join(30)
    check(by.error is None, "bystander saw an error: %s" % by.error)
    check(by.rounds > 0, "the bystander made no round trip")
    log("bystander: %d round trips, no error" % by.rounds)
    b.check_alive("after the credit cases")


# ---------------------------------------------------------------- (b) disk watermark

def free_bytes(path):
    v = os.statvfs(path)
    return v.f_bavail * v.f_frsize


class DiskProducer(Client):
    """Sends 512 KiB messages to `address` as fast as credit allows, until told to stop
    or `cap` are sent; counts outcomes."""

    def __init__(self, url, address, cap):
        super().__init__()
        self.url, self.address, self.cap = url, address, cap
        self.sent = self.accepted = self.rejected = 0
        self.conditions = set()
        self.last_progress = time.monotonic()
        self.stop = False
        self.link_cond = None
        self.body = b"z" * MSG

    def on_start(self, event):
        self.container = event.container
        self.sender = event.container.create_sender(self.connect(event.container, self.url), self.address)
        event.container.schedule(0.1, self)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < self.cap and not self.stop:
            event.sender.send(Message(body=self.body))
            self.sent += 1
            self.last_progress = time.monotonic()

    def on_accepted(self, event):
        self.accepted += 1
        self.last_progress = time.monotonic()

    def on_rejected(self, event):
        self.rejected += 1
        c = event.delivery.remote.condition
        self.conditions.add(c.name if c else None)
        self.last_progress = time.monotonic()

    def on_link_error(self, event):
        self.link_cond = event.link.remote_condition
        self.finish()

    def on_timer_task(self, event):
        if self.stop:
            self.finish()
        else:
            event.container.schedule(0.1, self)


class Sampler(threading.Thread):
    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.min_free, self.halt, self.n = path, None, False, 0

    def run(self):
        while not self.halt:
            f = free_bytes(self.path)
            self.min_free = f if self.min_free is None else min(self.min_free, f)
            self.n += 1
            time.sleep(0.02)


def near_limit(mnt, limit, producers=1):
    """Producers stop with each one's share of half the headroom under a message (512 KiB),
    so within 2 x producers messages of the limit (plus what was let in meanwhile)."""
    return free_bytes(mnt) < limit + (2 * producers + 2) * MSG + BOUND


def wait_stalled(prods, threads, mnt, limit):
    """Until the producers made no progress for 3 s with the free space near the limit
    (bounded: 90 s). One that attaches late may get no credit at all near the limit."""
    deadline = time.monotonic() + 90 * mqdtest.SLOW
    while time.monotonic() < deadline and all(th.is_alive() for th in threads):
        quiet = time.monotonic() - max(p.last_progress for p in prods)
        if any(p.sent for p in prods) and quiet > 3 * mqdtest.SLOW and \
                near_limit(mnt, limit, len(prods)):
            return
        time.sleep(0.1)


def many_producers(b, mnt, limit):
    prods = [DiskProducer(b.url, "disk-m", cap=2 * TMPFS_MIB * 2) for _ in range(3)]
    threads = [threading.Thread(target=mqdtest.run_container, args=(p, 300), daemon=True) for p in prods]
    for th in threads:
        th.start()
    try:
        wait_stalled(prods, threads, mnt, limit)
        log("3 producers stalled: sent %s, accepted %s, rejected %s, credit %s (%s); free %.2f MiB"
            % ([p.sent for p in prods], [p.accepted for p in prods], [p.rejected for p in prods],
               [p.sender.credit if hasattr(p, "sender") else None for p in prods],
               set().union(*[p.conditions for p in prods]), free_bytes(mnt) / 2 ** 20))
        check(near_limit(mnt, limit, 3), "3 producers stopped with %.1f MiB free, far above the limit"
              % (free_bytes(mnt) / 2 ** 20))
        conds = set().union(*[p.conditions for p in prods])
        check(conds <= {"amqp:resource-limit-exceeded"}, "refusals carried %s" % conds)
    finally:
        for p in prods:
            p.stop = True
        for th in threads:
            th.join(30)
    rc, out, _ = mqdtest.mqctl(b.url, "topic", "delete", "disk-m")
    check(rc == 0, "mqctl topic delete disk-m at the watermark: rc %d %r" % (rc, out[:200]))


def mount_tmpfs(path):
    if os.geteuid() != 0:
        return "not root"
    os.makedirs(path, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % TMPFS_MIB, "tmpfs", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    return None if p.returncode == 0 else "mount failed: %s" % p.stdout.decode().strip()


def part_b(t, coll, mnt):
    limit = LIMIT_MIB << 20
    b = t.broker(name="disk", data_dir=os.path.join(mnt, "data"),
                 sets={"disk_free_limit": "%dMiB" % LIMIT_MIB})
    sampler = Sampler(mnt)
    sampler.start()
    prod = DiskProducer(b.url, "disk-t", cap=2 * TMPFS_MIB * 2)  # twice what the tmpfs holds
    err = []

    def run_prod():
        try:
            mqdtest.run_container(prod, timeout=300)
        except Exception as e:  # reported below
            err.append(e)
    th = threading.Thread(target=run_prod, daemon=True)
    th.start()
    try:
        wait_stalled([prod], [th], mnt, limit)
        free_hit = free_bytes(mnt)
        log("producer stalled: sent %d, accepted %d, rejected %d; free %.1f MiB (limit %d MiB, "
            "lowest %.1f MiB)" % (prod.sent, prod.accepted, prod.rejected, free_hit / 2 ** 20,
                                 LIMIT_MIB, sampler.min_free / 2 ** 20))
        check(th.is_alive(), "the producer ended early: %s %s" % (err, prod.link_cond))
        check(prod.accepted > 4, "only %d messages accepted before the stall" % prod.accepted)
        with coll.case("a lone producer waits for credit instead of being refused"):
            check(prod.rejected == 0, "%d of %d sends refused" % (prod.rejected, prod.sent))
        check(free_hit < limit + 4 * MSG + BOUND, "stalled with %.1f MiB free, far above the limit"
              % (free_hit / 2 ** 20))
        with coll.case("free space stays within the bound while the producer pushes"):
            check(sampler.min_free >= limit - BOUND,
                  "free space fell to %.2f MiB, below disk_free_limit %d MiB - %.1f MiB"
                  % (sampler.min_free / 2 ** 20, LIMIT_MIB, BOUND / 2 ** 20))
        with coll.case("mqctl works at the watermark"):
            rc, out, _ = mqdtest.mqctl(b.url, "status")
            check(rc == 0 and "version" in out, "mqctl status at the watermark: rc %d %r" % (rc, out[:200]))
            rc, out, _ = mqdtest.mqctl(b.url, "--json", "topic", "describe", "disk-t")
            check(rc == 0 and '"disk-t"' in out, "mqctl topic describe at the watermark: rc %d %r"
                  % (rc, out[:200]))
            # the coordinator too keeps working (a small window; it stores no messages)
            conn = BlockingConnection(b.url, timeout=20 * mqdtest.SLOW)
            try:
                bt = mqdtest.BlockingTxns(conn)
                ok, st, cond = bt.discharge(bt.declare(), fail=False)
                check(ok, "declare + discharge at the watermark: %s %s" % (st, cond))
            finally:
                conn.close()
            # a topic with attached links is refused (409): the operator stops its producer
            prod.stop = True
            th.join(30 * mqdtest.SLOW)
            check(not th.is_alive(), "the stalled producer did not close")
            check(near_limit(mnt, limit), "the watermark cleared by itself")
            rc, out, _ = mqdtest.mqctl(b.url, "topic", "delete", "disk-t")
            check(rc == 0 and out.strip() == "deleted topic disk-t",
                  "mqctl topic delete at the watermark: rc %d %r" % (rc, out[:200]))
            freed = free_bytes(mnt)
            log("after the delete: free %.1f MiB" % (freed / 2 ** 20))
            check(freed > limit + 8 * MSG, "the delete left %.1f MiB free" % (freed / 2 ** 20))
        with coll.case("producers resume after the delete"):
            s = mqdtest.send(b.url, "disk-t", [Message(body=b"r" * MSG) for _ in range(8)], timeout=60)
            log("after the delete: %d of 8 messages of 512 KiB accepted" % s.accepted)
        with coll.case("three producers at once: the store refuses what credit would overrun"):
            many_producers(b, mnt, limit)
        with coll.case("free space within the bound after resuming"):
            check(sampler.min_free >= limit - BOUND, "free space fell to %.2f MiB"
                  % (sampler.min_free / 2 ** 20))
        log("lowest free space seen: %.2f MiB (%d samples); disk_free_limit %d MiB, bound %.1f MiB"
            % (sampler.min_free / 2 ** 20, sampler.n, LIMIT_MIB, BOUND / 2 ** 20))
    finally:
        prod.stop = True
        th.join(30)
        sampler.halt = True
        sampler.join(5)
        b.stop()
    check(b.proc.returncode == 0, "broker (b) exited with %s" % b.proc.returncode)


def body(t):
    coll = Collect()
    part_a(t, coll)
    mnt = os.path.join(t.tmpdir, "tmpfs")
    why = mount_tmpfs(mnt)
    if why:
        coll.finish()
        mqdtest.skip("(a) passed; (b) needs a tmpfs: %s" % why)
    try:
        part_b(t, coll, mnt)
    finally:
        for b in t.brokers:
            if b.alive():
                b.stop()
        p = subprocess.run(["umount", mnt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        if p.returncode != 0:
            log("umount %s: %s; lazy unmount" % (mnt, p.stdout.decode().strip()))
            subprocess.run(["umount", "-l", mnt], timeout=30)
    coll.finish()


if __name__ == "__main__":
    socket.setdefaulttimeout(None)
    mqdtest.main(body, timeout=400)
