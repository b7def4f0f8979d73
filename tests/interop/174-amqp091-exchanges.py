#!/usr/bin/python3
"""AMQP 0-9-1 exchanges with pika (docs/amqp091.md, "Exchanges and bindings"):
- exchange.declare of each type (direct, fanout, topic, headers), durable, and a
  non-durable one; queue.bind with routing keys; publishes with confirms routed to every
  bound queue: each queue's contents, counts and order asserted (basic.get until empty);
- topic patterns with `*` and `#` (RabbitMQ's: `#` matches zero words too); headers
  x-match all / any / any-with-x; a queue bound twice gets one copy;
- mandatory publish with no route: basic.return 312 NO_ROUTE (pika's UnroutableError),
  then the confirm; the channel goes on;
- queue.unbind, exchange.delete if-unused (406 while bound), the predeclared amq.direct,
  amq.fanout, amq.topic, amq.headers, amq.match (passive declare; a binding to amq.topic);
- errors: passive declare of a missing exchange 404, redeclare with another type 406,
  a name under amq. 403, publish to a missing exchange 404;
- a broker restart (SIGKILL): durable exchanges and their bindings are there (routing as
  before), the non-durable exchange is gone;
- ACL: bob may send to q.x.ok but not q.x.secret: his publish to a fanout bound to both is
  refused 403 and stored in neither; to one bound only to q.x.ok it is stored; he cannot
  declare an exchange (no 'create')."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
import amqp091test as a9  # noqa: E402
from mqdtest import check, log  # noqa: E402

pika = a9.pika
PW = {"alice": "alice-pw", "bob": "bob-pw"}


def conn_of(b, user):
    return pika.BlockingConnection(a9.params(b.port, user, PW[user]))


def drain_full(ch, q, limit=500):
    """Every message of q now, in order (basic.get with auto-ack until get-empty):
    [(body, exchange, routing key)]."""
    out = []
    for _ in range(limit):
        m, p, bd = ch.basic_get(q, auto_ack=True)
        if m is None:
            break
        out.append((bd.decode(), m.exchange, m.routing_key))
    return out


def drain(ch, q, limit=500):
    return [x[0] for x in drain_full(ch, q, limit)]


def expect_close(fn, code, what):
    try:
        fn()
        check(False, "%s: no channel error" % what)
    except pika.exceptions.ChannelClosedByBroker as e:
        check(e.reply_code == code, "%s: %d %s, want %d" % (what, e.reply_code, e.reply_text, code))
        log("%s: %d %s" % (what, e.reply_code, e.reply_text))


QUEUES = ["q.d1", "q.d2", "q.f1", "q.f2", "q.f3", "q.t.stock", "q.t.all", "q.t.eu", "q.t.ab",
          "q.h.all", "q.h.any", "q.h.x", "q.h.plainx", "q.p", "q.tmp"]


def setup_model(ch):
    for q in QUEUES:
        ch.queue_declare(queue=q, durable=True)
    ch.exchange_declare("ex.direct", "direct", durable=True)
    ch.exchange_declare("ex.fanout", "fanout", durable=True)
    ch.exchange_declare("ex.topic", "topic", durable=True)
    ch.exchange_declare("ex.headers", "headers", durable=True)
    ch.exchange_declare("ex.temp", "fanout", durable=False)
    ch.queue_bind("q.d1", "ex.direct", "red")
    ch.queue_bind("q.d1", "ex.direct", "blue")
    ch.queue_bind("q.d2", "ex.direct", "green")
    ch.queue_bind("q.d2", "ex.direct", "red")
    for q in ("q.f1", "q.f2", "q.f3"):
        ch.queue_bind(q, "ex.fanout")
    ch.queue_bind("q.f1", "ex.fanout", "another-key")  # bound twice: still one copy
    ch.queue_bind("q.t.stock", "ex.topic", "stock.*.nyse")
    ch.queue_bind("q.t.all", "ex.topic", "#")
    ch.queue_bind("q.t.eu", "ex.topic", "*.eu.#")
    ch.queue_bind("q.t.ab", "ex.topic", "a.b")
    ch.queue_bind("q.h.all", "ex.headers", "",
                  arguments={"x-match": "all", "format": "pdf", "type": "report"})
    ch.queue_bind("q.h.any", "ex.headers", "",
                  arguments={"x-match": "any", "format": "pdf", "type": "log"})
    # any-with-x compares x- headers too; plain any ignores them (then nothing to match)
    ch.queue_bind("q.h.x", "amq.match", "", arguments={"x-match": "any-with-x", "x-tag": "blue"})
    ch.queue_bind("q.h.plainx", "amq.match", "", arguments={"x-match": "any", "x-tag": "blue"})
    ch.queue_bind("q.tmp", "ex.temp")
    ch.queue_bind("q.p", "amq.topic", "p.#")


def publish(ch, ex, key, body, headers=None, mandatory=False):
    props = pika.BasicProperties(headers=headers, delivery_mode=2, message_id=body)
    ch.basic_publish(exchange=ex, routing_key=key, body=body.encode(), properties=props,
                     mandatory=mandatory)


TOPIC_KEYS = ["stock.usd.nyse", "stock.eur.nyse.x", "a.eu", "x.eu.y.z", "a.b", "", "eu.a",
              "stock.nyse"]
TOPIC_WANT = {
    "q.t.stock": ["stock.usd.nyse"],
    "q.t.all": TOPIC_KEYS,
    "q.t.eu": ["a.eu", "x.eu.y.z"],
    "q.t.ab": ["a.b"],
}


def route_and_check(ch, tag):
    """Publishes through every exchange (confirmed) and checks each queue's contents."""
    for i in range(3):
        publish(ch, "ex.direct", "red", "%s:red%d" % (tag, i))
    publish(ch, "ex.direct", "blue", "%s:blue0" % tag)
    publish(ch, "ex.direct", "green", "%s:green0" % tag)
    for i in range(20):
        publish(ch, "ex.fanout", "any-key-%d" % i, "%s:f%d" % (tag, i))
    for k in TOPIC_KEYS:
        publish(ch, "ex.topic", k, "%s:t:%s" % (tag, k))
    publish(ch, "ex.headers", "", "%s:h-both" % tag, headers={"format": "pdf", "type": "report"})
    publish(ch, "ex.headers", "", "%s:h-pdf" % tag, headers={"format": "pdf"})
    publish(ch, "ex.headers", "", "%s:h-log" % tag, headers={"type": "log", "x": 1})
    publish(ch, "ex.headers", "", "%s:h-none" % tag, headers={"type": "report"})
    publish(ch, "amq.topic", "p.x.y", "%s:p" % tag)
    publish(ch, "amq.match", "", "%s:x-blue" % tag, headers={"x-tag": "blue"})
    publish(ch, "amq.match", "", "%s:x-red" % tag, headers={"x-tag": "red", "n": 1})
    want = {
        "q.d1": ["red0", "red1", "red2", "blue0"],
        "q.d2": ["red0", "red1", "red2", "green0"],
        "q.f1": ["f%d" % i for i in range(20)],
        "q.f2": ["f%d" % i for i in range(20)],
        "q.h.all": ["h-both"],
        "q.h.any": ["h-both", "h-pdf", "h-log"],
        "q.p": ["p"],
        "q.h.x": ["x-blue"],
        "q.h.plainx": [],
    }
    want.update({q: ["t:%s" % k for k in v] for q, v in TOPIC_WANT.items()})
    eu = drain_full(ch, "q.t.eu")
    w = [("%s:t:%s" % (tag, k), "ex.topic", k) for k in TOPIC_WANT["q.t.eu"]]
    check(eu == w, "q.t.eu with exchange and routing key: %r, want %r" % (eu, w))
    for q, w in sorted(want.items()):
        if q == "q.t.eu":
            continue
        got = drain(ch, q)
        w = ["%s:%s" % (tag, x) for x in w]
        check(got == w, "%s: got %r, want %r" % (q, got, w))
    return drain(ch, "q.f3")


