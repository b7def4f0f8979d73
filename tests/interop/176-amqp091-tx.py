#!/usr/bin/python3
"""AMQP 0-9-1 transactions (tx.select / tx.commit / tx.rollback) with pika (Debian's
python3-pika) on mqd (docs/amqp091.md, src/amqp091/tx.c): as RabbitMQ's, publishes and
acks on a transactional channel are kept until tx.commit and dropped by tx.rollback.
- (a) 10 publishes then tx.rollback: none stored (a second channel's basic.get is empty);
  20 publishes to q.tx-a and 20 through a fanout exchange bound to q.tx-a and q.tx-b, then
  tx.commit: before the commit a get finds nothing, after commit-ok q.tx-a holds all 40 in
  publish order and q.tx-b 20; SIGKILL right after the commit-ok loses none (the commit
  is answered once every store is durable).
- (b) acks: 10 messages got with manual acks on a transactional channel, acked one by
  one, then tx.rollback: after the channel closes all 10 come back (redelivered); 10 got
  and acked then tx.commit: gone for good (a new consumer gets get-empty).
- (c) errors: tx.commit on a channel without tx.select: 406; confirm.select after
  tx.select and tx.select after confirm.select: 406; an ack of an unknown tag on a
  transactional channel: 406 at once."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log  # noqa: E402

pika = a9.pika
PW = "alice-pw"


def conn(b):
    return pika.BlockingConnection(a9.params(b.port, "alice", PW))


def drain(ch, q, limit=1000):
    """Every message basic.get finds on q (auto ack): bodies in order."""
    out = []
    while len(out) < limit:
        m, _, body = ch.basic_get(q, auto_ack=True)
        if m is None:
            break
        out.append(body.decode())
    return out


def channel_error(fn):
    """The reply code of the channel error fn provokes (None: no error)."""
    try:
        fn()
    except pika.exceptions.ChannelClosedByBroker as e:
        log("channel closed: %d %s" % (e.reply_code, e.reply_text))
        return e.reply_code
    return None


def body(t):
    a9.need_pika()
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\n" + a9.mqd_passwd("alice", PW) +
                "[acl]\nallow alice send,receive,create,manage q.*\n"
                "allow alice send,receive,create,manage tx-fan\n")
    b = t.broker("a091tx", conf=conf)
    coll = mqdtest.Collect()

    with coll.case("(a) publishes: rollback drops them, commit stores them durably"):
        c = conn(b)
        ch, peek = c.channel(), c.channel()
        for q in ("q.tx-a", "q.tx-b"):
            ch.queue_declare(queue=q, durable=True)
        ch.exchange_declare(exchange="tx-fan", exchange_type="fanout", durable=True)
        ch.queue_bind(queue="q.tx-a", exchange="tx-fan")
        ch.queue_bind(queue="q.tx-b", exchange="tx-fan")
        ch.tx_select()
        for i in range(10):
            ch.basic_publish(exchange="", routing_key="q.tx-a", body=("gone-%d" % i).encode())
        ch.tx_rollback()
        check(drain(peek, "q.tx-a") == [], "a rolled back publish was stored")
        want_a = []
        for i in range(20):
            ch.basic_publish(exchange="", routing_key="q.tx-a", body=("direct-%d" % i).encode())
            ch.basic_publish(exchange="tx-fan", routing_key="", body=("fan-%d" % i).encode())
            want_a += ["direct-%d" % i, "fan-%d" % i]
        check(drain(peek, "q.tx-a") == [], "a publish was stored before tx.commit")
        ch.tx_commit()
        c.close()
        b.kill()  # SIGKILL right after commit-ok: every store was durable
        b.start()
        c = conn(b)
        peek = c.channel()
        got_a, got_b = drain(peek, "q.tx-a"), drain(peek, "q.tx-b")
        log("after the commit and a SIGKILL: q.tx-a %d, q.tx-b %d" % (len(got_a), len(got_b)))
        check(got_a == want_a, "q.tx-a: %r... (%d)" % (got_a[:4], len(got_a)))
        check(got_b == ["fan-%d" % i for i in range(20)], "q.tx-b: %r... (%d)" % (got_b[:4], len(got_b)))
        c.close()

    with coll.case("(b) acks: rollback keeps the messages, commit takes them"):
        c = conn(b)
        ch = c.channel()
        ch.queue_declare(queue="q.tx-acks", durable=True)
        ch.confirm_delivery()
        for i in range(20):
            ch.basic_publish(exchange="", routing_key="q.tx-acks", body=("m-%d" % i).encode())
        rx = c.channel()
        rx.tx_select()
        tags = []
        for _ in range(10):
            m, _, _ = rx.basic_get("q.tx-acks", auto_ack=False)
            check(m is not None, "basic.get found nothing")
            tags.append(m.delivery_tag)
        for tg in tags:
            rx.basic_ack(tg)
        rx.tx_rollback()
        rx.close()  # the 10 were never acked: back to the queue
        rx = c.channel()
        rx.tx_select()
        bodies, redelivered = [], 0
        for _ in range(20):
            m, _, bd = rx.basic_get("q.tx-acks", auto_ack=False)
            check(m is not None, "basic.get found nothing after %d" % len(bodies))
            bodies.append(bd.decode())
            redelivered += m.redelivered
            rx.basic_ack(m.delivery_tag)
        rx.tx_commit()
        log("after the rollback: %d read again (%d redelivered), acked and committed" % (len(bodies), redelivered))
        check(sorted(bodies) == sorted("m-%d" % i for i in range(20)), "bodies: %r" % bodies)
        check(redelivered == 10, "%d redelivered, want the 10 rolled back" % redelivered)
        rx.close()
        rx = c.channel()
        m, _, _ = rx.basic_get("q.tx-acks", auto_ack=False)
        check(m is None, "a committed ack did not take its message")
        c.close()

    with coll.case("(c) errors: 406 for commit without select, mixing with confirms, unknown tags"):
        c = conn(b)
        codes = [channel_error(lambda: c.channel().tx_commit())]
        ch = c.channel()
        ch.tx_select()
        codes.append(channel_error(lambda: ch.confirm_delivery()))
        ch = c.channel()
        ch.confirm_delivery()
        codes.append(channel_error(lambda: ch.tx_select()))
        ch = c.channel()
        ch.tx_select()
        ch.basic_ack(4242)
        codes.append(channel_error(lambda: ch.tx_commit()))
        check(codes == [406, 406, 406, 406], "reply codes %r" % codes)
        c.close()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
