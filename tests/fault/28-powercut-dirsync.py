#!/usr/bin/python3
"""The directory syncs themselves (issue 32, point 3): once mqd has acknowledged
something, no file or directory it needs may still have an unsynced name. powercutfs
lists the directory changes a power cut would undo (MOUNTPOINT/.powercut, "pending");
after each step below that list must be empty but for SQLite's meta.db-shm (rebuilt from
the WAL at every start, never needed after a crash) and temporary reply nodes (mqctl's:
never kept). mqd runs with SQLite's own
directory syncs dropped (tests/fault/nodirsync.so, as a SQLite built with
SQLITE_DISABLE_DIRSYNC): the names of meta.db and its WAL are mqd's to make durable.

  A. first start on a data dir the test made (never synced): create topic dsA (2
     partitions), send 3 messages (to both partitions), wait for the partitions' first
     recovery checkpoints (recovery.ckpt, a new file); SIGKILL; nothing pending; power cut, start: dsA has
     its 2 partitions and 3 messages;
  B. clean stop (SQLite deletes the WAL), start (a new WAL), one committed transaction
     of 2 messages (the decision: synchronous = NORMAL + mqd's own sync of the WAL);
     SIGKILL; nothing pending; cut, start: the transaction is visible;
  C. clean stop, start (a new WAL), a consumer of group g1 takes 2 messages and
     detaches (its offsets: a commit with synchronous = FULL, before the detach is
     answered); SIGKILL; nothing pending; cut, start: g1's committed offsets are those
     meta.db held before the cut.
Every start's log shows the shim dropped SQLite's directory sync of the WAL at least once
(the check of the checker). Needs root and FUSE (else exit 77)."""

import json
import os
import sys
import time

os.environ["MQD_TEST_POWERCUT"] = "cut"  # before mqdtest reads it
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "interop"))
sys.path.insert(0, HERE)
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Message  # noqa: E402

TOPIC = "dsA"


def shim_on():
    shim = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "tests", "fault", "nodirsync.so")
    check(os.path.exists(shim), "%s is not built" % shim)
    os.environ["LD_PRELOAD"] = shim
    os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"


def pending(b, step):
    """Asserts that a power cut now would undo no directory change mqd needs. A change
    inside a directory whose own removal is durable (a temporary reply topic's files,
    gone with topics/$tmp.N) cannot come back and is not counted."""
    raw = b.fs.stats()["pending"]

    def durably_gone(d):
        return not os.path.isdir(os.path.join(b.fs.mnt, d)) and "rmdir " + d not in raw

    p = []
    for x in raw:
        path = x.split(" ", 1)[1].split(" -> ")[-1]
        if path.endswith("meta.db-shm") or path.startswith("data/topics/$tmp."):
            continue  # rebuilt at start; a temporary reply node (never kept)
        anc = os.path.dirname(path)
        while anc and not durably_gone(anc):
            anc = os.path.dirname(anc)
        if not anc:
            p.append(x)
    log("%s: pending directory changes: %s" % (step, p or "none"))
    check(not p, "%s: acknowledged, but a power cut would undo %s" % (step, p))


def browse(url, address, idle=1.0):
    from proton.reactor import Copy
    idle *= mqdtest.SLOW
    got = []

    class H(mqdtest.Client):
        def on_start(self, event):
            self.conn = self.connect(event.container, url)
            event.container.create_receiver(self.conn, address, options=Copy())
            self.last = time.monotonic()
            event.container.schedule(idle, self)

        def on_message(self, event):
            self.last = time.monotonic()
            got.append(event.message)
            event.delivery.update(event.delivery.ACCEPTED)
            event.delivery.settle()

        def on_timer_task(self, event):
            if time.monotonic() - self.last >= idle:
                self.finish()
            else:
                event.container.schedule(0.2, self)

    mqdtest.run_container(H(), 60)
    return got


def shim_seen(b, step):
    with open(b.logs[-2], "rb") as f:  # the start that did the step (the last is after the cut)
        text = f.read().decode("utf-8", "replace")
    check("nodirsync: dropped SQLite's" in text,
          "%s: the shim dropped no directory sync of SQLite's: not in effect?" % step)


