#!/usr/bin/python3
"""Writes the seed corpus of fuzz_raw (see fuzz_raw.c: the input is a run of raw records
as mqd_plog_read_raw returns them).
usage: gen_raw_corpus.py DIR"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import storerec  # noqa: E402


def record(off, data, ts=1700000000000, epoch=3, flags=0, txn=0):
    return storerec.record(off, ts + 7 * off, data, epoch, flags, txn)


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
