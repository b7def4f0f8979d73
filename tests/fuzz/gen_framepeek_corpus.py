#!/usr/bin/env python3
"""Writes seed inputs for fuzz_framepeek: byte 0 picks the cut, the rest is a client
stream (SASL header and init, AMQP header, open, begin, attaches, transfers of formats
0 and 0x80013700 in list8/list32, multi-frame and aborted deliveries, heartbeats)."""
import os
import struct
import sys

def frame(body, ch=0, typ=0, ext=0):
    return struct.pack('>IBBH', 8 + 4 * ext + len(body), 2 + ext, typ, ch) + b'\xee' * (4 * ext) + body

def l8(code, fields, count):
    return b'\x00\x53' + bytes([code]) + b'\xc0' + bytes([len(fields) + 1, count]) + fields

def l32(code, fields, count):
    return b'\x00\x53' + bytes([code]) + b'\xd0' + struct.pack('>II', len(fields) + 4, count) + fields

def uint(v):
    return b'\x43' if v == 0 else (b'\x52' + bytes([v]) if v < 256 else b'\x70' + struct.pack('>I', v))

def string(s):
    return b'\xa1' + bytes([len(s)]) + s.encode()

def attach(name, handle, role=False):
    return l8(0x12, string(name) + uint(handle) + (b'\x41' if role else b'\x42'), 3)

def transfer(handle, tag, fmt, more=False, aborted=False, enc=l8):
    f = uint(handle) + uint(1) + (b'\xa0' + bytes([len(tag)]) + tag if tag is not None else b'\x40')
    f += (uint(fmt) if fmt is not None else b'\x40') + b'\x42' + (b'\x41' if more else b'\x42')
    f += b'\x40\x40\x40' + (b'\x41' if aborted else b'\x42')
    return enc(0x14, f, 10)

def stream(parts):
    s = b'AMQP\x03\x01\x00\x00' + frame(b'\x00\x53\x41\xc0\x0c\x01\xa3\x09ANONYMOUS', typ=1)
    s += b'AMQP\x00\x01\x00\x00' + frame(l8(0x10, string('c'), 1)) + frame(l8(0x11, b'\x40', 1))
    return s + b''.join(parts)

def resume_attach(name, handle, role, unsettled, incomplete):
    f = string(name) + uint(handle) + (b'\x41' if role else b'\x42') + b'\x40\x40'
    f += b'\x00\x53\x28\x45' + b'\x00\x53\x29\x45' + unsettled + incomplete
    return l8(0x12, f, 9)

def caps_attach(name, handle, role, desired):
    f = string(name) + uint(handle) + (b'\x41' if role else b'\x42') + b'\x40\x40'
    f += b'\x00\x53\x28\x45' + b'\x00\x53\x29\x45' + b'\x40\x42\x40\x40\x40' + desired
    return l8(0x12, f, 13)

RDR = b'amqp:link:redirect'
B = 0x80013700
seeds = {
    'batch': stream([frame(attach('s', 0)), frame(transfer(0, b'a', B) + b'\x00\x53\x75\xa0\x01x')]),
    'multi': stream([frame(attach('s1', 0)), frame(attach('s2', 1)),
                     frame(transfer(0, b'a', B, more=True, enc=l32) + b'xx'),
                     frame(transfer(1, b'a', 0) + b'yy'), frame(b''),
                     frame(transfer(0, None, None) + b'zz'),
                     frame(transfer(1, b'b', B, more=True)), frame(transfer(1, None, None, aborted=True))]),
    'ext': stream([frame(attach('s', 0), ch=1), frame(transfer(0, b'1', 7), ch=1, ext=3)]),
    'receiver': stream([frame(attach('s', 0, role=True)), frame(transfer(0, b'a', B))]),
    'resume': stream([frame(resume_attach('s', 0, False, b'\xc1\x05\x02\xa0\x01t\x40', b'\x42')),
                      frame(resume_attach('s1', 1, True, b'\x40', b'\x41')),
                      frame(resume_attach('s2', 2, False, b'\xc1\x01\x00', b'\x42')),
                      frame(transfer(0, b'a', B) + b'\x00\x53\x75\xa0\x01x')]),
    'redirect': stream([frame(caps_attach('s', 0, False, b'\xa3\x12' + RDR)),
                        frame(caps_attach('s1', 1, True, b'\xe0\x17\x02\xa3\x01x\x12' + RDR)),
                        frame(caps_attach('s2', 2, False, b'\xe0\x06\x02\xa3\x01x\x01y')),
                        frame(transfer(0, b'a', B) + b'\x00\x53\x75\xa0\x01x')]),
}
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'corpus', 'fuzz_framepeek')
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    for cut in (0, 13, 77, 200):
        with open(os.path.join(out, '%s-%d' % (name, cut)), 'wb') as f:
            f.write(bytes([cut]) + data)
