#!/usr/bin/python3
"""AMQP 0-9-1 on mqd's listener with pika (Debian's python3-pika), against mqd's users and
[acl] (docs/amqp091.md).
- The protocol header picks the front end: pika connects to the same port as AMQP 1.0
  clients, logs in with PLAIN; a wrong password is refused (403 ACCESS_REFUSED).
- queue.declare creates the topic (the user has 'create'); 1,000 messages published with
  publisher confirms: 1,000 acks, every one after its record is durable (a restart with
  SIGKILL right after the last ack loses none).
- basic.consume with manual acks and prefetch 50: 1,000 messages, in order, contents and
  properties (content-type, headers, message-id, correlation-id) as published, never more
  than 50 unacked at once.
- basic.nack(requeue=True) redelivers with redelivered=True; basic.reject(requeue=False)
  drops; unacked messages of a closed channel go to the next consumer, redelivered.
- basic.get, get-empty; mandatory publish to a missing queue comes back as basic.return
  (312 NO_ROUTE).
- x-stream-offset (first, last, next, an offset, a timestamp): each stream consumer reads
  from its own position, with the offset as header x-stream-offset, and leaves the
  queue's `$shared` group untouched.
- an ACL reload (SIGHUP) that takes alice's 'receive' cancels her live consumer (a
  basic.cancel from the broker) before it gets another message.
- queue.purge moves the queue's group past everything (message_count returned, then
  get-empty); queue.delete (needs 'manage') removes the topic: a passive declare is 404.
- ACL: bob (receive only) publishing gets channel error 403 ACCESS_REFUSED and nothing is
  stored; carol (no rights on the queue) cannot consume (403)."""

import datetime
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log  # noqa: E402


pika = a9.pika

PW = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
N = 1000


def params(b, user):
    return a9.params(b.port, user, PW[user])


def publish_confirmed(b, q, n):
    conn = pika.BlockingConnection(params(b, "alice"))
    ch = conn.channel()
    ch.queue_declare(queue=q, durable=True)
    ch.confirm_delivery()
    t0 = time.time()
    for i in range(n):
        props = pika.BasicProperties(content_type="text/plain", delivery_mode=2,
                                     message_id="m-%d" % i, correlation_id="c-%d" % i,
                                     headers={"seq": i, "colour": "red" if i % 2 else "blue"})
        # BlockingChannel.basic_publish waits for the confirm: raises on nack / return
        ch.basic_publish(exchange="", routing_key=q, body=("body-%d" % i).encode(),
                         properties=props, mandatory=True)
    log("%d confirmed publishes in %.2fs" % (n, time.time() - t0))
    conn.close()


def consume_all(b, q, n, prefetch):
    conn = pika.BlockingConnection(params(b, "alice"))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    got, max_unacked = a9.consume_acked(ch, q, n, 60)
    conn.close()
    return got, max_unacked


