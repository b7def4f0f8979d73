#!/usr/bin/python3
"""AMQP 0-9-1 through any node of a cluster (issue 37 with issue 33's forwarding,
docs/amqp091.md "In a cluster"): pika connected to one node of three uses queues whose
partitions other nodes lead.

A real etcd and three nodes; queues are topics of 3 partitions, replication_factor 3,
dedup_window_ms 10 min, leaders spread over the nodes (moved with `mqctl cluster elect`
when the placement did not spread them). pika logs in to node E = 1 as carol, whose [acl]
rights cover orders.* only (the leaders authorize the forwarded reads and writes as carol,
mqd:fwd-user).
(a) 1,000 publishes with confirms to orders.a091 through E: every one acked; read back from
    each partition's leader with Proton, every message is stored exactly once, and every
    partition has its share (publishes go round robin over the partitions: two thirds of
    them were forwarded to another node).
(b) basic.consume through E with manual acks and prefetch 50: every message once, none
    redelivered, never more than 50 unacked; after the acks a new consumer gets nothing
    (the acks were applied on the leaders).
(c) basic.get through E: 30 more messages published, fetched with basic.get (get-empty
    while the legs attach) and acked: all 30, once; then get-empty.
(d) nack with requeue through E: the message comes back with redelivered = true.
(e) a leader is SIGKILLed during publishing: a pika publisher on E sends 1,000 messages
    (message-id set) with confirms to orders.kill; after 300 confirms the node leading a
    partition (not E) is SIGKILLed; the publisher goes on (a nack is allowed, a hang is
    not). After the run and the node's restart, every message that was confirmed is
    stored (read from the leaders), none twice.
(f) a queue node 1 holds no replica of (1 partition, replication_factor 1, made on node 2):
    20 confirmed publishes and a consume through node 1 (its partition count comes from
    the cluster's registration)."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdcluster import Etcd, get_json, wait_for  # noqa: E402
from mqdfwd import PW, create_topic, leaders_of, read_partitions, start_cluster, url_as  # noqa: E402
from mqdtest import SLOW, check, log, skip  # noqa: E402

NP = 3
N = 1000
Q = "orders.a091"
QK = "orders.kill"
QS = "orders.solo"


def spread(etcd, brokers, topic):
    """Moves leaders until each node leads one partition of topic; {partition: leader}."""
    for _ in range(6):
        lead = leaders_of(etcd, topic, NP)
        if set(lead.values()) == {1, 2, 3}:
            return lead
        used = set(lead.values())
        free = sorted({1, 2, 3} - used)[0]
        dup = [p for p in range(NP) if list(lead.values()).count(lead[p]) > 1][0]
        rc, out, err = mqdtest.mqctl(url_as(brokers[1], "admin"), "cluster", "elect", topic,
                                     str(dup), str(free))
        check(rc == 0, "elect %s/%d on %d: %s" % (topic, dup, free, out + err))
        wait_for("node %d leading %s/%d" % (free, topic, dup),
                 lambda: leaders_of(etcd, topic, NP)[dup] == free, 20)
    lead = leaders_of(etcd, topic, NP)
    check(set(lead.values()) == {1, 2, 3}, "leaders of %s not spread: %r" % (topic, lead))
    return lead


def conn(b):
    return a9.connect(b.port, "carol", PW["carol"])


def publish(b, q, n, tag):
    c = conn(b)
    ch = c.channel()
    ch.confirm_delivery()
    t0 = time.monotonic()
    for i in range(n):
        # BlockingChannel.basic_publish waits for the confirm: raises on a nack
        ch.basic_publish(exchange="", routing_key=q, body=("%s:%d" % (tag, i)).encode(),
                         properties=a9.pika.BasicProperties(message_id="%s-%d" % (tag, i),
                                                            delivery_mode=2))
    log("%d confirmed publishes to %s through node 1 in %.2f s" % (n, q, time.monotonic() - t0))
    c.close()


def stored(brokers, etcd, q, group):
    parts = read_partitions(brokers, etcd, q, group, NP)
    bodies = [x for p in range(NP) for x in parts[p]]
    return parts, [x.decode() if isinstance(x, bytes) else str(x) for x in bodies]


def deliveries(ch, q, wait):
    """The deliveries of a consumer of q on ch, until `wait` seconds (x SLOW) passed."""
    deadline = time.monotonic() + wait * SLOW
    for m, p, body in ch.consume(q, auto_ack=False, inactivity_timeout=0.5 * SLOW):
        if m is not None:
            yield m, body.decode()
        elif time.monotonic() > deadline:
            return


def consume(b, q, n, prefetch=50, wait=90):
    c = conn(b)
    ch = c.channel()
    ch.basic_qos(prefetch_count=prefetch)
    t0 = time.monotonic()
    got, max_unacked = a9.consume_acked(ch, q, n, wait)
    got = [(m, body.decode()) for m, _, body in got]
    c.close()
    log("consumed %d of %s through node 1 in %.2f s" % (len(got), q, time.monotonic() - t0))
    return got, max_unacked


def body(t):
    a9.need_pika()
    import shutil
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    etcd = Etcd(t)
    etcd.start()
    brokers = start_cluster(t, etcd)
    E = brokers[1]
    coll = mqdtest.Collect()
    create_topic(etcd, E, Q, NP)
    log("leaders of %s: %r" % (Q, spread(etcd, brokers, Q)))

    with coll.case("(a) 1,000 confirmed publishes through a follower, each stored once"):
        publish(E, Q, N, "a")
        parts, bodies = stored(brokers, etcd, Q, "chk")
        want = ["a:%d" % i for i in range(N)]
        check(sorted(bodies) == sorted(want),
              "stored %d (%d distinct), want %d: missing %r" %
              (len(bodies), len(set(bodies)), N, sorted(set(want) - set(bodies))[:5]))
        for p in range(NP):
            check(abs(len(parts[p]) - N / NP) <= 1, "partition %d holds %d" % (p, len(parts[p])))

    with coll.case("(b) consume through the follower: every message once, with acks"):
        got, max_unacked = consume(E, Q, N)
        names = [x for _, x in got]
        check(len(got) == N and sorted(names) == sorted("a:%d" % i for i in range(N)),
              "consumed %d (%d distinct) of %d" % (len(got), len(set(names)), N))
        check(not any(m.redelivered for m, _ in got), "a first delivery marked redelivered")
        check(max_unacked <= 50, "%d unacked with prefetch 50" % max_unacked)
        again, _ = consume(E, Q, 1, wait=3)
        check(not again, "after the acks a new consumer got %r" % [x for _, x in again][:3])

    with coll.case("(c) basic.get through the follower"):
        publish(E, Q, 30, "g")
        c = conn(E)
        ch = c.channel()
        got = []
        deadline = time.monotonic() + 30 * SLOW
        while len(got) < 30 and time.monotonic() < deadline:
            m, p, b = ch.basic_get(Q, auto_ack=False)
            if m is None:
                time.sleep(0.05)
                continue
            got.append(b.decode())
            ch.basic_ack(m.delivery_tag)
        check(sorted(got) == sorted("g:%d" % i for i in range(30)),
              "basic.get: %d (%d distinct) of 30" % (len(got), len(set(got))))
        time.sleep(1.0 * SLOW)
        m, _, b = ch.basic_get(Q, auto_ack=False)
        check(m is None, "get after everything was acked: %r" % (b,))
        c.close()

    with coll.case("(d) nack with requeue comes back redelivered"):
        publish(E, Q, 1, "n")
        c = conn(E)
        ch = c.channel()
        seen = []
        for m, text in deliveries(ch, Q, 30):
            seen.append((text, m.redelivered))
            if len(seen) == 1:
                ch.basic_nack(m.delivery_tag, requeue=True)
            else:
                ch.basic_ack(m.delivery_tag)
                break
        ch.cancel()
        c.close()
        check(seen == [("n:0", False), ("n:0", True)], "nack/requeue: %r" % seen)

    with coll.case("(f) a queue node 1 holds no copy of (replication_factor 1 on node 2)"):
        rc, out, err = mqdtest.mqctl(url_as(brokers[2], "admin"), "topic", "create", QS,
                                     "--partitions", "1", "--config", "replication_factor=1")
        check(rc == 0, "create %s: %s" % (QS, out + err))
        st = wait_for("%s placed" % QS, lambda: get_json(etcd.port, "/mqd/partitions/%s/0" % QS), 20)
        log("%s: leader %r, replicas %r" % (QS, st.get("leader"), st.get("isr")))
        check(1 not in (st.get("isr") or []), "node 1 holds a copy of %s: %r" % (QS, st))
        publish(E, QS, 20, "s")
        c = conn(E)
        ch = c.channel()
        got, _ = a9.consume_acked(ch, QS, 20, 30)
        c.close()
        check(sorted(b.decode() for _, _, b in got) == sorted("s:%d" % i for i in range(20)),
              "consumed %r" % [b for _, _, b in got][:5])

    with coll.case("(e) a leader SIGKILLed during confirmed publishing: nothing confirmed lost"):
        create_topic(etcd, E, QK, NP)
        lead = spread(etcd, brokers, QK)
        victim = [n for n in lead.values() if n != 1][0]
        confirmed, nacked, errors = [], [], []

        def pub():
            try:
                c = conn(E)
                ch = c.channel()
                ch.confirm_delivery()
                for i in range(N):
                    try:
                        ch.basic_publish(exchange="", routing_key=QK, body=("k:%d" % i).encode(),
                                         properties=a9.pika.BasicProperties(
                                             message_id="k-%d" % i, delivery_mode=2))
                        confirmed.append(i)
                    except a9.pika.exceptions.NackError:
                        nacked.append(i)
                c.close()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
        th = threading.Thread(target=pub, daemon=True)
        th.start()
        wait_for("300 confirms", lambda: len(confirmed) >= 300 or errors or not th.is_alive(), 60)
        brokers[victim].kill()
        log("node %d (leader of %r) SIGKILLed after %d confirms" %
            (victim, [p for p, n in lead.items() if n == victim], len(confirmed)))
        th.join(180 * SLOW)
        check(not th.is_alive(), "the publisher hangs: %d confirmed %d nacked" %
              (len(confirmed), len(nacked)))
        check(not errors, "publisher: %r" % errors)
        log("%d confirmed, %d nacked" % (len(confirmed), len(nacked)))
        check(len(confirmed) + len(nacked) == N, "%d + %d of %d" % (len(confirmed), len(nacked), N))
        brokers[victim].start()
        wait_for("full in-sync sets of %s" % QK, lambda: all(
            len(get_json(etcd.port, "/mqd/partitions/%s/%d" % (QK, p))["isr"]) == 3
            for p in range(NP)), 60)
        _, bodies = stored(brokers, etcd, QK, "chk")
        have = set(bodies)
        lost = [i for i in confirmed if "k:%d" % i not in have]
        check(not lost, "%d confirmed messages lost, e.g. %r" % (len(lost), lost[:5]))
        dups = len(bodies) - len(have)
        check(dups == 0, "%d messages stored twice" % dups)
        log("every confirmed message stored once (%d stored)" % len(bodies))

    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=600)