def txn_send(url, bodies):
    from proton.utils import BlockingConnection
    c = BlockingConnection(url, timeout=10 * mqdtest.SLOW)
    try:
        bt = mqdtest.BlockingTxns(c)
        snd = c.create_sender(TOPIC)
        tid = bt.declare()
        res = bt.wait_settled([bt.send(snd, Message(id=x, body=x), tid) for x in bodies])
        check(all(mqdtest.txn_outcome_ok(r[0], r[1], tid) for r in res), "transactional sends: %s" % res)
        ok, st, cond = bt.discharge(tid, False)
        check(ok, "commit: %s %s" % (st, cond))
    finally:
        c.close()


def committed(b, group):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "group", "describe", TOPIC, group)
    check(rc == 0, "mqctl group describe %s %s: %d %s" % (TOPIC, group, rc, err))
    v = json.loads(out)
    parts = v.get("partitions", v) if isinstance(v, dict) else v
    return [p["committed"] for p in parts]


def body(t):
    shim_on()
    coll = mqdtest.Collect()  # a step that fails still lets the next ones show theirs
    try:
        b = t.broker(start=False)
        # A. first start: data dir, meta.db, the WAL, topics/dsA/0..1 and their segments
        b.start()
        rc, _, err = mqdtest.mqctl(b.url, "topic", "create", TOPIC, "--partitions", "2")
        check(rc == 0, "create %s: %s" % (TOPIC, err))
        # both partitions hold records: a start that finds an empty one fsyncs the chain
        # above it, data dir included, and would make the WAL's name durable by the way
        for i in range(3):
            mqdtest.send(b.url, "%s/Partitions/%d" % (TOPIC, i % 2), [Message(id="a%d" % i, body="a%d" % i)])
        time.sleep(3.0)  # the store's first recovery checkpoints (every 2 s): new files too
        b.kill()
        with coll.case("A pending"):
            pending(b, "A (first start, topic, sends)")
        b.start()
        with coll.case("A after the cut"):
            shim_seen(b, "A")
            got = sorted(m.body for m in browse(b.url, TOPIC))
            check(got == ["a0", "a1", "a2"], "A: after the cut %s holds %s" % (TOPIC, got))
            check(len(committed(b, "$shared")) == 2, "A: %s lost a partition" % TOPIC)

        # B. a new WAL, then a transaction's decision (synchronous = NORMAL, mqd's sync)
        b.stop()
        check(not os.path.exists(os.path.join(b.data_dir, "meta.db-wal")), "B: the WAL outlived a clean stop")
        b.start()
        txn_send(b.url, ["t0", "t1"])
        b.kill()
        with coll.case("B pending"):
            pending(b, "B (new WAL, committed transaction)")
        b.start()
        with coll.case("B after the cut"):
            shim_seen(b, "B")
            got = sorted(m.body for m in browse(b.url, TOPIC))
            check(got == ["a0", "a1", "a2", "t0", "t1"], "B: after the cut %s holds %s" % (TOPIC, got))

        # C. a new WAL, then a commit with synchronous = FULL (SQLite's own sync): group
        # g1's offsets, written when its consumer detaches (no mqctl here: its reply node
        # is a new topic, whose directories' sync would reach the data dir by the way)
        b.stop()
        b.start()
        r = mqdtest.receive(b.url, TOPIC + "/ConsumerGroups/g1", count=2, timeout=30)
        check(len(r.got) >= 2, "C: g1 received %d of 2" % len(r.got))
        b.kill()
        want = mqdtest.group_offsets(b.data_dir, TOPIC, "g1")
        check(want and sum(want.values()) >= 2, "C: g1's offsets in meta.db after the detach: %s" % want)
        with coll.case("C pending"):
            pending(b, "C (new WAL, group offsets)")
        b.start()
        with coll.case("C after the cut"):
            shim_seen(b, "C")
            rc, out, err = mqdtest.mqctl(b.url, "--json", "group", "describe", TOPIC, "g1")
            got = {i: p["committed"] for i, p in enumerate(json.loads(out)["partitions"])} \
                if rc == 0 else "no group g1 (%s)" % err.strip()
            check(got == want, "C: after the cut g1's committed offsets are %s, want %s" % (got, want))
        coll.finish()
    finally:
        os.environ.pop("LD_PRELOAD", None)


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
