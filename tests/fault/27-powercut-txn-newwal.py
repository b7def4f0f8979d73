#!/usr/bin/python3
"""Committed transactions across power cuts when the process that commits them made a new
metadata WAL (issue 32, point 3).

Setup: mqd declares two topics (txA, txB, 2 partitions each; one plain message in each
partition, so that no start finds an empty partition: that start would fsync the data
dir on its way and hide the case). Then ROUNDS rounds (MQD_TXN_ROUNDS, default 20) of:
stop mqd cleanly (SQLite checkpoints and deletes meta.db-wal; every fourth round SIGKILL
instead, then the start cuts power and finds the WAL the last process left), start it
(a new WAL), commit transactions of 6 messages (3 to txA, 3 to txB) one after another
for 1-3 s (one client connection; two in every third round, so that both the loop's
inline sync and the sync thread are used), SIGKILL, cut power (plain and torn in turn:
mqdtest's MQD_TEST_POWERCUT=torn), remount, start. In odd rounds the committing process
runs with SQLite's own directory syncs dropped (tests/fault/nodirsync.so, as a SQLite
built with SQLITE_DISABLE_DIRSYNC): then only mqd's own sync of the data dir makes the
new WAL's name durable. After each restart the messages written since the last check are
browsed (distribution-mode copy, from the last visible offset of each partition) and:
  - every acknowledged commit of the round is visible, all 6 messages, each once;
  - no transaction is torn (a visible transaction has 6 of 6 messages);
  - the last message seen at the previous check is still at its offset (nothing before
    it was cut), and no transaction of an earlier round appears late.
Every 25th round (MQD_TXN_FULL_EVERY) and at the end both topics are browsed whole:
every acknowledged commit of the run exactly once, nothing torn, nothing duplicated.
The randomness is seeded by MQD_TXN_SEED. Needs root and FUSE (else exit 77)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

os.environ["MQD_TEST_POWERCUT"] = "torn"  # before mqdtest reads it: cut, cut-torn, cut, ...
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
sys.path.insert(0, HERE)
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

TOPICS = ("txA", "txB")
NPARTS = 2
PER_TOPIC = 3
ROUNDS = int(os.environ.get("MQD_TXN_ROUNDS", "20"))
SEED = int(os.environ.get("MQD_TXN_SEED", str(int(time.time()) & 0xffff)))
FULL_EVERY = int(os.environ.get("MQD_TXN_FULL_EVERY", "25"))
SHIM = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "tests", "fault", "nodirsync.so")


# ------------------------------------------------------------------ client process

def client(url, tag):
    """Commits 6-message transactions until the broker goes away; one JSON line per
    acknowledged commit."""
    from proton import Message
    from proton.utils import BlockingConnection

    def out(**kw):
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()

    try:
        c = BlockingConnection(url, timeout=10)
        bt = mqdtest.BlockingTxns(c, timeout=10)
        snd = {t: c.create_sender(t) for t in TOPICS}
        out(ev="ready")
        n = 0
        while True:
            gid = "%s-%d" % (tag, n)
            n += 1
            tid = bt.declare()
            ds = []
            for t in TOPICS:
                for i in range(PER_TOPIC):
                    mid = "%s:%s:%d" % (gid, t, i)
                    ds.append(bt.send(snd[t], Message(id=mid, body=mid, properties={"txn": gid}), tid))
            res = bt.wait_settled(ds)
            bad = [str(r) for r in res if not mqdtest.txn_outcome_ok(r[0], r[1], tid)]
            out(ev="discharging", txn=gid)
            ok, st, cond = bt.discharge(tid, False)
            out(ev="commit" if ok and not bad else "failed", txn=gid, state=str(st),
                cond=str(cond) if cond else None, bad=bad[:2])
    except Exception as e:  # the broker was killed: that is the point
        out(ev="lost", err="%s: %s" % (type(e).__name__, e))


# ------------------------------------------------------------------ checker side

def browse(url, addresses, selectors=None, idle=1.5, timeout=600):
    """{address: [(offset, Message)]} browsed (copy) until `idle` seconds (times
    MQD_TEST_SLOW) pass without a message; selectors[address] is an optional start
    filter."""
    from proton.reactor import Copy, Selector
    idle *= mqdtest.SLOW

    class H(mqdtest.Client):
        def __init__(self):
            super().__init__(prefetch=2000, auto_accept=False)
            self.got = {a: [] for a in addresses}
            self.last = time.monotonic()

        def on_start(self, event):
            conn = self.connect(event.container, url)
            self.links = {}
            for a in addresses:
                opts = [Copy()]
                if selectors and selectors.get(a):
                    opts.append(Selector(selectors[a]))
                lk = event.container.create_receiver(conn, a, options=opts)
                self.links[lk.name] = a
            event.container.schedule(idle, self)

        def on_message(self, event):
            self.last = time.monotonic()
            off = int(mqdtest.ann(event.message, "x-opt-offset", "-1"))
            self.got[self.links[event.link.name]].append((off, event.message))
            event.delivery.update(event.delivery.ACCEPTED)
            event.delivery.settle()

        def on_timer_task(self, event):
            if time.monotonic() - self.last >= idle:
                self.finish()
            else:
                event.container.schedule(0.2, self)

    h = H()
    mqdtest.run_container(h, timeout)  # fails the test on a link or connection error
    return h.got


def part_addrs():
    return ["%s/ConsumerGroups/chk/Partitions/%d" % (t, p) for t in TOPICS for p in range(NPARTS)]


def round_of(gid):
    return int(gid[1:].split("c", 1)[0])


class State:
    def __init__(self):
        self.committed = {}      # gid -> round (acknowledged)
        self.uncertain = set()   # discharge sent, no answer
        self.visible = set()     # gids seen whole at a check
        self.last = {}           # address -> (offset, id) of the last visible message
        self.anomalies = []
        self.stats = {"commit": 0, "lost_commits": 0, "torn": 0, "dup": 0}
        self.lost_rounds = []

    def anomaly(self, rnd, msg):
        s = "round %s: %s" % (rnd, msg)
        log("ANOMALY " + s)
        if len(self.anomalies) < 200:
            self.anomalies.append(s)


def read_client(st, rnd, text):
    acked = []
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            st.anomaly(rnd, "client printed %r" % line[:200])
            continue
        e = ev["ev"]
        if e == "commit":
            st.committed[ev["txn"]] = rnd
            st.uncertain.discard(ev["txn"])
            acked.append(ev["txn"])
        elif e == "discharging":
            st.uncertain.add(ev["txn"])
        elif e == "failed":
            st.anomaly(rnd, "txn %s not committed with the broker up: %s %s %s"
                       % (ev["txn"], ev["state"], ev["cond"], ev["bad"]))
    st.stats["commit"] += len(acked)
    return acked


def group_visible(got):
    """gid -> [(address, offset, id)] of what was browsed; duplicates listed."""
    by = {}
    seen = {}
    dups = []
    for a, lst in got.items():
        for off, m in lst:
            if str(m.id).startswith("seed-"):
                continue  # the setup's plain messages
            gid = (m.properties or {}).get("txn")
            by.setdefault(gid, []).append((a, off, m.id))
            if m.id in seen:
                dups.append((m.id, seen[m.id], (a, off)))
            seen[m.id] = (a, off)
    return by, dups


def check_round(st, rnd, url, acked):
    sels = {}
    for a, (off, _) in st.last.items():
        sels[a] = "amqp.annotation.x-opt-offset >= '%d'" % off
    got = browse(url, part_addrs(), sels)
    # the last message of the previous check is still where it was
    for a, (off, mid) in st.last.items():
        lst = got[a]
        if not lst or lst[0][0] != off or lst[0][1].id != mid:
            st.anomaly(rnd, "%s: the last message seen before (%s at offset %d) is gone: first now %s"
                       % (a, mid, off, (lst[0][0], lst[0][1].id) if lst else None))
        else:
            got[a] = lst[1:]
    by, dups = group_visible(got)
    for mid, first, second in dups:
        st.stats["dup"] += 1
        st.anomaly(rnd, "message %s visible twice (%s and %s)" % (mid, first, second))
    for gid, msgs in by.items():
        if gid is None or len(msgs) != len(TOPICS) * PER_TOPIC:
            st.stats["torn"] += 1
            st.anomaly(rnd, "torn transaction %s: %d of %d messages visible: %s"
                       % (gid, len(msgs), len(TOPICS) * PER_TOPIC, sorted(x[2] for x in msgs)))
        if gid is not None and round_of(gid) != rnd:
            st.anomaly(rnd, "transaction %s of round %d became visible only now" % (gid, round_of(gid)))
        st.visible.add(gid)
    lost = [g for g in acked if g not in by]
    if lost:
        st.stats["lost_commits"] += len(lost)
        st.lost_rounds.append(rnd)
        st.anomaly(rnd, "%d of %d acknowledged commits of the round are not visible (first %s)"
                   % (len(lost), len(acked), lost[:3]))
    late = len([g for g in by if g in st.uncertain])
    for a, lst in got.items():
        if lst:
            st.last[a] = (lst[-1][0], lst[-1][1].id)
    return len(by), late


def check_all(st, rnd, url):
    got = browse(url, part_addrs())
    by, dups = group_visible(got)
    n_msgs = sum(len(v) for v in got.values())
    for mid, first, second in dups:
        st.anomaly(rnd, "full check: message %s visible twice (%s and %s)" % (mid, first, second))
    for gid, msgs in by.items():
        if gid is None or len(msgs) != len(TOPICS) * PER_TOPIC:
            st.anomaly(rnd, "full check: torn transaction %s: %d messages" % (gid, len(msgs)))
        elif gid not in st.visible:
            st.anomaly(rnd, "full check: transaction %s visible now but not at its round's check" % gid)
    missing = [g for g in st.committed if g not in by]
    if missing:
        st.anomaly(rnd, "full check: %d acknowledged commits missing (first %s)" % (len(missing), missing[:3]))
    gone = [g for g in st.visible if g not in by]
    if gone:
        st.anomaly(rnd, "full check: %d transactions seen before are gone (first %s)" % (len(gone), gone[:3]))
    log("full check after round %d: %d messages, %d transactions visible, %d acknowledged"
        % (rnd, n_msgs, len(by), len(st.committed)))


def known_at_start(b):
    """The broker's 'N committed transactions known' line of its last start, or None."""
    try:
        with open(b.logs[-1], "rb") as f:
            for ln in f.read().decode("utf-8", "replace").splitlines():
                if "committed transactions known" in ln:
                    return ln.split("txn:", 1)[-1].strip()
    except OSError:
        pass
    return None


