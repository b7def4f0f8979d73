#!/usr/bin/python3
"""Writes the seed corpus of fuzz_raw (see fuzz_raw.c: the input is a run of raw records
as mqd_plog_read_raw returns them).
usage: gen_raw_corpus.py DIR"""
import os
import struct
import sys

POLY = 0x82F63B78
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def record(off, data, ts=1700000000000, epoch=3, flags=0, txn=0):
    body = struct.pack('<QqIIQ', off, ts + 7 * off, epoch, flags, txn) + data
    return struct.pack('<II', len(body) + 4, crc32c(body)) + body


def run(n, size=lambda i: (i * 37) % 300, first=0):
    return b''.join(record(first + i, bytes((i + j) & 0xFF for j in range(size(i))),
                           epoch=3 if i < n // 2 else 5, flags=(i & 1) << 8, txn=i)
                    for i in range(n))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    good = run(5)
    seeds = {
        'seed-empty': b'',
        'seed-one': record(0, b''),
        'seed-five': good,
        'seed-roll': run(400, lambda i: 60),          # more than a 16 KiB segment
        'seed-big': record(0, b'\xab' * 20000) + record(1, b'x'),
        'seed-partial': good[:-1],
        'seed-bad-crc': good[:50] + bytes([good[50] ^ 1]) + good[51:],
        'seed-gap': record(0, b'a') + record(2, b'b'),
        'seed-not-first': run(3, first=7),
        'seed-short-len': struct.pack('<II', 35, 0) + b'\0' * 40,
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
