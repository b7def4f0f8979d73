#!/usr/bin/python3
"""Atomic visibility of transactions spanning 3 topics x 4 partitions, with
read-committed readers running concurrently.

Producers (MQD_TXN_PRODUCERS subprocesses, default 4) run MQD_TXN_COUNT transactions in
all (default 1,000): each declares a transaction, sends 12 messages, one to each of
txa0..txa2/Partitions/0..3 (application properties: producer, txn, idx), waits for the
12 transactional-state(accepted) settlements, then commits (~80 %) or aborts (~20 %,
seeded). Each producer writes its discharge outcomes to a file.

Readers (subprocesses) run from before the first transaction to after the last: a
browser (distribution-mode copy) per topic and a group receiver on
txa0/ConsumerGroups/rc. Each records, in arrival order, (partition, offset, producer,
txn, idx) of every message.

Checks, per reader and partition: offsets strictly increase; per producer, the txn
numbers seen are exactly that producer's committed transactions in order (so nothing
aborted, nothing missing, no duplicate, no reordering); per topic every committed txn
was seen with all 4 of its messages, no txn partially. Reports transactions/s.
"""

import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402

TOPICS = ["txa0", "txa1", "txa2"]
NPART = 4
TOTAL = int(os.environ.get("MQD_TXN_COUNT", "1000"))
NPROD = int(os.environ.get("MQD_TXN_PRODUCERS", "4"))
ABORT_RATE = 0.2


# ------------------------------------------------------------------ producer process

def producer(url, pid, count, seed, out):
    from proton import Message
    from proton.utils import BlockingConnection
    rnd = random.Random(seed)
    c = BlockingConnection(url, timeout=30)
    bt = mqdtest.BlockingTxns(c)
    snd = [c.create_sender("%s/Partitions/%d" % (t, p)) for t in TOPICS for p in range(NPART)]
    t0 = time.monotonic()
    with open(out, "w") as f:
        for i in range(count):
            abort = rnd.random() < ABORT_RATE
            tid = bt.declare()
            ds = [bt.send(s, Message(body="p%d-t%d-%d" % (pid, i, j),
                                     properties={"producer": pid, "txn": i, "idx": j}), tid)
                  for j, s in enumerate(snd)]
            res = bt.wait_settled(ds)
            bad = [r for r in res if not mqdtest.txn_outcome_ok(r[0], r[1], tid)]
            ok, st, cond = bt.discharge(tid, abort)
            f.write(json.dumps({"txn": i, "abort": abort, "discharge_ok": ok, "state": str(st),
                                "cond": str(cond) if cond else None,
                                "bad_sends": [str(b) for b in bad[:2]]}) + "\n")
        f.write(json.dumps({"elapsed": time.monotonic() - t0}) + "\n")
    c.close()


# ------------------------------------------------------------------ reader process

def reader(url, address, mode, out, stopfile, maxsec):
    from proton.handlers import MessagingHandler
    from proton.reactor import Container, Copy

    class R(MessagingHandler):
        def __init__(self):
            super().__init__(prefetch=500, auto_accept=False)
            self.recs = []
            self.last = time.monotonic()
            self.t0 = time.monotonic()
            self.err = None

        def on_start(self, event):
            self.conn = event.container.connect(url, reconnect=False)
            event.container.create_receiver(self.conn, address, options=Copy() if mode == "copy" else None)
            event.container.schedule(0.2, self)

        def on_message(self, event):
            m = event.message
            self.last = time.monotonic()
            p = m.properties or {}
            self.recs.append([int(mqdtest.ann(m, "x-opt-partition-id")), int(mqdtest.ann(m, "x-opt-sequence-number")),
                              p.get("producer"), p.get("txn"), p.get("idx"), time.time()])
            event.delivery.update(event.delivery.ACCEPTED)
            event.delivery.settle()

        def on_timer_task(self, event):
            now = time.monotonic()
            if (os.path.exists(stopfile) and now - self.last > 3.0) or now - self.t0 > maxsec:
                self.conn.close()
                return
            event.container.schedule(0.2, self)

        def on_link_error(self, event):
            self.err = str(event.link.remote_condition)
            event.connection.close()

        def on_transport_error(self, event):
            self.err = str(event.transport.condition)

    r = R()
    Container(r).run()
    with open(out, "w") as f:
        json.dump({"recs": r.recs, "err": r.err}, f)


# ------------------------------------------------------------------ the test

