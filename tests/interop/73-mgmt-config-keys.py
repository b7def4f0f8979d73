#!/usr/bin/python3
"""Issue 21 point 6: every [topic NAME] key the config file accepts works through
management (mqctl topic create/alter --config KEY=VALUE) with the file's parser: units
(retention_ms=7d, index_interval_bytes=8KiB), booleans (dead_letter=on), and a bad value
is refused naming the key and why, with the same reason text mqd --check-config gives for
the same line in a file. Settings survive a restart."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import Collect, check  # noqa: E402


def ctl(b, *args):
    return mqdtest.mqctl(b.url, "--json", *args)


def ok_json(b, *args):
    rc, out, err = ctl(b, *args)
    check(rc == 0, "mqctl %s: exit %d: %s" % (" ".join(args), rc, err))
    return json.loads(out)


def file_reason(t, key, val):
    """The reason mqd --check-config gives for `key = val` in a [topic] section."""
    path = os.path.join(t.tmpdir, "bad-%s.conf" % key)
    with open(path, "w") as f:
        f.write("[topic x]\n%s = %s\n" % (key, val))
    p = subprocess.run([mqdtest.mqd_bin(), "--check-config", "-c", path, "--data-dir", t.tmpdir],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30 * mqdtest.SLOW)
    err = p.stderr.decode().strip()
    check(p.returncode != 0, "--check-config accepted %s = %s" % (key, val))
    marker = "%s: " % key
    check(marker in err, "file error names no key: %r" % err)
    return err[err.index(marker):]


def body(t):
    b = t.broker()
    coll = Collect()
    with coll.case("create with file units and booleans"):
        r = ok_json(b, "topic", "create", "cfg", "--partitions", "2",
                    "--config", "retention_ms=7d", "--config", "dead_letter=on",
                    "--config", "index_interval_bytes=8KiB", "--config", "segment_bytes=16MiB",
                    "--config", "flush=sync")
        c = r["config"]
        want = {"retention_ms": 7 * 86400 * 1000, "dead_letter": True,
                "index_interval_bytes": 8192, "segment_bytes": 16 << 20, "flush": "sync"}
        for k, v in want.items():
            check(c.get(k) == v, "create: config %s = %r, want %r" % (k, c.get(k), v))
        check(r["partitions"] == 2, "partitions %r" % r["partitions"])
    with coll.case("alter with units"):
        r = ok_json(b, "topic", "alter", "cfg", "--config", "retention_ms=2h",
                    "--config", "dead_letter=off", "--config", "dedup_window_ms=30s")
        c = r["config"]
        want = {"retention_ms": 2 * 3600 * 1000, "dead_letter": False, "dedup_window_ms": 30000,
                "index_interval_bytes": 8192}
        for k, v in want.items():
            check(c.get(k) == v, "alter: config %s = %r, want %r" % (k, c.get(k), v))
    cases = [("retention_ms", "7x"), ("dead_letter", "maybe"), ("index_interval_bytes", "-5"),
             ("segment_bytes", "1"), ("retenton_ms", "1d"), ("flush", "sometimes")]
    for key, val in cases:
        with coll.case("refused %s=%s" % (key, val)):
            rc, out, err = ctl(b, "topic", "alter", "cfg", "--config", "%s=%s" % (key, val))
            check(rc == 5, "alter %s=%s: exit %d, want 5 (%s)" % (key, val, rc, err))
            reason = file_reason(t, key, val)
            check(reason in err, "mqctl said %r; the file's reason is %r" % (err.strip(), reason))
            check("(400)" in err, "status not 400: %r" % err)
            rc, out, err = ctl(b, "topic", "create", "cfg-bad", "--config", "%s=%s" % (key, val))
            check(rc == 5 and reason in err, "create %s=%s: exit %d %r" % (key, val, rc, err))
    with coll.case("a refused create made no topic, a refused alter changed nothing"):
        rc, out, err = ctl(b, "topic", "describe", "cfg-bad")
        check(rc == 3, "cfg-bad exists after refused creates: exit %d" % rc)
        c = ok_json(b, "topic", "describe", "cfg")["config"]
        check(c["retention_ms"] == 7200000 and c["flush"] == "sync",
              "refused alters changed the config: %r" % c)
    with coll.case("settings survive a restart"):
        b.restart(kill=False)
        c = ok_json(b, "topic", "describe", "cfg")["config"]
        want = {"retention_ms": 7200000, "dead_letter": False, "dedup_window_ms": 30000,
                "index_interval_bytes": 8192, "segment_bytes": 16 << 20, "flush": "sync"}
        for k, v in want.items():
            check(c.get(k) == v, "after restart: config %s = %r, want %r" % (k, c.get(k), v))
    b.check_alive("after the management requests")
    coll.finish()


mqdtest.main(body, timeout=240)
