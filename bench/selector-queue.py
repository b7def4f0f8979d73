#!/usr/bin/python3
"""Selective consumers on a queue against plain consumption (issue 17 point 1): the cost
in the broker (CPU seconds from /proc/PID/stat) and the rate at the clients.

Usage: bench/selector-queue.py [--n 100000] [--partitions 2] [--builddir build]
Starts its own mqd (tests/interop/mqdtest.py's Broker: loopback, free port, temp data
dir), sends N messages per scenario (application property colour red/green/blue/other,
a quarter each), then drains:
  plain      one plain receiver
  mixed      receivers with colour = 'red', 'green', IN ('blue') and one plain receiver
  selective  one receiver with colour = 'red' alone (it passes over 3/4 of the queue;
             the rest stays)
and prints one line per scenario. Not a test (no assertion on the figures); bounded by
N and by a 5 s idle stop per drain. Needs python3-qpid-proton."""

import argparse
import importlib.util
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))


def load_test48():
    path = os.path.join(HERE, "..", "tests", "interop", "48-selector-queue.py")
    spec = importlib.util.spec_from_file_location("t48", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--builddir", default=os.path.join(HERE, "..", "build"))
    a = ap.parse_args()
    os.environ.setdefault("MQD_BUILDDIR", os.path.abspath(a.builddir))
    import mqdtest
    t48 = load_test48()
    t = mqdtest.Test("bench-selector-queue")
    scen = {
        "plain": {"plain": None},
        "mixed": {"red": "colour = 'red'", "green": "colour = 'green'", "blue": "colour IN ('blue')",
                  "plain": None},
        "selective": {"red": "colour = 'red'"},
    }
    sets = {"topic.bq-%s.partitions" % k: a.partitions for k in scen}
    sets["max_unsettled_per_link"] = 0
    b = t.broker(sets=sets)
    try:
        print("# %d messages per scenario, %d partitions, mqd %s" % (a.n, a.partitions, b.bin))
        for name, specs in scen.items():
            topic = "bq-" + name
            t0 = time.monotonic()
            mqdtest.send(b.url, topic, t48.load_msgs(topic, a.n), timeout=1800)
            send_s = time.monotonic() - t0
            want = a.n if None in specs.values() else a.n // 4 * len(specs)
            h, wall, cpu = t48.timed_drain(b, topic, specs, want)
            got = {k: len(v) for k, v in h.got.items()}
            n = sum(got.values())
            ids = {x[1] for v in h.got.values() for x in v}
            print("%-9s received %7d of %7d (distinct %7d) in %6.2f s: %8.0f msgs/s; broker CPU %6.2f s "
                  "= %8.0f msgs per CPU s (%.1f us/msg); per receiver %s; send took %.1f s"
                  % (name, n, want, len(ids), wall, n / max(wall, 1e-6), cpu, n / max(cpu, 0.01),
                     cpu * 1e6 / max(n, 1), got, send_s), flush=True)
    finally:
        b.stop()
        t.cleanup()


if __name__ == "__main__":
    main()
