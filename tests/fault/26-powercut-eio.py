#!/usr/bin/python3
"""fsync failure (fsyncgate) on powercutfs: the next fdatasync of the partition's segment
fails with EIO and powercutfs drops its dirty data, as Linux does after a write-back
error. Then mqd
  - does not acknowledge the sends of the failed sync: each gets an outcome, none is
    accepted (rejected with amqp:internal-error), none hangs;
  - fences the partition: describe shows it failed, and sends are refused with an error
    condition while it stays failed (a failure that is not "disk full" does not resume by
    itself);
  - keeps serving reads of what was durable: every earlier accepted message is browsed;
  - does not retry the sync as if the data were still in the page cache: after
    `mqctl topic resume`, new sends are accepted, and after SIGKILL + a power cut every
    accepted message is there, in order, and none of the rejected ones.
Exit 77 without root or FUSE."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop"))
import mqdtest  # noqa: E402
import pcfs  # noqa: E402
from mqdtest import check, log  # noqa: E402

from proton import Message  # noqa: E402
from proton.reactor import Copy  # noqa: E402

T = "eio"


def msgs(prefix, n):
    return [Message(body="%s-%03d" % (prefix, i), durable=True) for i in range(n)]


def describe(b):
    rc, out, err = mqdtest.mqctl(b.url, "--json", "topic", "describe", T)
    check(rc == 0, "describe: exit %d %s" % (rc, err))
    return json.loads(out)["partition_info"][0]


def browse(b):
    r = mqdtest.Receiver(b.url, T, idle=2.0, options=Copy())
    mqdtest.run_container(r, 60)
    return [m.body for m in r.got]


def segment_path(data_dir):
    d = os.path.join(data_dir, "topics", T, "0")
    logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    return os.path.join(d, logs[-1])


def body(t):
    if pcfs.skip_reason():
        mqdtest.skip(pcfs.skip_reason())
    os.environ["MQD_TEST_POWERCUT"] = "cut"
    mqdtest.POWERCUT = "cut"
    b = t.broker(sets={"partition_resume_ms": "1000"})
    fs = b.fs
    mqdtest.send(b.url, T, msgs("before", 50))
    seg = segment_path(b.data_dir)
    rel = "/" + os.path.relpath(seg, fs.mnt)
    fs.ctl("eio-next-fsync " + rel)
    log("armed eio-next-fsync %s" % rel)

    s = mqdtest.Sender(b.url, T, msgs("failed", 20))
    mqdtest.run_container(s, 60)
    check(s.accepted + len(s.outcomes) == 20, "sends without an outcome: %s" % s.status())
    check(s.accepted == 0, "%d sends of the failed sync were accepted" % s.accepted)
    conds = set(str(c.name) if c else None for _, _, c in s.outcomes)
    log("failed sync: %d rejected, conditions %s" % (len(s.outcomes), conds))
    check(conds == {"amqp:internal-error"}, "conditions of the failed sends: %s" % conds)

    p = describe(b)
    check(p["failed"] is True, "describe does not show the partition failed: %s" % p)
    log("describe: failed, reason %r" % p.get("failed_reason"))
    time.sleep(2.5 * mqdtest.SLOW)  # longer than partition_resume_ms: an EIO stays fenced
    s2 = mqdtest.Sender(b.url, T, msgs("fenced", 5))
    mqdtest.run_container(s2, 60)
    check(s2.accepted == 0 and len(s2.outcomes) == 5,
          "sends to the fenced partition: %s" % s2.status())
    got = browse(b)
    want = ["before-%03d" % i for i in range(50)]
    check(got == want, "reads while fenced: %d messages, want the 50 durable ones" % len(got))

    rc, _, err = mqdtest.mqctl(b.url, "topic", "resume", T + "/0")
    check(rc == 0, "mqctl topic resume: exit %d %s" % (rc, err))
    deadline = time.monotonic() + 30 * mqdtest.SLOW
    while describe(b)["failed"]:
        check(time.monotonic() < deadline, "the partition did not resume within 30 s")
        time.sleep(0.2)
    mqdtest.send(b.url, T, msgs("after", 30))

    b.kill()
    b.start()  # after a power cut (MQD_TEST_POWERCUT)
    got = browse(b)
    want += ["after-%03d" % i for i in range(30)]
    check(got == want, "after SIGKILL and a power cut: %d messages (%s ... %s), want the %d "
          "accepted ones in order and none of the rejected" % (len(got), got[:2], got[-2:], len(want)))
    log("after resume, SIGKILL and a power cut: the %d accepted messages, none of the 25 refused"
        % len(want))


if __name__ == "__main__":
    mqdtest.main(body, timeout=240)
