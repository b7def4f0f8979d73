#!/usr/bin/env python3
"""Corrupt records in sealed segments (issue 16, point 8). 2,000 records go to a
one-partition topic with 16 KiB segments, sent in three parts; mqd stops; the test damages two
records in the middle of sealed segments: the payload of offset 520 (its CRC fails; the
1,479 records after it were unreachable before the fix: every consumer stopped there
with no error) and the length field of offset 1200 (the next record has to be found by
a scan). After the restart, with mqd's skip-and-count policy:
  - a consumer receives every other record: 1,998 messages, in offset order, each body
    intact; none silently stops (count);
  - a browser (distribution-mode copy) gets the same 1,998;
  - `topic describe` shows corrupt_records 2 and first_corrupt_offset 520 for the
    partition, /metrics mqd_partition_corrupt_records_total 2;
  - the group's committed offset passes the damage (a second consumer of the same group
    gets nothing more), and the broker logged the offsets it skipped."""
import json
import os
import struct
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log  # noqa: E402
from proton import Message, symbol  # noqa: E402
from proton.reactor import Copy, Filter  # noqa: E402

TOPIC = "bad"
N = 2000
BAD_CRC = 520   # payload flipped
BAD_LEN = 1200  # length field overwritten
REC_HDR = 40


def body_of(i):
    return "rec-%05d-" % i + "p" * 180


def segments(pdir):
    return sorted(int(f[:-4]) for f in os.listdir(pdir) if f.endswith(".log"))


def record_pos(path, off):
    """File position of the record with offset `off` in segment file `path`."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + REC_HDR <= len(data):
        ln, _crc, o = struct.unpack_from("<IIQ", data, pos)
        if o == off:
            return pos
        pos += 4 + ln
    mqdtest.fail("offset %d not found in %s" % (off, path))


def damage(pdir, off, how):
    bases = segments(pdir)
    seg = max(b for b in bases if b <= off)
    check(seg != bases[-1], "offset %d is in the active segment %d (segments %r)" % (off, seg, bases))
    path = os.path.join(pdir, "%020d.log" % seg)
    pos = record_pos(path, off)
    with open(path, "r+b") as f:
        if how == "payload":
            f.seek(pos + REC_HDR + 20)
            b = f.read(4)
            f.seek(pos + REC_HDR + 20)
            f.write(bytes(x ^ 0xFF for x in b))
        else:
            f.seek(pos)
            f.write(struct.pack("<I", 0x00FFFFFF))
    log("damaged %s of offset %d in segment %d at position %d" % (how, off, seg, pos))


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def body(t):
    mport = mqdtest.free_port()
    b = t.broker(sets={"topic.%s.segment_bytes" % TOPIC: "16KiB", "topic.%s.partitions" % TOPIC: "1",
                       "metrics_listen": "127.0.0.1:%d" % mport})
    # three sends: each starts with a roll (the segment is past segment_bytes), so both
    # damaged offsets lie in sealed segments however the flusher batched them
    for lo, hi in ((0, 600), (600, 1300), (1300, N)):
        mqdtest.send(b.url, TOPIC, [Message(body=body_of(i)) for i in range(lo, hi)])
    b.stop()
    pdir = os.path.join(b.data_dir, "topics", TOPIC, "0")
    log("segments: %r" % segments(pdir))
    check(len(segments(pdir)) >= 3, "only %d segments: segment_bytes not applied" % len(segments(pdir)))
    damage(pdir, BAD_CRC, "payload")
    damage(pdir, BAD_LEN, "length")
    b.start()

    r = mqdtest.receive(b.url, TOPIC, count=N - 2, linger=1.0, idle=None, timeout=120)
    offs = [int(mqdtest.ann(m, "x-opt-offset")) for m in r.got]
    want = [i for i in range(N) if i not in (BAD_CRC, BAD_LEN)]
    log("received %d messages; %d after offset %d" % (len(offs), sum(o > BAD_CRC for o in offs), BAD_CRC))
    check(offs == want, "received %d offsets, want %d (first differing at %s)" % (
        len(offs), len(want), next((i for i, (x, y) in enumerate(zip(offs, want)) if x != y), "-")))
    bad = [o for o, m in zip(offs, r.got) if m.body != body_of(o)]
    check(not bad, "bodies differ at offsets %r" % bad[:5])
    check(sum(o > BAD_CRC for o in offs) == N - 1 - BAD_CRC - 1,
          "%d records after the damaged one" % sum(o > BAD_CRC for o in offs))

    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "describe", TOPIC)
    check(rc == 0, "describe: %s" % err)
    p0 = json.loads(out)["partition_info"][0]
    check(p0["corrupt_records"] == 2 and p0["first_corrupt_offset"] == BAD_CRC,
          "describe: %r" % p0)
    text = scrape(mport)
    line = [ln for ln in text.splitlines()
            if ln.startswith('mqd_partition_corrupt_records_total{topic="%s",partition="0"}' % TOPIC)]
    check(line and line[0].split()[-1] == "2", "metric: %r" % line)

    # a browser (distribution-mode copy) replaying the log from its start steps over the
    # damage too (a plain browser of the queue would show nothing: it was all consumed)
    first = Filter({symbol("rabbitmq:stream-offset-spec"): "first"})
    br = mqdtest.receive(b.url, TOPIC, count=N - 2, linger=0.5, options=[Copy(), first], timeout=120)
    boffs = [int(mqdtest.ann(m, "x-opt-offset")) for m in br.got]
    check(boffs == want, "browser got %d offsets, want %d" % (len(boffs), len(want)))

    # the damage counts as consumed: the shared group has nothing left to give
    r2 = mqdtest.receive(b.url, TOPIC, idle=2.0, timeout=60)
    check(len(r2.got) == 0, "the group redelivered %d messages" % len(r2.got))
    text = b.log_text()
    for o in (BAD_CRC, BAD_LEN):
        check("offsets %d..%d" % (o, o) in text, "the log does not name offset %d" % o)


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
