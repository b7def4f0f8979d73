#!/usr/bin/python3
"""Issue 32 points 5 and 7(a): a line a client can repeat at will is rate-limited per call
site (util/log.c, MQD_LOG_RATELIMITED: 10 lines per 5 s), and what it drops is counted.

alice, whose [acl] allows orders.* only, attaches 200 senders to secret.0 .. secret.199
on one connection as fast as it can: each is refused, and each refusal would log a
"denied peer=..." and a "refused attach: ..." line. Then, after the 5 s window, one more
(secret.200):

- each of the two lines is written far fewer than 201 times (at most 10 per window);
- its "N similar lines suppressed over the last S s: \\"FORMAT\\"" summaries and the
  lines written add up to exactly 201: nothing is lost from the count;
- the line for secret.200 is written, after a summary;
- the connection still works: alice sends to orders.ok and receives it."""

import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check, log, skip  # noqa: E402

from proton import Message  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached, SendException  # noqa: E402

SLOW = mqdtest.SLOW
PW = "alice-pw-120"
N = 200
WINDOW_S = 5.0  # MQD_LOG_RL_INTERVAL_MS
SITES = {  # what each refused attach logs: the line and its format in the summary
    "denied": (r"notice auth: denied peer=\S+ user=alice send secret\.(\d+): ",
               '"denied peer=%s user=%s %s %s: %s"'),
    "refused attach": (r"info link: refused attach: amqp:unauthorized-access: .*'secret\.(\d+)'",
                       '"refused attach: %s: %s"'),
}


def passwd(user):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--iterations", "1000", user], input=PW + "\n",
                       capture_output=True, text=True, timeout=60 * SLOW)
    check(r.returncode == 0, "mqd-passwd %s: %s" % (user, r.stderr))
    return r.stdout


def refuse(c, i):
    try:
        c.create_sender("secret.%d" % i).send(Message(body="must not arrive"))
        check(False, "alice sent to secret.%d" % i)
    except (LinkDetached, SendException) as e:
        check("unauthorized-access" in str(e), "secret.%d: %s" % (i, e))


def round_trip(c, body, n):
    """A send and a receive on c: mqd has handled everything c sent before."""
    r = c.create_receiver("orders.ok", name="rt-rx-%d" % n, credit=10)
    s = c.create_sender("orders.ok", name="rt-tx-%d" % n)
    s.send(Message(body=body))
    got = r.receive(timeout=15 * SLOW)
    r.accept()
    r.close()
    s.close()
    check(got.body == body, "orders.ok gave %r, want %r" % (got.body, body))


def body(t):
    coll = Collect()
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nallow_plain_without_tls = on\n" + passwd("alice"))
        f.write("[acl]\nallow alice send,receive,create orders.*\n")
    b = t.broker("rl", conf=conf)
    c = BlockingConnection(b.url, timeout=15 * SLOW, user="alice", password=PW, allowed_mechs="PLAIN")
    t0 = time.monotonic()
    for i in range(N):
        refuse(c, i)
    round_trip(c, "after the flood", 1)
    log("%d refused attaches in %.2f s" % (N, time.monotonic() - t0))
    time.sleep(WINDOW_S + 1.0)  # the limiter's window is real time, whatever SLOW says
    refuse(c, N)
    round_trip(c, "after the last refusal", 2)
    c.close()
    deadline = time.monotonic() + 10 * SLOW
    while "secret.%d" % N not in b.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    text = b.log_text()
    for name, (pat, fmt) in SITES.items():
        with coll.case(name):
            lines = list(re.finditer(pat, text))
            written = [int(m.group(1)) for m in lines]
            summaries = list(re.finditer(r"(\d+) similar lines suppressed over the last [\d.]+ s: %s"
                                         % re.escape(fmt), text))
            sums = [int(m.group(1)) for m in summaries]
            log("%s: %d lines written, summaries %r" % (name, len(written), sums))
            check(len(written) <= N // 2, "%s: %d of %d lines written: not limited"
                  % (name, len(written), N + 1))
            check(len(written) + sum(sums) == N + 1, "%s: %d written + %d suppressed != %d"
                  % (name, len(written), sum(sums), N + 1))
            check(written and written[-1] == N, "%s: the line after the pause (secret.%d) was not "
                  "written last" % (name, N))
            check(summaries and summaries[-1].start() < lines[-1].start(),
                  "%s: no summary before the line after the pause" % name)
    b.check_alive()
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=180)
