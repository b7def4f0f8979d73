#!/usr/bin/python3
"""Every body type, every properties field, application properties of mixed types and
the header fields arrive intact; every delivered message carries mqd's x-opt-*
annotations (x-opt-partition-key when sent with one), merged into one
message-annotations section with the message's own annotations kept.

Sends with a BlockingConnection, receives raw delivery bytes with a MessagingHandler
(so the number of message-annotations sections can be counted)."""

import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Client, check, log, run_container  # noqa: E402

from proton import (Data, Message, char, float32, int32, short, symbol,  # noqa: E402
                    timestamp, ubyte, uint, ulong)
from proton.utils import BlockingConnection  # noqa: E402

TOPIC = "fidelity"

SECTION_NAMES = {0x70: "header", 0x71: "delivery-annotations", 0x72: "message-annotations",
                 0x73: "properties", 0x74: "application-properties", 0x75: "data",
                 0x76: "amqp-sequence", 0x77: "amqp-value", 0x78: "footer"}


def sections(raw):
    """Descriptor codes of the top-level sections of an encoded message."""
    out = []
    pos = 0
    while pos < len(raw):
        d = Data()
        n = d.decode(raw[pos:])
        check(n > 0, "could not decode section at byte %d" % pos)
        d.rewind()
        d.next()
        check(d.type() == Data.DESCRIBED, "top-level value at byte %d is not described" % pos)
        d.enter()
        d.next()
        out.append(int(d.get_object()))
        pos += n
    return out


def build_messages():
    now_s = int(time.time())
    msgs = []
    # body types
    msgs.append(("data", Message(body=b"\x00\x01binary\xff" * 10, inferred=True)))
    msgs.append(("value-binary", Message(body=b"\x00value-binary")))
    msgs.append(("value-str", Message(body="h\u00e9llo w\u00f6rld \u2603")))
    msgs.append(("value-int", Message(body=-1234567890123)))
    msgs.append(("value-int32", Message(body=int32(-42))))
    msgs.append(("value-float", Message(body=3.141592653589793)))
    msgs.append(("value-map", Message(body={"a": 1, "b": "two", "c": [1, 2, 3], "d": {"x": None}})))
    msgs.append(("value-list", Message(body=[1, "two", 3.0, None, True, b"five"])))
    msgs.append(("value-none", Message(body=None)))
    msgs.append(("sequence", Message(body=[1, "two", 3.5], inferred=True)))
    # all properties
    m = Message(body="props")
    m.id = "msg-id-1"
    m.user_id = b"anonymous"
    m.address = TOPIC
    m.subject = "the subject"
    m.reply_to = "reply-here"
    m.correlation_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    m.content_type = "text/plain"
    m.content_encoding = "utf-8"
    m.expiry_time = float(now_s + 3600)   # absolute-expiry-time (seconds)
    m.creation_time = float(now_s)        # creation-time (seconds)
    m.group_id = "group-7"
    m.group_sequence = 77
    m.reply_to_group_id = "reply-group"
    msgs.append(("properties", m))
    m = Message(body="ids")
    m.id = ulong(12345678901)
    m.correlation_id = b"\x01\x02corr"
    msgs.append(("ulong-id", m))
    # application properties of mixed types
    m = Message(body="app-props")
    m.properties = {"str": "value", "int": 7, "neg": -7, "int32": int32(32), "short": short(-3),
                    "ubyte": ubyte(200), "uint": uint(4000000000), "float": 1.5,
                    "float32": float32(2.5), "bool": True, "false": False, "null": None,
                    "bin": b"\x00\xff", "sym": symbol("a-symbol"), "ts": timestamp(1700000000123),
                    "char": char("z"), "uuid": uuid.UUID(int=5)}
    msgs.append(("app-props", m))
    # header fields
    m = Message(body="header", durable=True, priority=9, ttl=3600.0)
    msgs.append(("header", m))
    m = Message(body="header-defaults", durable=False, priority=1)
    msgs.append(("header-nondurable", m))
    # partition key and the message's own annotations
    m = Message(body="keyed", annotations={symbol("x-opt-partition-key"): "key-1"})
    msgs.append(("pkey", m))
    m = Message(body="own-ann", annotations={symbol("x-custom"): "keep-me", symbol("x-num"): 99,
                                             symbol("x-opt-partition-key"): "k2"})
    msgs.append(("own-annotations", m))
    m = Message(body="own-ann-header", durable=True, annotations={symbol("x-only"): [1, 2]})
    msgs.append(("own-annotations-header", m))
    return msgs


FIELDS = ["id", "user_id", "address", "subject", "reply_to", "correlation_id", "content_type",
          "content_encoding", "expiry_time", "creation_time", "group_id", "group_sequence",
          "reply_to_group_id", "durable", "priority", "ttl", "first_acquirer", "body",
          "inferred", "properties"]