def body(t):
    a9.need_pika()
    users = (a9.mqd_passwd("alice", PW["alice"]) + a9.mqd_passwd("bob", PW["bob"]) +
             a9.mqd_passwd("carol", PW["carol"]))
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\n")
        f.write(users)
        f.write("[acl]\nallow alice send,receive,create,manage q.*\nallow bob receive q.*\n"
                "allow carol send other.*\n")
    b = t.broker("a091", conf=conf)
    coll = mqdtest.Collect()

    with coll.case("wrong password refused"):
        try:
            c = pika.BlockingConnection(pika.ConnectionParameters(
                host="127.0.0.1", port=b.port, credentials=pika.PlainCredentials("alice", "nope"),
                connection_attempts=1, socket_timeout=10 * mqdtest.SLOW))
            c.close()
            check(False, "login with a wrong password succeeded")
        except pika.exceptions.ProbableAuthenticationError as e:
            log("refused as expected: %r" % e)
        except pika.exceptions.AMQPConnectionError as e:
            check("ACCESS_REFUSED" in repr(e) or "403" in repr(e), "refusal: %r" % e)

    with coll.case("1,000 confirmed publishes survive SIGKILL"):
        publish_confirmed(b, "q.orders", N)
        b.kill()
        b.start()

    with coll.case("consume 1,000 with acks: order, contents, properties, prefetch"):
        got, max_unacked = consume_all(b, "q.orders", N, 50)
        check(len(got) == N, "consumed %d, want %d" % (len(got), N))
        for i, (m, p, body_) in enumerate(got):
            check(body_ == ("body-%d" % i).encode(), "message %d: body %r" % (i, body_[:40]))
            check(p.message_id == "m-%d" % i and p.correlation_id == "c-%d" % i,
                  "message %d: ids %r %r" % (i, p.message_id, p.correlation_id))
            check(p.content_type == "text/plain" and p.delivery_mode == 2,
                  "message %d: content_type %r delivery_mode %r" % (i, p.content_type, p.delivery_mode))
            check(p.headers and p.headers.get("seq") == i and
                  p.headers.get("colour") == ("red" if i % 2 else "blue"),
                  "message %d: headers %r" % (i, p.headers))
            check(not m.redelivered, "message %d redelivered" % i)
            check(m.routing_key == "q.orders", "routing key %r" % m.routing_key)
        check(max_unacked <= 50, "%d unacked at once with prefetch 50" % max_unacked)

    with coll.case("nack requeue redelivers; reject drops; a closed channel's unacked return"):
        conn = pika.BlockingConnection(params(b, "alice"))
        ch = conn.channel()
        ch.queue_declare(queue="q.redo", durable=True)
        ch.confirm_delivery()
        for i in range(3):
            ch.basic_publish(exchange="", routing_key="q.redo", body=b"r%d" % i)
        m, p, bd = ch.basic_get("q.redo", auto_ack=False)
        check(bd == b"r0" and not m.redelivered, "first get %r %r" % (bd, m and m.redelivered))
        ch.basic_nack(m.delivery_tag, requeue=True)
        m, p, bd = ch.basic_get("q.redo", auto_ack=False)
        check(bd == b"r0" and m.redelivered, "after nack requeue: %r redelivered=%r" % (bd, m.redelivered))
        ch.basic_reject(m.delivery_tag, requeue=False)
        m, p, bd = ch.basic_get("q.redo", auto_ack=False)
        check(bd == b"r1", "after reject: %r, want r1" % bd)
        ch.close()  # r1 unacked: back to the queue
        ch2 = conn.channel()
        m, p, bd = ch2.basic_get("q.redo", auto_ack=False)
        check(bd == b"r1" and m.redelivered, "after channel close: %r redelivered=%r" % (bd, m and m.redelivered))
        ch2.basic_ack(m.delivery_tag)
        m, p, bd = ch2.basic_get("q.redo", auto_ack=True)
        check(bd == b"r2", "next: %r" % bd)
        m, p, bd = ch2.basic_get("q.redo", auto_ack=True)
        check(m is None, "get on an empty queue: %r" % bd)
        conn.close()

    with coll.case("mandatory publish to a missing queue returns 312 NO_ROUTE"):
        conn = pika.BlockingConnection(params(b, "alice"))
        ch = conn.channel()
        ch.confirm_delivery()
        try:
            ch.basic_publish(exchange="", routing_key="q.nowhere", body=b"x", mandatory=True)
            check(False, "unroutable mandatory publish was not returned")
        except pika.exceptions.UnroutableError as e:
            check(e.messages[0].method.reply_code == 312, "return: %r" % e.messages[0].method)
        conn.close()

    with coll.case("ACL: publish without 'send' is a 403 channel error, nothing stored"):
        conn = pika.BlockingConnection(params(b, "bob"))
        ch = conn.channel()
        ch.queue_declare(queue="q.orders", passive=True)
        try:
            ch.basic_publish(exchange="", routing_key="q.orders", body=b"from bob")
            ch.queue_declare(queue="q.orders", passive=True)  # the close arrives first
            check(False, "bob's publish was not refused")
        except pika.exceptions.ChannelClosedByBroker as e:
            check(e.reply_code == 403 and "ACCESS_REFUSED" in e.reply_text, "refusal %r" % e)
        conn.close()
        conn = pika.BlockingConnection(params(b, "alice"))
        ch = conn.channel()
        m, p, bd = ch.basic_get("q.orders", auto_ack=True)
        check(m is None, "something was stored: %r" % bd)
        conn.close()

    with coll.case("ACL: consume without 'receive' is refused (403)"):
        conn = pika.BlockingConnection(params(b, "carol"))
        ch = conn.channel()
        try:
            ch.basic_consume("q.orders", lambda *a: None)
            check(False, "carol's consume was not refused")
        except pika.exceptions.ChannelClosedByBroker as e:
            check(e.reply_code == 403, "refusal %r" % e)
        conn.close()

    with coll.case("x-stream-offset: first, last, next, an offset, a timestamp"):
        conn = pika.BlockingConnection(params(b, "alice"))
        ch = conn.channel()
        ch.queue_declare(queue="q.stream", durable=True)
        ch.confirm_delivery()
        for i in range(10):
            ch.basic_publish(exchange="", routing_key="q.stream", body=b"s%d" % i)
        time.sleep(0.05)
        t_mid = datetime.datetime.fromtimestamp(int(time.time()) + 1, tz=datetime.timezone.utc)
        time.sleep(max(0.0, t_mid.timestamp() - time.time()) + 0.05)
        for i in range(10, 15):
            ch.basic_publish(exchange="", routing_key="q.stream", body=b"s%d" % i)

        def read(spec, n):
            ch2 = conn.channel()
            ch2.basic_qos(prefetch_count=5)
            out = []
            for m, p, bd in ch2.consume("q.stream", arguments={"x-stream-offset": spec},
                                        inactivity_timeout=1 * mqdtest.SLOW):
                if m is None:
                    break
                out.append((bd, p.headers.get("x-stream-offset")))
                ch2.basic_ack(m.delivery_tag)
                if len(out) >= n + 3:
                    break
            ch2.close()
            return out

        want = [(b"s%d" % i, i) for i in range(15)]
        got = read("first", 15)
        check(got == want, "first: %r" % got[:4])
        got = read("last", 1)
        check(got == want[14:], "last: %r" % got)
        got = read(7, 8)
        check(got == want[7:], "offset 7: %r" % got[:3])
        got = read(t_mid, 5)
        check(got == want[10:], "timestamp: %r" % got)
        ch3 = conn.channel()
        ch3.basic_qos(prefetch_count=5)
        nxt = []
        ch3.basic_consume("q.stream", lambda c_, m, p, bd: (nxt.append(bd), c_.basic_ack(m.delivery_tag)),
                          arguments={"x-stream-offset": "next"})
        conn.process_data_events(time_limit=0.3)
        check(nxt == [], "next delivered old messages: %r" % nxt)
        ch.basic_publish(exchange="", routing_key="q.stream", body=b"s15")
        deadline = time.time() + 5 * mqdtest.SLOW
        while not nxt and time.time() < deadline:
            conn.process_data_events(time_limit=0.1)
        check(nxt == [b"s15"], "next: %r" % nxt)
        try:
            ch4 = conn.channel()
            ch4.basic_consume("q.stream", lambda *a: None, arguments={"x-stream-offset": "sideways"})
            check(False, "a bad x-stream-offset was accepted")
        except pika.exceptions.ChannelClosedByBroker as e:
            check(e.reply_code == 406, "bad x-stream-offset: %r" % e)
        m, p, bd = ch.basic_get("q.stream", auto_ack=True)
        check(bd == b"s0", "the queue's group moved: %r" % bd)
        conn.close()

    with coll.case("queue.purge and queue.delete"):
        conn = pika.BlockingConnection(params(b, "alice"))
        ch = conn.channel()
        ch.queue_declare(queue="q.purge", durable=True)
        ch.confirm_delivery()
        for i in range(7):
            ch.basic_publish(exchange="", routing_key="q.purge", body=b"p%d" % i)
        n = ch.queue_purge("q.purge").method.message_count
        check(n == 7, "purge-ok message_count %d, want 7" % n)
        m, p, bd = ch.basic_get("q.purge", auto_ack=True)
        check(m is None, "after purge: %r" % bd)
        ch.basic_publish(exchange="", routing_key="q.purge", body=b"after")
        m, p, bd = ch.basic_get("q.purge", auto_ack=True)
        check(bd == b"after", "after purge and a publish: %r" % bd)
        ch.queue_delete("q.purge")
        try:
            ch.queue_declare(queue="q.purge", passive=True)
            check(False, "the deleted queue is still there")
        except pika.exceptions.ChannelClosedByBroker as e:
            check(e.reply_code == 404, "passive declare after delete: %r" % e)
        conn.close()
        conn = pika.BlockingConnection(params(b, "bob"))
        ch = conn.channel()
        try:
            ch.queue_delete("q.orders")
            check(False, "bob deleted a queue without 'manage'")
        except pika.exceptions.ChannelClosedByBroker as e:
            check(e.reply_code == 403, "bob's delete: %r" % e)
        conn.close()

    with coll.case("SIGHUP that takes 'receive' cancels a live consumer"):
        conn = pika.BlockingConnection(params(b, "alice"))
        ch = conn.channel()
        ch.queue_declare(queue="q.live", durable=True)
        ch.confirm_delivery()
        ch.basic_publish(exchange="", routing_key="q.live", body=b"before")
        got, cancelled = [], []
        ch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        ch.basic_consume("q.live", lambda c_, m, p, bd: (got.append(bd), c_.basic_ack(m.delivery_tag)))
        deadline = time.time() + 5 * mqdtest.SLOW
        while not got and time.time() < deadline:
            conn.process_data_events(time_limit=0.1)
        check(got == [b"before"], "before the reload: %r" % got)
        with open(conf, "w") as f:
            f.write("allow_anonymous = off\n")
            f.write(users)
            f.write("[acl]\nallow alice send,create,manage q.*\nallow bob receive q.*\n"
                    "allow carol send other.*\n")
        os.kill(b.pid, signal.SIGHUP)
        deadline = time.time() + 10 * mqdtest.SLOW
        while not cancelled and time.time() < deadline:
            conn.process_data_events(time_limit=0.1)
        check(cancelled, "no basic.cancel after the reload")
        ch.basic_publish(exchange="", routing_key="q.live", body=b"after")
        conn.process_data_events(time_limit=0.5)
        check(got == [b"before"], "delivered after the right was taken: %r" % got)
        conn.close()

    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
