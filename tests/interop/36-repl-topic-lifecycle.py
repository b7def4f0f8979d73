#!/usr/bin/python3
"""Replicated topics' lifecycle across the cluster: delete, alter and add partitions from
any node (a real etcd and three real mqd nodes, racks a/b/c, replication_factor 3).

(a) delete from a follower: r3 (1 partition) takes N accepted sends; a producer keeps
    sending to the leader and a consumer stays attached there; the other follower is
    SIGKILLed; `mqctl topic delete r3` on the first follower answers once etcd holds it.
    Within a bound: etcd has no key of r3 (topics/, partitions/, candidates/) and holds
    its tombstone (deleted/r3 with the registration's id); every live node's `mqctl topic
    list` lacks r3 and its data dir topics/r3 is gone; the leader is alive (it died of
    SIGSEGV when the replication layer kept pointers into the freed partitions). The
    killed follower, restarted, deletes its copy ("deleted in the cluster while this node
    was away") and registers nothing: etcd still has no topics/r3 after a sweep.
    Re-created under the same name: a new id, the tombstone gone, its partition state
    carries the new id; every node holds a fresh copy (start 0, end 0); 10 new sends are
    read from offset 0 on the new leader and nothing of the old topic is.
(a2) r4 (100 sends) is deleted and created again while a follower is down: no tombstone
    is left, and the returning node finds its copy's identity is not the registered one,
    deletes it and fetches the new topic (its 10 records, byte-equal at the end).
(b) alter on a follower: `--config acks=leader --config retention_bytes=1048576` lands in
    the registration and every node's `mqctl --json topic show` reports it; the leader
    applies acks = leader at once (with both followers SIGSTOPped, 20 sends with the
    topic's acks are accepted within a bound); two alters sent to two nodes at the same
    time both land (compare-and-swap, merged); replication_factor=2 is refused (exit 4).
(c) add partitions under running producers: g3 grows 2 -> 4 while a producer sends to
    each of partitions 0 and 1 (following etcd's leader); partitions 2 and 3 get placed
    (their states carry the topic's id; 0 and 1 keep leader, epoch and replicas), every
    node's copy has 4 partitions, 200 sends to each new partition are accepted, no
    accepted send to 0 or 1 is missing from what their leaders serve, and the logs of all
    four partitions are byte-equal on the three nodes at the end (with r3's).
(d) run under the sanitizer build too (`make check` there): the same, clean."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (Etcd, Receiver, Sender, get_json, read_keys, start_nodes,  # noqa: E402
                        stopped_logs_equal, wait_for)
from mqdproducer import Producer  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

N = 500
RACKS = {1: "a", 2: "b", 3: "c"}


def mqctl_ok(b, *args):
    rc, out, err = mqdtest.mqctl(b.url, *args)
    check(rc == 0, "mqctl %s on %s: %d %s" % (" ".join(args), b.name, rc, out + err))
    return out


def topic_names(b):
    return [t["name"] for t in json.loads(mqctl_ok(b, "--json", "topic", "list"))]


def show(b, topic):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "show", topic)
    return json.loads(out) if rc == 0 else None


def keys_of(etcd, topic):
    """Every key of topic under /mqd/ (its registration, partitions, election reports)."""
    out = []
    for pfx in ("/mqd/topics/%s" % topic, "/mqd/partitions/%s/" % topic,
                "/mqd/candidates/%s/" % topic):
        out += [k for k in read_keys(etcd.port, pfx)
                if k == "/mqd/topics/%s" % topic or pfx.endswith("/")]
    return out


def create(b, topic, parts):
    mqctl_ok(b, "topic", "create", topic, "--partitions", str(parts), "--config",
             "replication_factor=3")


def placed(etcd, topic, parts):
    return wait_for("%s placed" % topic, lambda: all(
        get_json(etcd.port, "/mqd/partitions/%s/%d" % (topic, p)) for p in range(parts)) and [
        get_json(etcd.port, "/mqd/partitions/%s/%d" % (topic, p)) for p in range(parts)], 15)


def roles_up(brokers, topic, part, ps):
    """Every replica logged its role for topic/part (the leader serves, followers fetch)."""
    pat = "%s/%d: " % (topic, part)
    wait_for("%s/%d roles" % (topic, part), lambda: all(
        (pat + ("leader" if i == ps["leader"] else "follower")) in brokers[i].log_text()
        for i in ps["replicas"] if brokers[i].alive()), 20)


def send_all(url, address, n, prefix, timeout=60):
    s = Sender(url, address, n, prefix)
    mqdtest.run_container(s, timeout)
    check(s.link_cond is None and s.accepted == n and not s.rejected,
          "%s to %s: %s, link %r, rejected %r" % (prefix, address, s.status(), s.link_cond,
                                                  s.rejected[:3]))


def case_delete(t, etcd, brokers):
    create(brokers[1], "r3", 1)
    ps = placed(etcd, "r3", 1)[0]
    old_id = get_json(etcd.port, "/mqd/topics/r3")["id"]
    check(len(old_id) == 32 and ps.get("topic_id") == old_id,
          "registration id %r, partition state %r" % (old_id, ps))
    L = ps["leader"]
    F1, F2 = [i for i in RACKS if i != L]
    roles_up(brokers, "r3", 0, ps)
    send_all(brokers[L].url, "r3", N, "old")
    wait_for("both followers hold r3/0", lambda: all(
        os.path.isdir(os.path.join(brokers[f].data_dir, "topics", "r3", "0")) for f in (F1, F2)), 10)
    time.sleep(0.5 * SLOW)
    brokers[F2].kill()
    # a producer and a consumer on the leader while the topic goes
    prod = Producer(etcd, "/mqd/partitions/r3/0", brokers, "r3", max_msgs=100000)
    prod.th.start()
    rcv = Receiver(brokers[L].url, "r3/ConsumerGroups/g/Partitions/0", None, idle_s=60.0)
    rth = threading.Thread(target=lambda: mqdtest.run_container(rcv, 60), daemon=True)
    rth.start()
    wait_for("producer accepted sends", lambda: len(prod.accepted()) >= 20, 30)
    wait_for("the consumer read the %d" % N, lambda: len(rcv.bodies) >= N, 30)
    t0 = time.monotonic()
    mqctl_ok(brokers[F1], "topic", "delete", "r3")
    t_ans = time.monotonic()
    answered = t_ans - t0
    check(not keys_of(etcd, "r3"), "etcd keys of r3 after the delete: %r" % keys_of(etcd, "r3"))
    tomb = get_json(etcd.port, "/mqd/deleted/r3")
    check(tomb and tomb["id"] == old_id, "tombstone %r (id %s)" % (tomb, old_id))
    live = [L, F1]
    wait_for("r3 gone from every live node", lambda: all(
        "r3" not in topic_names(brokers[i]) and
        not os.path.exists(os.path.join(brokers[i].data_dir, "topics", "r3")) for i in live), 10)
    gone = time.monotonic() - t0
    log("DELETE answered in %.3fs, every live node without r3 after %.2fs" % (answered, gone))
    time.sleep(1.0 * SLOW)  # the producer tries on against the leader
    prod.stop.set()
    prod.th.join(60)
    rth.join(30)
    brokers[L].check_alive("after the delete under a producer and a consumer")
    log("producer: %d accepted (%d after the answer), consumer read %d, then %r"
        % (len(prod.accepted()), len(prod.accepted(after=t_ans)), len(rcv.bodies), rcv.link_cond))
    check(not prod.accepted(after=t_ans), "sends accepted after the delete: %r"
          % prod.accepted(after=t_ans)[:3])
    check(rcv.link_cond and rcv.link_cond[0] == "amqp:link:detach-forced" and
          "deleted" in (rcv.link_cond[1] or ""), "the consumer on the leader: %r" % (rcv.link_cond,))
    check("this node's copy deleted" in brokers[L].log_text(), "the leader logged no deletion")

    brokers[F2].start()
    wait_for("node %d back" % F2, lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    wait_for("node %d deletes its copy" % F2, lambda: not os.path.exists(
        os.path.join(brokers[F2].data_dir, "topics", "r3")), 15)
    check("deleted in the cluster while this node was away" in brokers[F2].log_text(),
          "node %d did not log why it deleted r3" % F2)
    check("r3" not in topic_names(brokers[F2]), "node %d still lists r3" % F2)
    time.sleep(6.0 * SLOW)  # past a sweep of the node's copies (5 s)
    check(not keys_of(etcd, "r3"), "r3 registered again: %r" % keys_of(etcd, "r3"))
    log("restarted node %d deleted its copy and registered nothing" % F2)

    create(brokers[L], "r3", 1)
    ps2 = placed(etcd, "r3", 1)[0]
    new_id = get_json(etcd.port, "/mqd/topics/r3")["id"]
    check(new_id != old_id and ps2.get("topic_id") == new_id and ps2["epoch"] == 1,
          "re-created: id %s (old %s), state %r" % (new_id, old_id, ps2))
    check(get_json(etcd.port, "/mqd/deleted/r3") is None, "the tombstone outlived the re-create")
    roles_up(brokers, "r3", 0, ps2)
    for i, b in brokers.items():
        v = wait_for("node %d has the new r3" % i, lambda: show(b, "r3"), 15)
        p0 = v["partition_info"][0]
        check(p0["start"] == 0 and p0["end"] == 0 and v["messages"] == 0,
              "node %d: new r3 not empty: %r" % (i, p0))
    L2 = ps2["leader"]
    send_all(brokers[L2].url, "r3", 10, "new")
    r = Receiver(brokers[L2].url, "r3/ConsumerGroups/fresh/Partitions/0", None, idle_s=2.0)
    mqdtest.run_container(r, 30)
    check(r.bodies == ["new-%d" % i for i in range(10)], "read from the new r3: %r" % r.bodies[:12])
    log("re-created r3 (id %s): fresh on all three, 10 read from offset 0" % new_id)
    return L2


def case_recreate_while_down(t, etcd, brokers):
    """r4 deleted and created again while a follower is down: no tombstone is left, the
    identity tells the returning node that its copy is an older topic."""
    all_up(etcd, brokers)
    create(brokers[1], "r4", 1)
    ps = placed(etcd, "r4", 1)[0]
    old_id = get_json(etcd.port, "/mqd/topics/r4")["id"]
    roles_up(brokers, "r4", 0, ps)
    send_all(brokers[ps["leader"]].url, "r4", 100, "old")
    K = [i for i in RACKS if i != ps["leader"]][0]
    wait_for("node %d holds r4" % K, lambda: show(brokers[K], "r4") and
             show(brokers[K], "r4")["partition_info"][0]["end"] == 100, 10)
    brokers[K].kill()
    other = [i for i in RACKS if i != K][0]
    mqctl_ok(brokers[other], "topic", "delete", "r4")
    create(brokers[other], "r4", 1)
    new_id = get_json(etcd.port, "/mqd/topics/r4")["id"]
    check(new_id != old_id and get_json(etcd.port, "/mqd/deleted/r4") is None,
          "r4 ids %s -> %s, tombstone %r" % (old_id, new_id, get_json(etcd.port, "/mqd/deleted/r4")))
    # replication_factor 3 waits for node K (placed at once if its lease still lived, maybe
    # with K leading: then it fails over)
    brokers[K].start()
    ps2 = wait_for("r4 placed and led", lambda: (lambda p: p if p and "r4/0: leader (leader %d, "
                   "epoch %d)" % (p["leader"], p["epoch"]) in brokers[p["leader"]].log_text()
                   else None)(get_json(etcd.port, "/mqd/partitions/r4/0")), 20)
    check(ps2.get("topic_id") == new_id, "r4 state %r, id %s" % (ps2, new_id))
    send_all(brokers[ps2["leader"]].url, "r4", 10, "new")
    wait_for("node %d replaces its r4" % K, lambda: (lambda v: v and v["partition_info"][0]["end"] == 10)(
        show(brokers[K], "r4")), 20)
    check("is not the registered %s" % new_id in brokers[K].log_text(),
          "node %d did not log the identity mismatch" % K)
    log("node %d, down while r4 was deleted and created again: old copy (id %s, 100 records) "
        "deleted, new one (id %s) fetched" % (K, old_id, new_id))
    return ps2["leader"]


def all_up(etcd, brokers):
    """Every node running (a case that failed half-way may have left one down)."""
    for b in brokers.values():
        if not b.alive():
            b.start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)


def case_alter(t, etcd, brokers):
    all_up(etcd, brokers)
    create(brokers[1], "a3", 1)
    ps = placed(etcd, "a3", 1)[0]
    L = ps["leader"]
    F1, F2 = [i for i in RACKS if i != L]
    roles_up(brokers, "a3", 0, ps)
    mqctl_ok(brokers[F1], "topic", "alter", "a3", "--config", "acks=leader", "--config",
             "retention_bytes=1048576")
    cfg = get_json(etcd.port, "/mqd/topics/a3")["config"]
    check(cfg.get("acks") == "leader" and cfg.get("retention_bytes") == 1048576,
          "registration config %r" % cfg)
    for i, b in brokers.items():
        wait_for("node %d shows acks=leader" % i, lambda: (lambda v: v and
                 v["config"]["acks"] == "leader" and v["config"]["retention_bytes"] == 1048576 and
                 v["overrides"].get("acks") == "leader")(show(b, "a3")), 10)
    log("alter on follower %d: etcd and all three nodes show acks=leader, retention 1 MiB" % F1)
    # the leader applies it without a restart: with both followers stopped, sends with the
    # topic's acks are accepted (acks = all would wait for the in-sync set to shrink)
    for f in (F1, F2):
        os.kill(brokers[f].pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        send_all(brokers[L].url, "a3", 20, "ack", timeout=5)
        log("20 acks=leader sends accepted in %.2fs with both followers stopped"
            % (time.monotonic() - t0))
    finally:
        for f in (F1, F2):
            os.kill(brokers[f].pid, signal.SIGCONT)
    # two alters at once on two nodes: both land
    ctl = mqdtest.mqctl_bin()
    procs = [subprocess.Popen([ctl, "--url", brokers[F1].url, "topic", "alter", "a3", "--config",
                               "dedup_window_ms=5000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE),
             subprocess.Popen([ctl, "--url", brokers[F2].url, "topic", "alter", "a3", "--config",
                               "max_delivery_count=7"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)]
    for p in procs:
        out, err = p.communicate(timeout=30 * SLOW)
        check(p.returncode == 0, "concurrent alter: %d %s" % (p.returncode, err.decode()))
    cfg = get_json(etcd.port, "/mqd/topics/a3")["config"]
    check(cfg.get("dedup_window_ms") == 5000 and cfg.get("max_delivery_count") == 7 and
          cfg.get("acks") == "leader", "after two concurrent alters: %r" % cfg)
    for i, b in brokers.items():
        wait_for("node %d has both alters" % i, lambda: (lambda v: v and
                 v["config"]["dedup_window_ms"] == 5000 and
                 v["config"]["max_delivery_count"] == 7)(show(b, "a3")), 10)
    log("two concurrent alters on nodes %d and %d both landed: %r" % (F1, F2, cfg))
    rc, out, err = mqdtest.mqctl(brokers[F2].url, "topic", "alter", "a3", "--config",
                                 "replication_factor=2")
    check(rc == 4 and "reassign" in err, "replication_factor change: %d %s" % (rc, err))


def case_grow(t, etcd, brokers):
    all_up(etcd, brokers)
    create(brokers[2], "g3", 2)
    old = placed(etcd, "g3", 2)
    for p in range(2):
        roles_up(brokers, "g3", p, old[p])
    prods = [Producer(etcd, "/mqd/partitions/g3/%d" % p, brokers, "g3/Partitions/%d" % p,
                      max_msgs=100000) for p in range(2)]
    for pr in prods:
        pr.th.start()
    wait_for("producers accepted sends", lambda: all(len(pr.accepted()) >= 50 for pr in prods), 30)
    gid = get_json(etcd.port, "/mqd/topics/g3")["id"]
    mqctl_ok(brokers[3], "topic", "alter", "g3", "--partitions", "4")
    now = placed(etcd, "g3", 4)
    for p in range(2):
        check(now[p]["leader"] == old[p]["leader"] and now[p]["epoch"] == old[p]["epoch"] and
              now[p]["replicas"] == old[p]["replicas"], "partition %d moved: %r -> %r"
              % (p, old[p], now[p]))
    for p in (2, 3):
        check(now[p].get("topic_id") == gid and sorted(now[p]["replicas"]) == [1, 2, 3] and
              now[p]["epoch"] == 1, "new partition %d: %r" % (p, now[p]))
    for i, b in brokers.items():
        wait_for("node %d has 4 partitions" % i, lambda: (lambda v: v and v["partitions"] == 4)(
            show(b, "g3")), 10)
    for p in (2, 3):
        roles_up(brokers, "g3", p, now[p])
        send_all(brokers[now[p]["leader"]].url, "g3/Partitions/%d" % p, 200, "n%d" % p)
    time.sleep(1.0 * SLOW)
    for pr in prods:
        pr.stop.set()
    for pr in prods:
        pr.th.join(60)
    for p, pr in enumerate(prods):
        acc = [ev[1] for ev in pr.accepted()]
        r = Receiver(brokers[now[p]["leader"]].url, "g3/ConsumerGroups/chk/Partitions/%d" % p,
                     None, idle_s=2.0)
        mqdtest.run_container(r, 60)
        missing = set(acc) - set(r.bodies)
        check(not missing, "partition %d: %d accepted sends not served, e.g. %r"
              % (p, len(missing), sorted(missing)[:3]))
        log("partition %d: %d accepted under the grow, all %d read" % (p, len(acc), len(r.bodies)))
    return now


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    # auto-create off: the producer that goes on after the delete must not make a local r3
    brokers = start_nodes(t, etcd, RACKS, lambda i: {"replica_lag_ms": 10000,
                                                     "auto_create_topics": "off"})
    coll = mqdtest.Collect()
    r3_leader = None
    grown = None
    with coll.case("(a) delete from a follower, a node down meanwhile, re-create"):
        r3_leader = case_delete(t, etcd, brokers)
    r4_leader = None
    with coll.case("(a2) deleted and created again while a node is down"):
        r4_leader = case_recreate_while_down(t, etcd, brokers)
    with coll.case("(b) alter the settings on a follower"):
        case_alter(t, etcd, brokers)
    with coll.case("(c) 2 -> 4 partitions under running producers"):
        grown = case_grow(t, etcd, brokers)
    with coll.case("logs byte-equal on the three nodes"):
        check(r3_leader and grown, "earlier cases failed")
        counts = {}
        for p in range(4):
            d = os.path.join(brokers[grown[p]["leader"]].data_dir, "topics", "g3", str(p))
            check(os.path.isdir(d), "no %s" % d)
        raws = {}
        time.sleep(1.0 * SLOW)
        for b in brokers.values():
            b.stop()
        from mqdcluster import count_records, partition_bytes
        for p in range(4):
            raws[p] = {i: partition_bytes(b, "g3", p) for i, b in brokers.items()}
            counts[p] = count_records(raws[p][grown[p]["leader"]])
            for i in brokers:
                check(raws[p][i] == raws[p][grown[p]["leader"]], "g3/%d: node %d differs (%d vs %d "
                      "bytes)" % (p, i, len(raws[p][i]), len(raws[p][grown[p]["leader"]])))
        log("g3 records per partition %r, byte-equal on 3 nodes" % counts)
        check(counts[2] == 200 and counts[3] == 200, "new partitions hold %r" % counts)
        stopped_logs_equal(brokers, "r3", 0, r3_leader, 10)
        check(r4_leader, "case (a2) failed")
        stopped_logs_equal(brokers, "r4", 0, r4_leader, 10)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=400)
