"""The store's record format (REC_HDR in src/store/store_int.h) for the corpus writers: a record is
len u32 | crc32c u32 | offset u64 | timestamp i64 | epoch u32 | flags u32 | txn u64 | data,
little-endian, with the CRC over everything after it."""
import struct

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


def record(off, ts, data, epoch=1, flags=0, txn=0):
    body = struct.pack('<QqIIQ', off, ts, epoch, flags, txn) + data
    return struct.pack('<II', len(body) + 4, crc32c(body)) + body
