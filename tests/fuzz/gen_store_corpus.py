#!/usr/bin/python3
"""Writes the seed corpus of fuzz_store (see fuzz_store.c for the input format).
usage: gen_store_corpus.py DIR"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from storerec import record  # noqa: E402


def segment(base, n, size=30, interval=64):
    """Raw .log/.idx/.tix bytes the way the store writes them."""
    log, idx, tix = b'', b'', b''
    last, max_ts = 0, None
    for i in range(n):
        pos, ts = len(log), 1700000000000 + (i * 7) % 50
        max_ts = ts if max_ts is None or ts > max_ts else max_ts
        log += record(base + i, ts, bytes([65 + i % 26]) * size)
        if pos and pos - last >= interval:
            idx += struct.pack('<II', i, pos)
            last = pos
            tix += struct.pack('<qI', max_ts, i)
    return log, idx, tix


def chunk(kind, data):
    return struct.pack('<BH', kind, len(data)) + data


def gen(kind, recs):
    return chunk(kind, b''.join(struct.pack('<BbBB', len(d), dd, ts, fl) + d
                                for d, dd, ts, fl in recs))


def seeds():
    five = [(b'hello %d' % i, 0, i * 3, 0) for i in range(5)]
    log, idx, tix = segment(0, 40)
    log_b, idx_b, tix_b = segment(40, 10)
    yield b'\x00' + gen(6, five)
    yield b'\x04' + gen(6, five) + gen(7, five[:3])
    yield b'\x00' + gen(6, five) + chunk(8, struct.pack('<QQQ', 0, 2 * 47, 2))
    yield b'\x00' + chunk(0, log) + chunk(1, idx) + chunk(2, tix)
    yield b'\x27' + chunk(0, log) + chunk(1, idx) + chunk(2, tix) + \
        chunk(3, log_b) + chunk(4, idx_b) + chunk(5, tix_b)
    yield b'\x00' + chunk(0, log[:-5]) + chunk(1, idx)               # torn tail
    yield b'\x27' + chunk(0, log[:200] + b'\xff' + log[201:]) + chunk(1, idx) + \
        chunk(3, log_b)                                                # damaged old segment
    yield b'\x00' + gen(6, [(b'x', 0, 1, 0), (b'y', 5, 2, 0), (b'z', -3, 3, 1)])
    yield b'\x00' + chunk(1, struct.pack('<II', 3, 100) * 3) + gen(6, five)  # bad index
    yield b'\x00' + gen(6, [(b'', 0, 0, 0x01), (b't', 0, 0, 0x81)])
    # issue 16: damage inside an old segment whose index is intact (found by reads only):
    # a payload byte of record 10 (its CRC fails), the length field of record 20
    yield b'\x27' + chunk(0, log[:745] + bytes([log[745] ^ 0xFF]) + log[746:]) + chunk(1, idx) + \
        chunk(2, tix) + chunk(3, log_b) + chunk(4, idx_b) + chunk(5, tix_b)
    yield b'\x27' + chunk(0, log[:1400] + struct.pack('<I', 0xFFFFFF) + log[1404:]) + chunk(1, idx) + \
        chunk(2, tix) + chunk(3, log_b) + chunk(4, idx_b) + chunk(5, tix_b)
    # reset markers (reset.c): a whole one beside both segments, a torn one
    yield b'\x27' + chunk(0, log) + chunk(1, idx) + chunk(3, log_b) + \
        chunk(9, struct.pack('<Q', 5000))
    yield b'\x00' + gen(6, five) + chunk(9, b'\x4d\x52\x53')


for n, s in enumerate(seeds(), 1):
    with open('%s/seed-%d' % (sys.argv[1], n), 'wb') as f:
        f.write(s)
