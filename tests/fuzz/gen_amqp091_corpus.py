#!/usr/bin/python3
"""Writes the seed corpus of tests/fuzz/fuzz_amqp091.c: client streams after the 0-9-1
protocol header, as pika sends them (start-ok, tune-ok, open, channel.open,
queue.declare, confirm.select, basic.publish with a content header carrying every basic
property and a headers table, body frames, acks), and hostile variants (bad frame end,
an oversize frame, an unknown method, a cut table). The first byte picks frame_max."""
import os
import struct
import sys


def shortstr(s):
    b = s.encode()
    return bytes([len(b)]) + b


def longstr(b):
    return struct.pack(">I", len(b)) + b


def table(d):
    out = b""
    for k, v in d.items():
        out += shortstr(k)
        if isinstance(v, bool):
            out += b"t" + bytes([1 if v else 0])
        elif isinstance(v, int):
            out += b"l" + struct.pack(">q", v)
        elif isinstance(v, dict):
            out += b"F" + table(v)
        else:
            out += b"S" + longstr(v.encode())
    return struct.pack(">I", len(out)) + out


def frame(t, ch, payload, end=0xCE):
    return struct.pack(">BHI", t, ch, len(payload)) + payload + bytes([end])


def method(ch, cls, mid, args):
    return frame(1, ch, struct.pack(">HH", cls, mid) + args)


def header(ch, size, flags, props):
    return frame(2, ch, struct.pack(">HHQH", 60, 0, size, flags) + props)


start_ok = method(0, 10, 11, table({"product": "pika", "capabilities": {"publisher_confirms": True}}) +
                  shortstr("PLAIN") + longstr(b"\0alice\0pw") + shortstr("en_US"))
tune_ok = method(0, 10, 31, struct.pack(">HIH", 256, 131072, 60))
open_ = method(0, 10, 40, shortstr("/") + shortstr("") + b"\0")
ch_open = method(1, 20, 10, shortstr(""))
declare = method(1, 50, 10, struct.pack(">H", 0) + shortstr("q.orders") + b"\x02" + table({}))
confirm = method(1, 85, 10, b"\0")
publish = method(1, 60, 40, struct.pack(">H", 0) + shortstr("") + shortstr("q.orders") + b"\x01")
props = (shortstr("text/plain") + shortstr("utf-8") + table({"seq": 7, "colour": "red"}) + b"\x02" + b"\x05" +
         shortstr("c-1") + shortstr("reply") + shortstr("60000") + shortstr("m-1") + struct.pack(">Q", 1700000000) +
         shortstr("t") + shortstr("alice") + shortstr("app") + shortstr(""))
hdr = header(1, 5, 0xFFFC, props)
body = frame(3, 1, b"hello")
consume = method(1, 60, 20, struct.pack(">H", 0) + shortstr("q.orders") + shortstr("") + b"\0" + table({"x-stream-offset": "first"}))
ack = method(1, 60, 80, struct.pack(">Q", 1) + b"\x01")
heartbeat = frame(8, 0, b"")
close = method(0, 10, 50, struct.pack(">H", 200) + shortstr("bye") + struct.pack(">HH", 0, 0))

# exchanges and bindings (exch.c, match.c): declare, bind with a topic pattern and with
# headers arguments, a publish to the exchange whose headers are matched, unbind, delete
ex_declare = method(1, 40, 10, struct.pack(">H", 0) + shortstr("ex.h") + shortstr("headers") + b"\x02" + table({}))
ex_delete = method(1, 40, 20, struct.pack(">H", 0) + shortstr("ex.h") + b"\x01")
bind_topic = method(1, 50, 20, struct.pack(">H", 0) + shortstr("q.orders") + shortstr("amq.topic") +
                    shortstr("a.#.c.*") + b"\0" + table({}))
bind_headers = method(1, 50, 20, struct.pack(">H", 0) + shortstr("q.orders") + shortstr("ex.h") + shortstr("") +
                      b"\0" + table({"x-match": "any", "colour": "red", "seq": 7, "flag": True}))
unbind = method(1, 50, 50, struct.pack(">H", 0) + shortstr("q.orders") + shortstr("ex.h") + shortstr("") +
                table({"x-match": "any", "colour": "red", "seq": 7, "flag": True}))
publish_ex = method(1, 60, 40, struct.pack(">H", 0) + shortstr("ex.h") + shortstr("a.b.b.c.d") + b"\x01")
exchanges = (ex_declare + bind_topic + bind_headers + publish_ex + hdr + body + unbind + ex_delete)

session = start_ok + tune_ok + open_ + ch_open + declare + confirm + publish + hdr + body + heartbeat + consume + ack + close
seeds = {
    "session": b"\x02" + session,
    "session-4096": b"\x00" + session,
    "publish-big": b"\x02" + publish + header(1, 300000, 0, b"") + frame(3, 1, b"x" * 100000),
    "bad-frame-end": b"\x02" + start_ok[:-1] + b"\x00",
    "oversize": b"\x00" + frame(3, 1, b"y" * 5000),
    "unknown-method": b"\x02" + method(1, 60, 999, b""),
    "unknown-class": b"\x02" + method(1, 77, 1, b""),
    "cut-table": b"\x02" + method(0, 10, 11, struct.pack(">I", 1000) + b"abc"),
    "bad-field-kind": b"\x02" + method(0, 10, 11, struct.pack(">I", 6) + shortstr("k") + b"Z\0\0\0" + shortstr("PLAIN") + longstr(b"") + shortstr("")),
    "header-short": b"\x02" + frame(2, 1, b"\0\x3c\0"),
    "header-other-class": b"\x02" + frame(2, 1, struct.pack(">HHQH", 50, 0, 1, 0)),
    "bad-type": b"\x02" + frame(9, 0, b""),
    "tiny-max": b"\x03" + heartbeat + heartbeat,
    "cut": b"\x02" + session[:137],
    "exchanges": b"\x02" + start_ok + tune_ok + open_ + ch_open + exchanges,
    "bind-bad-xmatch": b"\x02" + method(1, 50, 20, struct.pack(">H", 0) + shortstr("q") + shortstr("ex.h") +
                                        shortstr("") + b"\0" + table({"x-match": "some", "k": "v"})),
    "bind-nested-arg": b"\x02" + method(1, 50, 20, struct.pack(">H", 0) + shortstr("q") + shortstr("ex.h") +
                                        shortstr("") + b"\0" + table({"x-match": "all-with-x", "x-k": {"n": 1}})),
    "topic-words": b"\x02" + publish + method(1, 50, 20, struct.pack(">H", 0) + shortstr("q") + shortstr("t") +
                                              shortstr("#.#.*..#") + b"\0" + table({})),
}
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "fuzz_amqp091")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
