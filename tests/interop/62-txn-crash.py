#!/usr/bin/python3
"""Crash loop: SIGKILL the broker at random moments during transactional
consume-transform-produce, restart, and check atomicity and exactly-once.

Rounds (MQD_TXN_ROUNDS, default 20; run 100 for the full acceptance): the test seeds
topic ctpA with 10-60 new messages (non-transactional, acknowledged), starts a client
process and SIGKILLs the broker 0.2-2.5 s later, or (every third round) right after
the client sent its k-th discharge (k random 1..11, + 0-5 ms), the randomness seeded by
MQD_TXN_SEED; then restarts it on the same data dir. The client loops over transactions:

  ctp   take up to 3 messages from ctpA/ConsumerGroups/ctp, accept each under the
        transaction, send each transformed to ctpB (id "b:<A id>") plus one message to
        ctpC, commit (~85 %) or abort;
  ind   (when ctpA is empty) 3 transactional sends to ctpC/Partitions/0..2.

It prints a JSON line per A message received and per discharge that the broker
accepted (commit or abort), with the transaction's contents. Every message carries
properties txn (transaction id of the client), n (its transaction's message count in
that topic).

After each restart a checker browses ctpB and ctpC (distribution-mode copy) and asserts:
  - no torn transaction: a txn's messages in ctpB / ctpC are all visible or none;
  - no aborted transaction's message is visible (discharge(fail=true) accepted);
  - every committed-and-acknowledged transaction is wholly visible;
  - whatever was visible after an earlier restart is still visible;
  - exactly once: each A message's transform is in ctpB at most once, and an A message
    consumed by a committed transaction is never delivered to the group again.
At the end a last client runs without a crash until ctpA is drained and commits: then
every seeded A message has exactly one transform in ctpB.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

A, B, C = "ctpA", "ctpB", "ctpC"
GROUP = A + "/ConsumerGroups/ctp"
ROUNDS = int(os.environ.get("MQD_TXN_ROUNDS", "20"))
SEED = int(os.environ.get("MQD_TXN_SEED", str(int(time.time()) & 0xffff)))
PER_ROUND = 60


# ------------------------------------------------------------------ client process

def client(url, tag, seed, drain):
    from proton import Message, Timeout
    from proton.utils import BlockingConnection
    rnd = random.Random(seed)

    def out(**kw):
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()

    try:
        c = BlockingConnection(url, timeout=10)
        bt = mqdtest.BlockingTxns(c, timeout=10)
        rcv = c.create_receiver(GROUP, credit=10)
        sb = c.create_sender(B)
        sc = [c.create_sender("%s/Partitions/%d" % (C, p)) for p in range(3)]
        n = 0
        idle_since = None
        while True:
            gid = "%s-%d" % (tag, n)
            n += 1
            tid = bt.declare()
            taken = []
            for _ in range(3):
                try:
                    m = rcv.receive(timeout=0.3 if not taken else 0.05)
                except Timeout:
                    break
                d = rcv.fetcher.unsettled.popleft()
                aid = m.id
                out(ev="recv", a=aid, txn=gid)
                taken.append((aid, d))
            ds, bids, cids = [], [], []
            if taken:
                for aid, d in taken:
                    bt.accept(d, tid)
                    bid = "b:%s" % aid
                    bids.append(bid)
                    ds.append(bt.send(sb, Message(id=bid, body=bid, properties={"txn": gid, "n": len(taken),
                                                                                 "src": aid}), tid))
                cid = "c:%s:0" % gid
                cids.append(cid)
                ds.append(bt.send(sc[rnd.randrange(3)], Message(id=cid, body=cid,
                                                                properties={"txn": gid, "n": 1}), tid))
                idle_since = None
            else:
                if drain:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 3.0:
                        bt.discharge(tid, True)
                        break
                for p in range(3):
                    cid = "c:%s:%d" % (gid, p)
                    cids.append(cid)
                    ds.append(bt.send(sc[p], Message(id=cid, body=cid, properties={"txn": gid, "n": 3}), tid))
            res = bt.wait_settled(ds)
            bad = [str(r) for r in res if not mqdtest.txn_outcome_ok(r[0], r[1], tid)]
            abort = (not drain) and rnd.random() < 0.15
            out(ev="discharging", txn=gid, abort=abort)
            ok, st, cond = bt.discharge(tid, abort)
            out(ev=("abort" if abort else "commit") if ok else "discharge-failed", txn=gid,
                a=[x[0] for x in taken], b=bids, c=cids, state=str(st), cond=str(cond) if cond else None,
                bad_sends=bad[:2])
        c.close()
        out(ev="end")
    except Exception as e:  # the broker was killed: that is the point
        out(ev="lost", err="%s: %s" % (type(e).__name__, e))


# ------------------------------------------------------------------ checker side

def browse_all(url, addresses, idle=1.5):
    """{address: [Message]} browsed concurrently (copy) until idle."""
    from proton.reactor import Copy
    res = {}

    class H(mqdtest.Client):
        def __init__(self):
            super().__init__(prefetch=1000, auto_accept=False)
            self.got = {a: [] for a in addresses}
            self.last = time.monotonic()

        def on_start(self, event):
            conn = self.connect(event.container, url)
            self.links = {}
            for a in addresses:
                lk = event.container.create_receiver(conn, a, options=Copy())
                self.links[lk.name] = a
            event.container.schedule(idle, self)

        def on_message(self, event):
            self.last = time.monotonic()
            self.got[self.links[event.link.name]].append(event.message)
            event.delivery.update(event.delivery.ACCEPTED)
            event.delivery.settle()

        def on_timer_task(self, event):
            if time.monotonic() - self.last >= idle:
                self.finish()
            else:
                event.container.schedule(0.2, self)

    h = H()
    mqdtest.run_container(h, 60)
    res.update(h.got)
    return res


class State:
    def __init__(self):
        self.seeded = []             # A ids
        self.committed = {}          # gid -> commit line (acknowledged)
        self.aborted = {}            # gid -> abort line (acknowledged)
        self.consumed = set()        # A ids consumed by committed txns (acked or visible)
        self.prev_visible = set()    # B/C ids visible after the previous restart
        self.anomalies = []
        self.errors = set()          # exception types of clients that lost the broker
        self.stats = {"commit": 0, "abort": 0, "uncertain": 0, "lost": 0, "recv": 0}

    def anomaly(self, rnd, msg):
        s = "round %s: %s" % (rnd, msg)
        log("ANOMALY " + s)
        self.anomalies.append(s)


def process_client_output(st, rnd, text):
    uncertain = []
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            st.anomaly(rnd, "client printed %r" % line[:200])
            continue
        e = ev["ev"]
        if e == "recv":
            st.stats["recv"] += 1
            if ev["a"] in st.consumed:
                st.anomaly(rnd, "A message %s delivered to the group again (txn %s) after a committed "
                           "transaction consumed it" % (ev["a"], ev["txn"]))
        elif e == "commit":
            st.stats["commit"] += 1
            st.committed[ev["txn"]] = ev
            st.consumed.update(ev["a"])
            if ev["bad_sends"]:
                st.anomaly(rnd, "txn %s: transactional sends settled with %s" % (ev["txn"], ev["bad_sends"]))
        elif e == "abort":
            st.stats["abort"] += 1
            st.aborted[ev["txn"]] = ev
        elif e == "discharging":
            uncertain.append(ev["txn"])
        elif e == "discharge-failed":
            st.anomaly(rnd, "txn %s: discharge(fail=false) with the broker up: %s %s"
                       % (ev["txn"], ev["state"], ev["cond"]))
        elif e == "lost":
            st.stats["lost"] += 1
            st.errors.add(ev["err"].split(":")[0])
    st.stats["uncertain"] += sum(1 for g in uncertain if g not in st.committed and g not in st.aborted)


def check_visible(st, rnd, url):
    got = browse_all(url, [B, C])
    by_txn = {}   # (topic, gid) -> [ids]
    ids = set()
    bsrc = {}     # A id -> count of transforms
    for topic in (B, C):
        for m in got[topic]:
            p = m.properties or {}
            gid = p.get("txn")
            by_txn.setdefault((topic, gid), []).append((m.id, p.get("n")))
            if m.id in ids:
                st.anomaly(rnd, "%s: message %s visible twice" % (topic, m.id))
            ids.add(m.id)
            if topic == B:
                bsrc[p.get("src")] = bsrc.get(p.get("src"), 0) + 1
    visible_txns = set(g for (_, g) in by_txn)
    for (topic, gid), lst in by_txn.items():
        n = lst[0][1]
        if len(lst) != n:
            st.anomaly(rnd, "torn transaction %s: %d of %d messages visible in %s: %s" % (gid, len(lst), n, topic,
                                                                                         [x[0] for x in lst]))
        if gid in st.aborted:
            st.anomaly(rnd, "aborted transaction %s visible in %s: %s" % (gid, topic, [x[0] for x in lst]))
    for gid in visible_txns:
        # a consume-transform-produce txn has one message in C besides its B messages
        if (B, gid) in by_txn and (C, gid) not in by_txn:
            st.anomaly(rnd, "transaction %s visible in %s but not in %s" % (gid, B, C))
    for gid, ev in st.committed.items():
        for mid in ev["b"] + ev["c"]:
            if mid not in ids:
                st.anomaly(rnd, "committed-and-acknowledged transaction %s: %s not visible" % (gid, mid))
    # uncommitted-unacknowledged txns that became visible: treat as committed from now on
    for (topic, gid), lst in by_txn.items():
        if topic == B and gid not in st.committed:
            for mid, _ in lst:
                st.consumed.add(mid[2:])
    for src, k in bsrc.items():
        if k > 1:
            st.anomaly(rnd, "A message %s transformed into %s %d times (exactly-once broken)" % (src, B, k))
    lost = st.prev_visible - ids
    if lost:
        st.anomaly(rnd, "%d message(s) visible after an earlier restart are gone: %s" % (len(lost), sorted(lost)[:5]))
    st.prev_visible = ids
    return got, bsrc


def body(t):
    from proton import Message
    log("rounds %d, seed %d" % (ROUNDS, SEED))
    rnd = random.Random(SEED)
    sets = {"topic.%s.partitions" % A: 2, "topic.%s.partitions" % B: 2, "topic.%s.partitions" % C: 3}
    b = t.broker(sets=sets)
    st = State()
    me = os.path.abspath(__file__)
    t_start = time.monotonic()
    for r in range(ROUNDS + 1):
        final = r == ROUNDS
        if not final:
            ids = ["a-%d-%d" % (r, i) for i in range(rnd.randrange(10, PER_ROUND + 1))]
            mqdtest.send(b.url, A, [Message(id=x, body=x) for x in ids])
            st.seeded.extend(ids)
        outp = os.path.join(t.tmpdir, "client%d.out" % r)
        with open(outp, "w") as f:
            cp = t.spawn([sys.executable, me, "--client", b.url, "r%d" % r, str(rnd.randrange(1 << 30)),
                          "drain" if final else "crash"], stdout=f, stderr=subprocess.STDOUT)
        if final:
            try:
                cp.wait(timeout=90)
            except subprocess.TimeoutExpired:
                mqdtest.fail("the final draining client did not finish within 90 s")
        else:
            if r % 3 == 2:
                # aim at the commit window: kill just after the k-th discharge was sent
                k = rnd.randrange(1, 12)
                pause = rnd.choice([0, 0, 0.0005, 0.001, 0.002, 0.005])
                t1 = time.monotonic()
                while time.monotonic() - t1 < 6.0 and cp.poll() is None:
                    with open(outp) as f:
                        if f.read().count('"ev": "discharging"') >= k:
                            break
                    time.sleep(0.0005)
                time.sleep(pause)
                delay = time.monotonic() - t1
                how = "at discharge %d +%.1fms" % (k, pause * 1000)
            else:
                delay = rnd.uniform(0.2, 2.5)
                time.sleep(delay)
                how = "after %.2fs" % delay
            b.kill()
            try:
                cp.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(cp.pid, signal.SIGKILL)
                cp.wait(timeout=10)
                st.anomaly(r, "client did not notice the broker's death within 30 s")
            b.start()
        with open(outp) as f:
            text = f.read()
        process_client_output(st, r, text)
        if final:
            check(text.strip().endswith('{"ev": "end"}'), "final client did not end cleanly: %s" % text[-500:])
        got, bsrc = check_visible(st, r, b.url)
        log("round %d%s: %d commits / %d aborts acknowledged so far, %d visible in %s, %d in %s, %d anomalies"
            % (r, " (final, no crash)" if final else " (killed %s)" % how, st.stats["commit"],
               st.stats["abort"], len(got[B]), B, len(got[C]), C, len(st.anomalies)))
    # exactly once over the whole run: every seeded A message transformed once
    missing = [a for a in st.seeded if bsrc.get(a, 0) == 0]
    if missing:
        st.anomaly("end", "%d seeded A messages never transformed into %s: %s" % (len(missing), B, missing[:10]))
    log("RESULT: %d crash rounds (+1 final), %d s, %d txns committed+acked, %d aborted, %d with unknown outcome, "
        "%d A messages consumed, %d anomalies" % (ROUNDS, time.monotonic() - t_start, st.stats["commit"],
                                                  st.stats["abort"], st.stats["uncertain"], len(st.seeded),
                                                  len(st.anomalies)))
    log("client exceptions at the kills: %s" % sorted(st.errors))
    check(not st.anomalies, "%d anomalies:\n  %s" % (len(st.anomalies), "\n  ".join(st.anomalies[:30])))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "drain")
    else:
        mqdtest.main(body, timeout=min(7200, 60 + ROUNDS * 12))
