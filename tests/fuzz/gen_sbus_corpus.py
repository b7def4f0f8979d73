#!/usr/bin/python3
"""Writes the seed corpus of fuzz_sbus: Service Bus entity management requests as the
@azure/service-bus SDK encodes them (peek, renew-lock, receive-by-sequence-number,
update-disposition, schedule-message, cancel-scheduled-message), and a few broken ones."""
import os
import sys
import uuid

from proton import UNDESCRIBED, Array, Data, Message, int32, symbol, timestamp, uint

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "fuzz_sbus")
os.makedirs(out, exist_ok=True)


def token(part, off):
    tag = part.to_bytes(4, "little") + off.to_bytes(8, "little")
    order = [3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11]
    u = bytearray(16)
    for i, j in enumerate(order):
        u[j] = tag[i]
    return uuid.UUID(bytes=bytes(u))


bodies = [
    ("peek", {"from-sequence-number": 0, "message-count": int32(10)}),
    ("peek-neg", {"from-sequence-number": -5, "message-count": int32(0)}),
    ("renew", {"lock-tokens": Array(UNDESCRIBED, Data.UUID, token(0, 1), token(0, 7))}),
    ("renew-part1", {"lock-tokens": Array(UNDESCRIBED, Data.UUID, token(1, 1))}),
    ("renew-str", {"lock-tokens": ["not", "uuids"]}),
    ("empty", {}),
    ("receive-by-sequence-number", {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, 1, 2),
                                    "receiver-settle-mode": uint(1)}),
    ("receive-seq-ints", {"sequence-numbers": [1, 2], "receiver-settle-mode": "x"}),
    ("update-disposition", {"lock-tokens": Array(UNDESCRIBED, Data.UUID, token(0, 3)),
                            "disposition-status": "suspended", "deadletter-reason": "r" * 300,
                            "deadletter-description": "d"}),
    ("update-disposition-sym", {"lock-tokens": Array(UNDESCRIBED, Data.UUID, token(0, 3)),
                                "disposition-status": symbol("completed-and-more-than-16")}),
    ("schedule-message", {"messages": [{"message": Message(
        body="later", annotations={symbol("x-opt-scheduled-enqueue-time"): timestamp(1800000000000)}).encode(),
        "message-id": "m1"}, {"message": b"\x00\x53\x77\xa1\x01x"}]}),
    ("schedule-bad", {"messages": [{"message": "not binary"}, 7]}),
    ("cancel-scheduled-message", {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, 4)}),
]
for i, (name, body) in enumerate(bodies):
    m = Message(body=body, reply_to="r", properties={"operation": "com.microsoft:" + name})
    with open(os.path.join(out, "seed-%d-%s" % (i, name)), "wb") as f:
        f.write(m.encode())
with open(os.path.join(out, "seed-junk"), "wb") as f:
    f.write(b"\x00\x53\x77\xd1\x00\x00\x00\x10\x00\x00\x00\x02\xa1")