def typed(v):
    """Value with its Python type, recursively, so int32(1) != 1 in comparisons."""
    if isinstance(v, dict):
        return ("dict", sorted((repr(typed(k)), typed(x)) for k, x in v.items()))
    if isinstance(v, list):
        return ("list", [typed(x) for x in v])
    return (type(v).__name__, v)


class RawReceiver(Client):
    def __init__(self, url, n):
        super().__init__(auto_accept=False)
        self.url = url
        self.n = n
        self.got = []  # (raw bytes, Message)

    def on_start(self, event):
        conn = self.connect(event.container, self.url)
        event.container.create_receiver(conn, TOPIC)

    def on_delivery(self, event):
        d = event.delivery
        if d.partial:
            return
        raw = event.link.recv(d.pending)
        m = Message()
        m.decode(raw)
        self.got.append((raw, m))
        d.update(d.ACCEPTED)
        d.settle()
        if len(self.got) == self.n:
            self.finish()

    def status(self):
        return "received %d of %d" % (len(self.got), self.n)


def body(t):
    b = t.broker()
    msgs = build_messages()
    t0 = time.time()
    conn = BlockingConnection(b.url, timeout=30)
    snd = conn.create_sender(TOPIC)
    check(snd.remote_max_message_size and snd.remote_max_message_size > 0,
          "attach from mqd states max-message-size %r, want positive" % snd.remote_max_message_size)
    for name, m in msgs:
        dlv = snd.send(m)
        check(dlv.remote_state == dlv.ACCEPTED, "%s: send outcome %s, want accepted" % (name, dlv.remote_state))
    conn.close()
    log("sent %d messages" % len(msgs))

    r = RawReceiver(b.url, len(msgs))
    run_container(r, 60)
    check(len(r.got) == len(msgs), "received %d messages, sent %d" % (len(r.got), len(msgs)))

    for i, ((name, sent), (raw, got)) in enumerate(zip(msgs, r.got)):
        where = "message %d (%s)" % (i, name)
        secs = sections(raw)
        check(secs.count(0x72) == 1, "%s: %d message-annotations sections (%s), want exactly 1"
              % (where, secs.count(0x72), [SECTION_NAMES.get(s, hex(s)) for s in secs]))
        check(secs == sorted(secs) or secs[-1] == 0x78,
              "%s: sections out of order: %s" % (where, [SECTION_NAMES.get(s, hex(s)) for s in secs]))
        # (Proton encodes a None body as no body section at all.)
        want_body = {"data": 0x75, "sequence": 0x76, "value-none": None}.get(name, 0x77)
        check((want_body is None or want_body in secs) and not (set(secs) & ({0x75, 0x76, 0x77} - {want_body})),
              "%s: body sections %s, want %s" % (where, [SECTION_NAMES.get(s, hex(s)) for s in secs],
                                                  SECTION_NAMES.get(want_body)))
        if sent.durable or name == "header":
            check(0x70 in secs, "%s: header section lost" % where)
        for f in FIELDS:
            a, g = getattr(sent, f), getattr(got, f)
            check(typed(a) == typed(g), "%s: field %s sent %r (%s), received %r (%s)"
                  % (where, f, a, type(a).__name__, g, type(g).__name__))
        pkey = (sent.annotations or {}).get(symbol("x-opt-partition-key"))
        pid, off = mqdtest.check_delivery_annotations(got, partition=0, pkey=pkey, now=t0, where=where)
        check(off == i, "%s: x-opt-offset %d, want %d (fresh single-partition topic)" % (where, off, i))
        if pkey is None:
            check(mqdtest.ann(got, "x-opt-partition-key") is None,
                  "%s: x-opt-partition-key %r present though none was sent"
                  % (where, mqdtest.ann(got, "x-opt-partition-key")))
        for k, v in (sent.annotations or {}).items():
            check(typed(got.annotations.get(k)) == typed(v), "%s: own annotation %s sent %r, received %r"
                  % (where, k, v, got.annotations.get(k)))
        got_ann = set(str(k) for k in got.annotations)
        extra = got_ann - set(str(k) for k in (sent.annotations or {})) - {
            "x-opt-partition-id", "x-opt-offset", "x-opt-sequence-number", "x-opt-enqueued-time",
            "x-opt-partition-key"}
        check(not extra, "%s: unexpected annotations %s" % (where, extra))
        check(got.delivery_count == 0, "%s: delivery-count %d on first delivery" % (where, got.delivery_count))
    log("all %d messages intact" % len(msgs))


if __name__ == "__main__":
    mqdtest.main(body, timeout=120)
