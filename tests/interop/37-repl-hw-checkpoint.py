#!/usr/bin/python3
"""The high-watermark checkpoint (data_dir/replication-offset-checkpoint, src/repl/hwck.c).
A real etcd and three mqd nodes (racks a/b/c), topic ck: 1 partition, RF 3, acks = all,
min ISR 2, flush = sync; hw_checkpoint_interval_ms CK = 1 s x MQD_TEST_SLOW.

(a) SIGKILL: 400 sends accepted; 2 checkpoint intervals later 100 more accepted, then all
    three nodes SIGKILLed at once. The old leader L's checkpoint file is whole (its end
    line counts its lines) and names ck 0 with a watermark C, 400 <= C <= 500 (everything
    acknowledged more than a checkpoint interval before the kill is in it). Once the dead
    L restarted alone at once (the dead nodes' keys still there) hands the partition to a
    dead follower, staying in the ISR itself, and leads again (epoch + 2) once that
    follower's key expired (before: the partition stayed offline until that follower
    came back); a consumer on it reads exactly C messages, the first C sent, in order,
    with both followers down. The
    control: L killed again and restarted alone without its checkpoint file serves none
    (its watermark starts at 0, as before the checkpoint). The followers restarted, a new
    consumer reads all 500.
(b) clean stop: 200 more accepted (700), the followers then L stopped by SIGTERM: L's
    checkpoint (written at the stop) is its log's end, every record (the 700 and the
    committed offsets of the groups that read them); L restarted alone serves all 700 at once
    without its followers; with them back, still 700 and 100 more accepted after."""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (TTL_MS, Etcd, Receiver, Sender, get_json, read_keys, start_nodes,  # noqa: E402
                        wait_for)
from mqdcrash import raw_records  # noqa: E402
from mqdcluster import partition_bytes  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

RACKS = {1: "a", 2: "b", 3: "c"}
TOPIC = "ck"
KEY = "/mqd/partitions/%s/0" % TOPIC
CK_S = 1.0 * SLOW
FILE = "replication-offset-checkpoint"


def send(url, n, prefix):
    s = Sender(url, TOPIC, n, prefix, window=50)
    mqdtest.run_container(s, 90)
    log("%s: %s" % (prefix, s.status()))
    check(s.accepted == n and not s.rejected and not s.link_cond, "%s: %s %r" % (prefix, s.status(), s.link_cond))


def checkpoint(b):
    """(lines {(topic, partition): (hw, epoch)}, raw text) of b's checkpoint file; checks
    its header and that its end line counts its lines."""
    with open(os.path.join(b.data_dir, FILE)) as f:
        text = f.read()
    lines = text.splitlines()
    check(lines[0] == "mqd replication-offset-checkpoint 1", "header %r" % lines[:1])
    end = lines[-1].split()
    check(end[0] == "end" and int(end[1]) == len(lines) - 2 and len(end[2]) == 8, "end line %r" % lines[-1])
    out = {}
    for ln in lines[1:-1]:
        t, p, hw, ep = ln.split()
        out[(t, int(p))] = (int(hw), int(ep))
    return out, text


def leads_now(b, lead):
    """b's log of its current start says it took the lead of ck/0."""
    with open(b.logs[-1], "rb") as f:
        return "%s/0: leader (leader %d" % (TOPIC, lead) in f.read().decode("utf-8", "replace")


def read_all(url, group, want=None):
    r = Receiver(url, "%s/ConsumerGroups/%s/Partitions/0" % (TOPIC, group), want, idle_s=3.0)
    mqdtest.run_container(r, 60)
    check(r.link_cond is None, "consumer refused: %r" % (r.link_cond,))
    return r.bodies


