#!/usr/bin/python3
"""Writes the seed corpus of fuzz_repl (tests/fuzz/corpus/fuzz_repl): fetch-stream
messages as a leader encodes them (selector byte 0), partition states (1) and topic
registrations (2) as mqd writes them to etcd (with and without the identities), group-offset
record bodies (3, gstate.c), the log-end reports of an election (4, cand.c),
high-watermark checkpoint files (5, hwck_file.c), plus a few damaged ones."""
import os
import struct
import sys


def sym(s):
    return b"\xa3" + bytes([len(s)]) + s.encode()


def run(base, count, hw, data):
    m = sym("x-repl-base") + b"\x80" + struct.pack(">Q", base)
    m += sym("x-repl-count") + b"\x70" + struct.pack(">I", count)
    m += sym("x-repl-hw") + b"\x80" + struct.pack(">Q", hw)
    ann = b"\x00\x53\x72\xd1" + struct.pack(">II", len(m) + 4, 6) + m
    return ann + b"\x00\x53\x75\xb0" + struct.pack(">I", len(data)) + data


def hwck(lines, count=None, version=1):
    """A high-watermark checkpoint file (src/repl/hwck_file.c) with a correct CRC32C."""
    body = ("mqd replication-offset-checkpoint %d\n" % version).encode()
    body += b"".join(("%s %d %d %d\n" % ln).encode() for ln in lines)
    n = len(lines) if count is None else count
    return body + b"end %d %08x\n" % (n, crc32c(body))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def main(out):
    os.makedirs(out, exist_ok=True)
    rec = struct.pack("<II", 36 + 5, 0) + b"\x00" * 36 + b"hello"
    seeds = {
        "run-one": b"\x00" + run(0, 1, 0, rec),
        "run-hw-only": b"\x00" + run(7, 0, 7, b""),
        "run-truncated": b"\x00" + run(0, 1, 0, rec)[:-3],
        "run-vbin8": b"\x00" + run(0, 1, 0, b"")[:-8] + b"\x00\x53\x75\xa0\x02ab",
        "pstate": b"\x01" + b'{"leader":3,"epoch":1,"replicas":[3,1,2],"isr":[3,1,2]}',
        "pstate-bad": b"\x01" + b'{"leader":3,"epoch":1,"replicas":[1,2],"isr":[3]}',
        "tdesc": b"\x02" + b'{"config":{"acks":"quorum"},"partitions":1,"replication_factor":3}',
        "tdesc-bad": b"\x02" + b'{"partitions":"1","replication_factor":3}',
        "pstate-id": b"\x01" + b'{"leader":1,"epoch":2,"replicas":[1,2],"isr":[1],'
                                b'"topic_id":"0f1e2d3c4b5a69788796a5b4c3d2e1f0"}',
        "pstate-id-bad": b"\x01" + b'{"leader":1,"epoch":2,"replicas":[1,2],"isr":[1],'
                                    b'"topic_id":"0F1E2D3C4B5A69788796A5B4C3D2E1F0"}',
        "tdesc-id": b"\x02" + b'{"config":{},"id":"00112233445566778899aabbccddeeff",'
                               b'"partitions":2,"replication_factor":3}',
        "tdesc-id-bad": b"\x02" + b'{"id":["00112233445566778899aabbccddeeff"],'
                                   b'"partitions":2,"replication_factor":3}',
        "tdesc-home": b"\x02" + b'{"config":{"replication_factor":1},"home":2,'
                                 b'"id":"00112233445566778899aabbccddeeff","partitions":3,'
                                 b'"replication_factor":1}',
        "tdesc-home-rf3": b"\x02" + b'{"home":2,"partitions":3,"replication_factor":3}',
        "grec": b"\x03" + struct.pack("<Q", 60) + b"g",
        "grec-shared": b"\x03" + struct.pack("<Q", 1 << 40) + b"$shared",
        "grec-no-name": b"\x03" + struct.pack("<Q", 60),
        "grec-nul": b"\x03" + struct.pack("<Q", 60) + b"g\x00h",
        "report": b"\x04" + b'{"end":1050,"epoch":1,"leader_rev":17}',
        "report-old": b"\x04" + b'{"epoch":3,"end":0}',
        "report-bad": b"\x04" + b'{"epoch":1,"end":-5,"leader_rev":"17"}',
        "hwck": b"\x05" + hwck([("orders", 0, 1200, 3), ("orders", 1, 0, 0), ("r3", 0, 500, 2)]),
        "hwck-empty": b"\x05" + hwck([]),
        "hwck-torn": b"\x05" + hwck([("orders", 0, 1200, 3), ("r3", 0, 500, 2)])[:-9],
        "hwck-count": b"\x05" + hwck([("r3", 0, 500, 2)], count=2),
        "hwck-dup": b"\x05" + hwck([("r3", 0, 500, 2), ("r3", 0, 501, 2)]),
        "hwck-v2": b"\x05" + hwck([("r3", 0, 500, 2)], version=2),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "fuzz_repl"))