def body(t):
    sets = {}
    for tp in TOPICS:
        sets["topic.%s.partitions" % tp] = NPART
    b = t.broker(sets=sets)
    me = os.path.abspath(__file__)
    py = sys.executable
    stopfile = os.path.join(t.tmpdir, "stop")
    # create the topics (and their partitions) before the readers attach
    from proton.utils import BlockingConnection
    c = BlockingConnection(b.url, timeout=30)
    for tp in TOPICS:
        c.create_sender(tp)
    c.close()
    readers = []
    specs = [(tp, "copy") for tp in TOPICS] + [(TOPICS[0] + "/ConsumerGroups/rc", "group")]
    for i, (addr, mode) in enumerate(specs):
        out = os.path.join(t.tmpdir, "reader%d.json" % i)
        p = t.spawn([py, me, "--reader", b.url, addr, mode, out, stopfile, "200"])
        readers.append((addr, mode, out, p))
    time.sleep(1.0)
    per = [TOTAL // NPROD + (1 if i < TOTAL % NPROD else 0) for i in range(NPROD)]
    prods = []
    t0 = time.monotonic()
    for i in range(NPROD):
        out = os.path.join(t.tmpdir, "producer%d.json" % i)
        p = t.spawn([py, me, "--producer", b.url, str(i), str(per[i]), str(1000 + i), out])
        prods.append((i, out, p))
    for i, out, p in prods:
        rc = p.wait(timeout=max(5, 180 - (time.monotonic() - t0)))
        check(rc == 0, "producer %d exited with %s" % (i, rc))
    wall = time.monotonic() - t0
    t_end = time.time()
    b.check_alive("after the producers")
    committed = {}  # producer -> [txn, ...] in order
    aborted = {}
    for i, out, p in prods:
        committed[i], aborted[i] = [], []
        with open(out) as f:
            for line in f:
                r = json.loads(line)
                if "elapsed" in r:
                    continue
                check(not r["bad_sends"], "producer %d txn %d: transactional sends settled with %s"
                      % (i, r["txn"], r["bad_sends"]))
                check(r["discharge_ok"], "producer %d txn %d: discharge(fail=%s) -> %s %s"
                      % (i, r["txn"], r["abort"], r["state"], r["cond"]))
                (aborted if r["abort"] else committed)[i].append(r["txn"])
        check(len(committed[i]) + len(aborted[i]) == per[i], "producer %d: %d outcomes of %d"
              % (i, len(committed[i]) + len(aborted[i]), per[i]))
    ncommit = sum(len(v) for v in committed.values())
    log("%d transactions (%d committed, %d aborted) of 12 messages by %d producers in %.1fs: %.1f txn/s, "
        "%.0f msg/s" % (TOTAL, ncommit, TOTAL - ncommit, NPROD, wall, TOTAL / wall, TOTAL * 12 / wall))
    with open(stopfile, "w") as f:
        f.write("stop\n")
    for addr, mode, out, p in readers:
        rc = p.wait(timeout=60)
        check(rc == 0, "reader of %s exited with %s" % (addr, rc))

    problems = []
    for addr, mode, out, p in readers:
        with open(out) as f:
            res = json.load(f)
        topic = addr.split("/")[0]
        ti = TOPICS.index(topic)
        recs = res["recs"]
        if res["err"]:
            problems.append("%s: reader error %s" % (addr, res["err"]))
        log("reader %s (%s): %d messages" % (addr, mode, len(recs)))
        # per partition: offsets increase; per producer the txns are exactly the committed ones in order
        byp = {}
        during = sum(1 for r in recs if r[5] < t_end)
        log("reader %s: %d of %d messages arrived while the producers were running" % (addr, during, len(recs)))
        if recs and not during:
            problems.append("%s: the reader got nothing while the producers ran (not concurrent)" % addr)
        for part, off, prod, txn, idx, _ in recs:
            byp.setdefault(part, []).append((off, prod, txn, idx))
        seen = {}  # (prod, txn) -> set(idx)
        for part in range(NPART):
            lst = byp.get(part, [])
            offs = [x[0] for x in lst]
            if any(b <= a for a, b in zip(offs, offs[1:])):
                k = next(j for j in range(1, len(offs)) if offs[j] <= offs[j - 1])
                problems.append("%s p%d: offsets not increasing at %d: %s" % (addr, part, k, offs[max(0, k - 3):k + 3]))
            for prod in range(NPROD):
                txns = [x[2] for x in lst if x[1] == prod]
                if txns != committed[prod]:
                    ab = sorted(set(txns) & set(aborted[prod]))
                    miss = sorted(set(committed[prod]) - set(txns))
                    problems.append("%s p%d producer %d: %d txns seen, %d committed; aborted seen %s; "
                                    "missing %s; in order: %s" % (addr, part, prod, len(txns), len(committed[prod]),
                                                                  ab[:10], miss[:10], txns == sorted(txns)))
            for off, prod, txn, idx in lst:
                if idx is None or idx // NPART != ti or idx % NPART != part:
                    problems.append("%s p%d offset %d: message idx %s of another partition" % (addr, part, off, idx))
                seen.setdefault((prod, txn), set()).add(idx)
        partial = [(k, sorted(v)) for k, v in seen.items() if len(v) != NPART]
        if partial:
            problems.append("%s: %d transactions seen partially, e.g. %s" % (addr, len(partial), partial[:5]))
        nwhole = sum(1 for k, v in seen.items() if len(v) == NPART and k[1] in set(committed[k[0]]))
        log("reader %s: %d transactions seen whole, %d partially" % (addr, nwhole, len(partial)))
    check(not problems, "%d problem(s):\n  %s" % (len(problems), "\n  ".join(problems[:30])))
    log("RESULT: %d txns x 12 msgs, %.1f txn/s with %d concurrent readers, 0 anomalies" % (TOTAL, TOTAL / wall,
                                                                                        len(readers)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--producer":
        producer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    elif len(sys.argv) > 1 and sys.argv[1] == "--reader":
        reader(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], float(sys.argv[7]))
    else:
        mqdtest.main(body, timeout=240)
