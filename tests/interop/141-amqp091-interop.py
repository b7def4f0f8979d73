#!/usr/bin/python3
"""AMQP 0-9-1 and AMQP 1.0 on the same queue (docs/amqp091.md, "Properties and headers").
- 1,000 messages published with pika (confirms) are read by Proton from the topic's
  `$shared` queue: bodies in order as one data section, properties (message-id,
  correlation-id, reply-to, content-type, content-encoding, durable, priority, ttl,
  creation-time, user-id), headers as application-properties with their types, type /
  app-id / routing key as message annotations.
- 1,000 messages sent with Proton are consumed with pika: bodies (data and amqp-value
  string), message-id / correlation-id (strings, and a ulong id as its text),
  application-properties as headers, durable as delivery-mode 2, in order.
- One queue, both kinds of consumer: a 0-9-1 consumer and a 1.0 receiver share the
  `$shared` group, every message goes to exactly one of them."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Message, symbol, ulong  # noqa: E402

pika = a9.pika

PW = "alice-pw"
N = 1000


def pika_conn(b):
    return a9.connect(b.port, "alice", PW)


def proton_conn(b):
    return a9.proton_conn(b.url, "alice", PW)


def pika_to_proton(b):
    conn = pika_conn(b)
    ch = conn.channel()
    ch.queue_declare(queue="q.a", durable=True)
    ch.confirm_delivery()
    for i in range(N):
        props = pika.BasicProperties(
            content_type="application/json", content_encoding="utf-8", delivery_mode=2,
            priority=7, expiration="600000", message_id="m-%d" % i, correlation_id="c-%d" % i,
            reply_to="q.replies", timestamp=1700000000 + i, type="order.created", app_id="shop",
            user_id="alice", headers={"seq": i, "flag": i % 2 == 0, "name": "n-%d" % i})
        ch.basic_publish(exchange="", routing_key="q.a", body=b'{"i": %d}' % i, properties=props)
    conn.close()
    c = proton_conn(b)
    r = c.create_receiver("q.a", credit=200)
    for i in range(N):
        m = r.receive(timeout=10 * mqdtest.SLOW)
        r.accept()
        where = "message %d" % i
        check(m.body == b'{"i": %d}' % i, "%s: body %r" % (where, m.body))
        check(m.id == "m-%d" % i and m.correlation_id == "c-%d" % i, "%s: ids %r %r" % (where, m.id, m.correlation_id))
        check(m.content_type == "application/json" and m.content_encoding == "utf-8",
              "%s: content %r %r" % (where, m.content_type, m.content_encoding))
        check(m.reply_to == "q.replies", "%s: reply_to %r" % (where, m.reply_to))
        check(m.durable and m.priority == 7 and m.ttl == 600.0, "%s: durable %r priority %r ttl %r" %
              (where, m.durable, m.priority, m.ttl))
        check(abs(m.creation_time - (1700000000 + i)) < 0.001, "%s: creation_time %r" % (where, m.creation_time))
        check(m.user_id == b"alice", "%s: user_id %r" % (where, m.user_id))
        p = m.properties
        check(p == {"seq": i, "flag": i % 2 == 0, "name": "n-%d" % i}, "%s: app props %r" % (where, p))
        a = m.annotations
        check(a.get(symbol("x-basic-type")) == "order.created" and a.get(symbol("x-basic-app-id")) == "shop" and
              a.get(symbol("x-routing-key")) == "q.a", "%s: annotations %r" % (where, a))
    c.close()


def proton_to_pika(b):
    c = proton_conn(b)
    s = c.create_sender("q.b")
    for i in range(N):
        if i % 2:
            m = Message(body=("text-%d" % i), id=ulong(i), correlation_id="c-%d" % i, durable=True,
                        properties={"seq": i, "kind": "odd"}, content_type="text/plain")
        else:
            m = Message(body=("bin-%d" % i).encode(), id="m-%d" % i, durable=False,
                        properties={"seq": i, "kind": "even"})
            m.inferred = True  # a data section
        s.send(m)
    c.close()
    conn = pika_conn(b)
    ch = conn.channel()
    got = 0
    for method, props, body in ch.consume("q.b", auto_ack=False, inactivity_timeout=10 * mqdtest.SLOW):
        check(method is not None, "consumed %d of %d" % (got, N))
        i = got
        where = "message %d" % i
        if i % 2:
            check(body == ("text-%d" % i).encode(), "%s: body %r" % (where, body))
            check(props.message_id == str(i) and props.correlation_id == "c-%d" % i,
                  "%s: ids %r %r" % (where, props.message_id, props.correlation_id))
            check(props.content_type == "text/plain" and props.delivery_mode == 2,
                  "%s: %r %r" % (where, props.content_type, props.delivery_mode))
            check(props.headers == {"seq": i, "kind": "odd"}, "%s: headers %r" % (where, props.headers))
        else:
            check(body == ("bin-%d" % i).encode(), "%s: body %r" % (where, body))
            check(props.message_id == "m-%d" % i and props.delivery_mode == 1,
                  "%s: %r %r" % (where, props.message_id, props.delivery_mode))
            check(props.headers == {"seq": i, "kind": "even"}, "%s: headers %r" % (where, props.headers))
        check(method.routing_key == "q.b", "%s: routing key %r" % (where, method.routing_key))
        ch.basic_ack(method.delivery_tag)
        got += 1
        if got == N:
            break
    ch.cancel()
    conn.close()


def shared_queue(b):
    conn = pika_conn(b)
    ch = conn.channel()
    ch.queue_declare(queue="q.c", durable=True)
    ch.confirm_delivery()
    for i in range(200):
        ch.basic_publish(exchange="", routing_key="q.c", body=b"s%d" % i)
    ch.basic_qos(prefetch_count=10)
    c = proton_conn(b)
    r = c.create_receiver("q.c", credit=10)
    seen = []
    deadline = time.time() + 30 * mqdtest.SLOW
    tags = []
    for method, props, body in ch.consume("q.c", auto_ack=False, inactivity_timeout=0.05):
        if method is not None:
            seen.append(body)
            ch.basic_ack(method.delivery_tag)
        try:
            m = r.receive(timeout=0.05)
            seen.append(m.body if isinstance(m.body, bytes) else bytes(m.body))
            r.accept()
            tags.append(1)
        except Exception:
            pass
        if len(seen) >= 200 or time.time() > deadline:
            break
    ch.cancel()
    conn.close()
    c.close()
    check(sorted(seen) == sorted(b"s%d" % i for i in range(200)),
          "got %d messages, %d distinct" % (len(seen), len(set(seen))))
    log("1.0 receiver took %d of 200, the 0-9-1 consumer %d" % (len(tags), 200 - len(tags)))
    check(0 < len(tags) < 200, "one consumer took all: 1.0 %d" % len(tags))


def body(t):
    a9.need_pika()
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\n" + a9.mqd_passwd("alice", PW))
        f.write("[acl]\nallow alice send,receive,create q.*\n")
    b = t.broker("interop", conf=conf)
    coll = mqdtest.Collect()
    with coll.case("published with pika, read with Proton"):
        pika_to_proton(b)
    with coll.case("sent with Proton, consumed with pika"):
        proton_to_pika(b)
    with coll.case("one $shared queue, a 0-9-1 and a 1.0 consumer"):
        shared_queue(b)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