def start(b, shim):
    """Starts b (after a power cut if it was SIGKILLed), with SQLite's directory syncs
    dropped (tests/fault/nodirsync.so) when shim is set."""
    if shim:
        os.environ["LD_PRELOAD"] = SHIM
    try:
        b.start()
    finally:
        os.environ.pop("LD_PRELOAD", None)


def run_clients(t, b, st, rnd, rng):
    """Commits from 1 or 2 client processes for 1-3 s, then SIGKILLs b; the clients'
    output files, the delay and what a cut would undo at the kill."""
    nconn = 2 if rnd % 3 == 2 else 1
    outs, procs = [], []
    for k in range(nconn):
        p = os.path.join(t.tmpdir, "client%d.%d.out" % (rnd, k))
        outs.append(p)
        with open(p, "w") as f:
            procs.append(t.spawn([sys.executable, os.path.abspath(__file__), "--client", b.url,
                                  "r%dc%d" % (rnd, k)], stdout=f, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    while time.monotonic() < deadline:
        if all('"ready"' in open(p).read() for p in outs):
            break
        check(all(p.poll() is None for p in procs), "a client exited before it was ready")
        time.sleep(0.02)
    else:
        mqdtest.fail("the clients were not ready within 30 s")
    delay = rng.uniform(1.0, 3.0)
    time.sleep(delay)
    b.kill()
    pend = b.fs.stats()["pending"]  # read with nothing changing it (mqd is dead)
    for p in procs:
        try:
            p.wait(timeout=30 * mqdtest.SLOW)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
            st.anomaly(rnd, "a client did not notice the broker's death within 30 s")
    return outs, delay, pend


def run_round(t, b, st, rnd, rng):
    shim = rnd % 2 == 1
    start(b, shim)
    outs, delay, pend = run_clients(t, b, st, rnd, rng)
    b.start()  # power cut (plain or torn), remount, start (SQLite as built)
    if shim:
        with open(b.logs[-2], "rb") as f:
            if b"nodirsync: dropped SQLite's" not in f.read():
                st.anomaly(rnd, "the shim dropped no directory sync of SQLite's: not in effect?")
    acked = []
    for p in outs:
        with open(p) as f:
            acked += read_client(st, rnd, f.read())
    nvis, _ = check_round(st, rnd, b.url, acked)
    lost = acked and not any(g in st.visible for g in acked)
    log("round %d (%s): %d connection(s), killed after %.2fs, %d commits acknowledged, %d "
        "transactions visible, restart says '%s'%s"
        % (rnd, "SQLite without directory syncs" if shim else "SQLite as built", len(outs), delay,
           len(acked), nvis, known_at_start(b), "; pending at the kill: %s" % pend[:6] if lost else ""))


def body(t):
    log("rounds %d, seed %d" % (ROUNDS, SEED))
    check(os.path.exists(SHIM), "%s is not built" % SHIM)
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    rng = random.Random(SEED)
    sets = {"topic.%s.partitions" % x: NPARTS for x in TOPICS}
    b = t.broker(sets=sets)
    # one message in each partition: a start that finds an empty partition fsyncs the
    # directories above it, the data dir included, which would hide the WAL's case
    from proton import Message
    for x in TOPICS:
        for p in range(NPARTS):
            mqdtest.send(b.url, "%s/Partitions/%d" % (x, p), [Message(id="seed-%s-%d" % (x, p), body="seed")])
    st = State()
    t0 = time.monotonic()
    for rnd in range(ROUNDS):
        # clean stop: SQLite checkpoints and deletes meta.db-wal, the next start makes a
        # new one; every fourth round SIGKILL instead (the next start cuts power first
        # and finds the WAL this process left)
        if rnd % 4 == 0 and rnd:
            b.kill()
        else:
            b.stop()
            check(b.proc.returncode == 0, "the clean stop exited %s" % b.proc.returncode)
            check(not os.path.exists(os.path.join(b.data_dir, "meta.db-wal")),
                  "meta.db-wal is still there after a clean stop")
        run_round(t, b, st, rnd, rng)
        if rnd % FULL_EVERY == FULL_EVERY - 1 or rnd == ROUNDS - 1:
            check_all(st, rnd, b.url)
    log("RESULT: %d rounds, %.0f s, %d commits acknowledged, %d lost (in rounds %s), %d torn, "
        "%d duplicated, %d anomalies, seed %d"
        % (ROUNDS, time.monotonic() - t0, st.stats["commit"], st.stats["lost_commits"],
           st.lost_rounds[:20], st.stats["torn"], st.stats["dup"], len(st.anomalies), SEED))
    check(st.stats["commit"] > 0, "no transaction was committed at all")
    check(not st.anomalies, "%d anomalies:\n  %s" % (len(st.anomalies), "\n  ".join(st.anomalies[:30])))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(sys.argv[2], sys.argv[3])
    else:
        mqdtest.main(body, timeout=min(4 * 3600, 120 + ROUNDS * 20))