def body(t):
    a9.need_pika()
    users = a9.mqd_passwd("alice", PW["alice"]) + a9.mqd_passwd("bob", PW["bob"])
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\n" + users)
        f.write("[acl]\nallow alice send,receive,create,manage q.*\n"
                "allow alice create,manage ex.*\n"
                "allow bob send,receive q.x.ok\nallow alice all q.x.*\nallow bob receive ex.*\n")
    b = t.broker("a091x", conf=conf)
    coll = mqdtest.Collect()

    conn = conn_of(b, "alice")
    ch = conn.channel()
    ch.confirm_delivery()

    with coll.case("declare each type, bind, publish: every bound queue, in order"):
        setup_model(ch)
        f3 = route_and_check(ch, "a")
        check(f3 == ["a:f%d" % i for i in range(20)], "q.f3: %r" % f3)

    with coll.case("mandatory with no route: basic.return 312, then the confirm"):
        try:
            publish(ch, "ex.direct", "yellow", "nowhere", mandatory=True)
            check(False, "an unroutable mandatory publish was not returned")
        except pika.exceptions.UnroutableError as e:
            m = e.messages[0]
            check(m.method.reply_code == 312 and m.method.exchange == "ex.direct" and
                  m.method.routing_key == "yellow" and m.body == b"nowhere",
                  "return %r %r" % (m.method, m.body))
        publish(ch, "ex.direct", "yellow", "dropped")  # not mandatory: acked, stored nowhere
        publish(ch, "ex.headers", "", "h-none", headers={"type": "report"}, mandatory=False)
        publish(ch, "ex.direct", "blue", "after")
        check(drain(ch, "q.d1") == ["after"], "the channel goes on")

    with coll.case("unbind, delete if-unused, the predeclared exchanges"):
        ch.queue_unbind("q.f3", "ex.fanout")
        publish(ch, "ex.fanout", "", "one")
        check(drain(ch, "q.f3") == [], "q.f3 still bound")
        check(drain(ch, "q.f1") == ["one"] and drain(ch, "q.f2") == ["one"], "fanout after unbind")
        ch.queue_unbind("q.f1", "ex.fanout", "another-key")
        for ex, ty in (("amq.direct", "direct"), ("amq.fanout", "fanout"), ("amq.topic", "topic"),
                       ("amq.headers", "headers"), ("amq.match", "headers")):
            ch.exchange_declare(ex, ty, passive=True)
            ch.exchange_declare(ex, ty, durable=True)  # the same: fine
        ch.exchange_declare("ex.gone", "direct", durable=True)
        ch.queue_bind("q.f3", "ex.gone", "k")
        expect_close(lambda: ch.exchange_delete("ex.gone", if_unused=True), 406, "if-unused")

    ch = conn.channel()
    ch.confirm_delivery()
    with coll.case("errors: 404 passive, 406 type, 403 amq., 404 publish"):
        ch.queue_unbind("q.f3", "ex.gone", "k")
        ch.exchange_delete("ex.gone", if_unused=True)
        expect_close(lambda: ch.exchange_declare("ex.gone", "direct", passive=True), 404, "passive")
        ch = conn.channel()
        expect_close(lambda: ch.exchange_declare("ex.direct", "fanout", durable=True), 406,
                     "another type")
        ch = conn.channel()
        expect_close(lambda: ch.exchange_declare("amq.mine", "direct", durable=True), 403, "amq.")
        ch = conn.channel()
        expect_close(lambda: ch.queue_bind("q.nosuch", "ex.direct", "k"), 404, "bind missing queue")
        ch = conn.channel()
        ch.confirm_delivery()

        def pub_missing():
            publish(ch, "ex.nosuch", "k", "x")
        expect_close(pub_missing, 404, "publish to a missing exchange")
    conn.close()

    with coll.case("durable exchanges and bindings survive a restart (SIGKILL)"):
        b.kill()
        b.start()
        conn = conn_of(b, "alice")
        ch = conn.channel()
        ch.confirm_delivery()
        for ex, ty in (("ex.direct", "direct"), ("ex.fanout", "fanout"), ("ex.topic", "topic"),
                       ("ex.headers", "headers")):
            ch.exchange_declare(ex, ty, passive=True)
        # gets acked just before a SIGKILL may come again (group offsets are committed
        # lazily, as for 1.0 consumers: at least once): read them away first
        for q in QUEUES:
            old = drain(ch, q)
            check(all(not x.startswith("b:") for x in old), "%s before: %r" % (q, old))
        f3 = route_and_check(ch, "b")
        check(f3 == [], "q.f3 was unbound before the restart: %r" % f3)
        expect_close(lambda: ch.exchange_declare("ex.temp", "fanout", passive=True), 404,
                     "the non-durable exchange after a restart")
        ch = conn.channel()
        expect_close(lambda: ch.exchange_declare("ex.topic", "direct", durable=True), 406,
                     "another type after a restart")
        conn.close()

    with coll.case("ACL: send is needed on every bound queue"):
        conn = conn_of(b, "alice")
        ch = conn.channel()
        for q in ("q.x.ok", "q.x.secret"):
            ch.queue_declare(queue=q, durable=True)
        ch.exchange_declare("ex.both", "fanout", durable=True)
        ch.exchange_declare("ex.okonly", "fanout", durable=True)
        ch.queue_bind("q.x.ok", "ex.both")
        ch.queue_bind("q.x.secret", "ex.both")
        ch.queue_bind("q.x.ok", "ex.okonly")
        bc = conn_of(b, "bob")
        bch = bc.channel()
        bch.confirm_delivery()

        def bob_both():
            publish(bch, "ex.both", "", "from-bob")
            bch.exchange_declare("ex.both", "fanout", passive=True)  # the close arrives first
        expect_close(bob_both, 403, "bob to ex.both")
        bch = bc.channel()
        bch.confirm_delivery()
        publish(bch, "ex.okonly", "", "bob-ok")
        bch = bc.channel()
        expect_close(lambda: bch.exchange_declare("ex.bobs", "fanout", durable=True), 403,
                     "bob declares")
        bc.close()
        check(drain(ch, "q.x.secret") == [], "stored in q.x.secret")
        got = drain(ch, "q.x.ok")
        check(got == ["bob-ok"], "q.x.ok: %r" % got)
        conn.close()

    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