def bodies_ok(got, sent, n):
    check(got == sent[:n], "read %d: %r..., want the first %d sent in order" % (len(got), got[:3], n))


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"hw_checkpoint_interval_ms": int(CK_S * 1000)})
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", TOPIC, "--partitions", "1",
                                 "--config", "replication_factor=3", "--config", "acks=all",
                                 "--config", "min_insync_replicas=2", "--config", "flush=sync")
    check(rc == 0, "topic create: %s" % (out + err))
    ps = wait_for("ISR of 3", lambda: (lambda p: p if p and len(p["isr"]) == 3 else None)(get_json(etcd.port, KEY)), 20)
    lead = ps["leader"]
    fol = [i for i in RACKS if i != lead]
    wait_for("both followers fetching", lambda: brokers[lead].log_text().count("fetches from") >= 2, 20)
    sent = ["a-%d" % i for i in range(400)] + ["b-%d" % i for i in range(100)] + ["c-%d" % i for i in range(200)]
    coll = mqdtest.Collect()
    with coll.case("(a) SIGKILL of all three: the old leader alone serves what its checkpoint holds"):
        send(brokers[lead].url, 400, "a")
        time.sleep(2 * CK_S + 0.5 * SLOW)
        send(brokers[lead].url, 100, "b")
        for i in fol + [lead]:
            brokers[i].kill()
        cks = {i: checkpoint(brokers[i])[0].get((TOPIC, 0)) for i in RACKS}
        log("checkpoints after the kill (hw, epoch) by node: %r" % cks)
        c = cks[lead][0]
        check(400 <= c <= 500, "leader's checkpoint %d, want 400..500" % c)
        # restarted at once, within the dead nodes' leases: their keys still look alive,
        # so it hands the partition to one of them (ctl.c's handover at start) and stays
        # in the ISR; when that key expires, the controller elects it again
        t0 = time.monotonic()
        brokers[lead].start()
        wait_for("node %d leads alone" % lead, lambda: leads_now(brokers[lead], lead),
                 2 * TTL_MS / 1000 + 10)
        st = get_json(etcd.port, KEY)
        log("node %d leads %.2f s after its start: %r" % (lead, time.monotonic() - t0, st))
        check(st["leader"] == lead and st["epoch"] >= ps["epoch"] + 2,
              "state %r: want node %d leading in epoch %d or later (handed to a dead follower, "
              "then elected again)" % (st, lead, ps["epoch"] + 2))
        got = read_all(brokers[lead].url, "g1")
        log("read %d with both followers down (checkpoint %d)" % (len(got), c))
        bodies_ok(got, sent, c)
        # the control: the same restart without the file serves nothing (the watermark
        # starts at 0, as before the checkpoint existed)
        brokers[lead].kill()
        wait_for("node %d's key expired" % lead, lambda: not read_keys(etcd.port, "/mqd/nodes/"),
                 2 * TTL_MS / 1000 + 5)
        os.remove(os.path.join(brokers[lead].data_dir, FILE))
        brokers[lead].start()
        wait_for("node %d leads alone" % lead, lambda: leads_now(brokers[lead], lead), 20)
        got = read_all(brokers[lead].url, "g0")
        log("without the checkpoint file: read %d" % len(got))
        check(got == [], "read %d without the checkpoint file" % len(got))
        for i in fol:
            brokers[i].start()
        wait_for("ISR of 3 again", lambda: len(get_json(etcd.port, KEY)["isr"]) == 3, 30)
        got = read_all(brokers[lead].url, "g2", 500)
        bodies_ok(got, sent, 500)
    with coll.case("(b) clean stop: the checkpoint written at the stop is the final watermark"):
        ps = get_json(etcd.port, KEY)
        lead = ps["leader"]
        fol = [i for i in RACKS if i != lead]
        send(brokers[lead].url, 200, "c")
        for i in fol + [lead]:
            brokers[i].stop()
            check(brokers[i].proc.returncode == 0, "node %d exited %r" % (i, brokers[i].proc.returncode))
        ck, text = checkpoint(brokers[lead])
        log("leader %d's checkpoint after SIGTERM: %r" % (lead, text))
        # 700 messages and the committed offsets of the groups that read them (gstate.c)
        end = len(raw_records(partition_bytes(brokers[lead], TOPIC, 0)))
        check(end >= 700 and ck.get((TOPIC, 0), (0, 0))[0] == end,
              "checkpoint %r, want the log's end %d (all committed)" % (ck.get((TOPIC, 0)), end))
        brokers[lead].start()
        wait_for("node %d leads alone" % lead, lambda: leads_now(brokers[lead], lead), 20)
        got = read_all(brokers[lead].url, "g3")
        log("read %d with both followers down" % len(got))
        bodies_ok(got, sent, 700)
        for i in fol:
            brokers[i].start()
        wait_for("ISR of 3 again", lambda: len(get_json(etcd.port, KEY)["isr"]) == 3, 30)
        send(brokers[lead].url, 100, "d")
        got = read_all(brokers[lead].url, "g4", 800)
        bodies_ok(got, sent + ["d-%d" % i for i in range(100)], 800)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
