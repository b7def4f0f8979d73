#!/usr/bin/python3
"""cluster = etcd (issue 19 point 1, the foundation): node membership and controller
election against a real etcd 3.4 that the test starts on loopback free ports with its own
data dir (stopped by PID). Three real mqd processes, node_id 1..3, racks a/b/c,
lease_ttl_ms = 3000. Everything is read back from etcd's JSON gateway directly (urllib,
base64-decoded keys and values):

(a) registration: /mqd/nodes/1..3 hold {id, address = the node's listener, rack, started}
    each under its own lease; exactly one /mqd/controller, whose {"id"} names a node and
    whose lease is that node's; exactly one broker log says it is controller. Nodes 1 and 3
    list a dead endpoint first in etcd_endpoints: they move on to the live one.
(b) SIGKILL of the controller: another node holds the controller key within
    lease_ttl_ms x 2 + 2 s (the takeover time is measured and logged); the killed node's
    key is gone with its lease.
(c) the killed node restarts: it registers again under a new lease and does not take the
    controller key from the node holding it (same holder, same create_revision 2 TTLs on).
(d) SIGTERM of the controller: its lease is revoked, so the key moves at once (well under
    the TTL) and its node key is gone at once.
(e) etcd SIGKILLed for longer than the TTL and started again on the same data dir and
    ports: every node saw its lease lost; all register again under new leases and exactly
    one controller (its lease = its node key's lease) within 2.5 s of etcd's return: the
    old controller deletes its stale key (kept alive by etcd's restored lease) at once.
(g) the etcd client alone (etcd_probe, a dead endpoint first): put, prefix range (3 keys), txn
    create-if-absent (fails on an existing key and reads it in the failure branch;
    succeeds on a new one), compare-and-swap on mod_revision (current wins, stale loses),
    lease grant / keepalive / revoke (the leased key goes, a keepalive of the revoked lease
    has no TTL, a put under it is refused with gRPC code 5), a watch (snapshot, then the
    put and the delete in order), a watch from a compacted revision (a fresh snapshot with
    the latest value, then the next put), delete of the prefix (count).
(h) SIGSTOP of the controller past its lease: another node takes over within
    lease_ttl_ms x 2 + 2 s; after SIGCONT the paused node logs its lease lost and the role
    dropped, re-registers under a new lease and claims nothing (one controller agreed).
(f) config: cluster = etcd without node_id, and node_id = 0, are errors naming FILE:LINE
    and node_id; cluster = none (the default) logs no cluster activity at all."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import Etcd, b64, post, read_keys  # noqa: E402
from mqdtest import SLOW, check, fail, log, skip  # noqa: E402

TTL_MS = 3000


def view(port):
    """(nodes {id: (json, lease)}, controller (id, lease, create_rev) or None) from etcd."""
    keys = read_keys(port, "/mqd/")
    nodes, ctl = {}, None
    for k, (v, lease, crev) in keys.items():
        m = re.fullmatch(r"/mqd/nodes/(\d+)", k)
        if m:
            nodes[int(m.group(1))] = (json.loads(v), lease)
        elif k == "/mqd/controller":
            ctl = (json.loads(v)["id"], lease, crev)
    return nodes, ctl


def wait_for(what, pred, timeout):
    deadline = time.monotonic() + timeout * SLOW
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            fail("timed out after %.1fs waiting for %s" % (timeout * SLOW, what))
        time.sleep(0.05)


def claims(b):
    """Does broker b's latest log say it is the controller now?"""
    text = open(b.logs[-1], errors="replace").read()
    gained = [m.start() for m in re.finditer(r"cluster: controller: this node \(\d+\) since", text)]
    lost = [m.start() for m in re.finditer(r"cluster: controller: this node \(\d+\) lost", text)]
    return bool(gained) and (not lost or gained[-1] > lost[-1])


def one_controller(port, brokers):
    """(controller id, create_revision) when etcd and the broker logs agree on exactly one
    controller (its key under the lease of its node key), else a reason string."""
    nodes, ctl = view(port)
    if ctl is None:
        return "no controller key"
    cid, clease, crev = ctl
    if cid not in nodes:
        return "controller %d is not a registered node (%s)" % (cid, sorted(nodes))
    if clease == 0 or clease != nodes[cid][1]:
        return "controller key lease %x is not node %d's lease %x" % (clease, cid, nodes[cid][1])
    who = [i for i, b in brokers.items() if b.alive() and claims(b)]
    if who != [cid]:
        return "brokers claiming the controller role: %s, etcd says %d" % (who, cid)
    return cid, crev


def check_one_controller(port, brokers, when, timeout=2 * TTL_MS / 1000 + 2):
    """Waits (bounded) for exactly one controller and returns (id, create_revision)."""
    deadline = time.monotonic() + timeout * SLOW
    t0 = time.monotonic()
    while True:
        got = one_controller(port, brokers)
        if not isinstance(got, str):
            break
        if time.monotonic() > deadline:
            fail("%s: after %.1f s: %s" % (when, timeout * SLOW, got))
        time.sleep(0.05)
    log("%s: controller = node %d (create_revision %d), agreed after %.2f s"
        % (when, got[0], got[1], time.monotonic() - t0))
    return got


def all_registered(port, ids):
    nodes, ctl = view(port)
    return (nodes, ctl) if sorted(nodes) == sorted(ids) and ctl is not None else None


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server; scripts/setup.sh does)")
    coll = mqdtest.Collect()
    with coll.case("(f) config errors and single-node mode"):
        case_config(t)
    etcd = Etcd(t)
    etcd.start()
    dead = mqdtest.free_port()  # nothing listens there
    brokers = {}
    for i, rack in ((1, "a"), (2, "b"), (3, "c")):
        eps = "http://127.0.0.1:%d" % etcd.port
        if i != 2:
            eps = "http://127.0.0.1:%d,%s" % (dead, eps)
        brokers[i] = t.broker("n%d" % i, start=False, sets={
            "cluster": "etcd", "etcd_endpoints": eps, "node_id": str(i), "rack": rack,
            "lease_ttl_ms": str(TTL_MS)})
    t0 = int(time.time() * 1000)
    for b in brokers.values():
        b.start()
    with coll.case("(a) three nodes registered, one controller"):
        nodes, ctl = wait_for("3 nodes and a controller in etcd",
                              lambda: all_registered(etcd.port, [1, 2, 3]), 10)
        now = int(time.time() * 1000)
        leases = set()
        for i, rack in ((1, "a"), (2, "b"), (3, "c")):
            v, lease = nodes[i]
            check(v["id"] == i and v["rack"] == rack and v["address"] == brokers[i].hostport,
                  "node %d registered as %r" % (i, v))
            check(t0 - 1000 <= v["started"] <= now, "node %d started=%r not in [%d, %d]" % (i, v["started"], t0, now))
            check(lease != 0, "node %d key has no lease" % i)
            leases.add(lease)
        check(len(leases) == 3, "3 nodes share leases: %s" % leases)
        log("(a) registered: %s" % {i: (nodes[i][0], "%x" % nodes[i][1]) for i in nodes})
        check_one_controller(etcd.port, brokers, "(a)")
        for i in (1, 3):
            text = open(brokers[i].logs[-1], errors="replace").read()
            check("etcd 127.0.0.1:%d failed: trying 127.0.0.1:%d" % (dead, etcd.port) in text and
                  "via etcd 127.0.0.1:%d" % etcd.port in text,
                  "node %d did not move from the dead endpoint %d to %d" % (i, dead, etcd.port))
        for i, b in brokers.items():
            wait_for("node %d logging the view with 3 nodes" % i,
                     lambda: re.search(r"cluster: view: controller=[123] nodes=\[1,2,3\]",
                                       open(b.logs[-1], errors="replace").read()), 5)
    with coll.case("(b) SIGKILL of the controller: takeover after the lease"):
        cid, _ = check_one_controller(etcd.port, brokers, "(b) before")
        old_lease = view(etcd.port)[0][cid][1]
        t_kill = time.monotonic()
        brokers[cid].kill()
        bound = (2 * TTL_MS / 1000 + 2) * SLOW
        _, ctl = wait_for("another controller", lambda: (lambda v: v if v[1] and v[1][0] != cid else None)(
            view(etcd.port)), bound / SLOW)
        took = time.monotonic() - t_kill
        log("(b) controller %d SIGKILLed: node %d took over after %.2f s (bound %.1f s, TTL %.1f s)"
            % (cid, ctl[0], took, bound, TTL_MS / 1000))
        check(took <= bound, "(b) takeover took %.2f s > %.1f s" % (took, bound))
        check(took >= 1.0, "(b) takeover after %.2f s: before the lease could expire?" % took)
        nodes, _ = view(etcd.port)
        check(cid not in nodes, "(b) killed node %d still registered: %r" % (cid, nodes.get(cid)))
        check_one_controller(etcd.port, brokers, "(b) after")
        killed = cid
    with coll.case("(c) the killed node returns as a follower"):
        _, ctl_before = view(etcd.port)
        brokers[killed].start()
        nodes, _ = wait_for("node %d registered again" % killed,
                            lambda: all_registered(etcd.port, [1, 2, 3]), 10)
        check(nodes[killed][1] not in (0, old_lease), "(c) node %d's new lease %x (old %x)"
              % (killed, nodes[killed][1], old_lease))
        time.sleep(2 * TTL_MS / 1000)
        _, ctl_after = view(etcd.port)
        check(ctl_after == ctl_before, "(c) controller changed from %r to %r after node %d returned"
              % (ctl_before, ctl_after, killed))
        check(not claims(brokers[killed]), "(c) node %d claims the controller role" % killed)
        log("(c) node %d back under lease %x; controller still %d (create_revision %d)"
            % (killed, nodes[killed][1], ctl_after[0], ctl_after[2]))
    with coll.case("(d) SIGTERM of the controller: the lease is revoked, the key moves at once"):
        cid, _ = check_one_controller(etcd.port, brokers, "(d) before")
        t_term = time.monotonic()
        brokers[cid].proc.send_signal(signal.SIGTERM)
        _, ctl = wait_for("another controller", lambda: (lambda v: v if v[1] and v[1][0] != cid else None)(
            view(etcd.port)), TTL_MS / 1000)
        took = time.monotonic() - t_term
        nodes, _ = view(etcd.port)
        log("(d) controller %d SIGTERMed: node %d took over after %.3f s (TTL %.1f s)"
            % (cid, ctl[0], took, TTL_MS / 1000))
        check(took < TTL_MS / 1000 / 2 * SLOW, "(d) takeover took %.2f s: not under half the TTL" % took)
        check(cid not in nodes, "(d) node %d still registered after a clean stop" % cid)
        brokers[cid].proc.wait(timeout=20 * SLOW)
        check(brokers[cid].proc.returncode == 0, "(d) node %d exit %s" % (cid, brokers[cid].proc.returncode))
        check(re.search(r"cluster: lease [0-9a-f]+ revoked", open(brokers[cid].logs[-1], errors="replace").read()),
              "(d) node %d did not log its lease revoked" % cid)
        brokers[cid].start()
        wait_for("node %d registered again" % cid, lambda: all_registered(etcd.port, [1, 2, 3]), 10)
    with coll.case("(e) etcd restarted mid-run"):
        before = {i: lease for i, (_, lease) in view(etcd.port)[0].items()}
        cid0, _ = check_one_controller(etcd.port, brokers, "(e) before")
        etcd.kill()
        # down for longer than the TTL: every node sees its lease lost and steps down; etcd
        # keeps the old leases (and the old controller key) and restarts their TTLs
        time.sleep(TTL_MS / 1000 + 1.5)
        etcd.start()
        t_up = time.monotonic()
        cid, crev = check_one_controller(etcd.port, brokers, "(e)")
        took = time.monotonic() - t_up
        nodes, _ = wait_for("3 nodes registered under new leases",
                            lambda: (lambda v: v if sorted(v[0]) == [1, 2, 3] and all(
                                v[0][i][1] != before[i] for i in (1, 2, 3)) else None)(view(etcd.port)),
                            2 * TTL_MS / 1000 + 5)
        for i, b in brokers.items():
            b.check_alive("after the etcd restart")
            text = open(b.logs[-1], errors="replace").read()
            check("lost (no keepalive answer within the TTL)" in text,
                  "(e) node %d did not notice its lease lost while etcd was down" % i)
        # the old controller's key outlived its lease in etcd's restored state: the node
        # deletes it (mod_revision compare) instead of everyone waiting for that TTL
        check(took < 2.5 * SLOW, "(e) a controller agreed %.2f s after etcd came up: > 2.5 s" % took)
        for i, b in brokers.items():  # the watches resumed: every node's view agrees
            wait_for("node %d logging the view controller=%d nodes=[1,2,3]" % (i, cid),
                     lambda: re.findall(r"cluster: view: (controller=\d+ nodes=\[[\d,]*\])",
                                        open(b.logs[-1], errors="replace").read())[-1:] ==
                     ["controller=%d nodes=[1,2,3]" % cid], 5)
        check(re.search(r"cluster: /mqd/controller names this node under old lease [0-9a-f]+: deleting",
                        open(brokers[cid0].logs[-1], errors="replace").read()),
              "(e) node %d did not delete its stale controller key" % cid0)
        log("(e) etcd down %.1f s: controller %d before, %d after (%.2f s after etcd came up); leases "
            "%s -> %s" % (TTL_MS / 1000 + 1.5, cid0, cid, took, sorted("%x" % v for v in before.values()),
                          sorted("%x" % nodes[i][1] for i in nodes)))
    with coll.case("(h) SIGSTOP of the controller past its lease, then SIGCONT"):
        case_pause(etcd, brokers)
    with coll.case("(g) the etcd client alone"):
        case_probe(etcd, dead)
    for b in brokers.values():
        b.stop()
    coll.finish()


def case_pause(etcd, brokers):
    cid, _ = check_one_controller(etcd.port, brokers, "(h) before")
    b = brokers[cid]
    old_lease = view(etcd.port)[0][cid][1]
    mark = len(open(b.logs[-1], errors="replace").read())
    t_stop = time.monotonic()
    os.kill(b.pid, signal.SIGSTOP)
    try:
        _, ctl = wait_for("a controller other than the paused node %d" % cid,
                          lambda: (lambda v: v if v[1] and v[1][0] != cid else None)(view(etcd.port)),
                          2 * TTL_MS / 1000 + 2)
        took = time.monotonic() - t_stop
        time.sleep(0.5)
    finally:
        os.kill(b.pid, signal.SIGCONT)
    t_cont = time.monotonic()
    # awake past its lease: it must see the lease gone and drop the role at once
    after = wait_for("node %d to drop the role and register again after SIGCONT" % cid,
                     lambda: (lambda tx: tx if re.search(r"controller: this node \(\d+\) lost the role", tx)
                              and re.search(r"registered /mqd/nodes/%d under lease" % cid, tx) else None)(
                         open(b.logs[-1], errors="replace").read()[mark:]), 5)
    woke = time.monotonic() - t_cont
    check(re.search(r"lease [0-9a-f]+ lost \(", after), "(h) node %d did not log its lease lost:\n%s" % (cid, after))
    check(not claims(b), "(h) node %d still claims the controller role after waking" % cid)
    nid, _ = check_one_controller(etcd.port, brokers, "(h) after")
    nodes, _ = view(etcd.port)
    check(nid == ctl[0] and nid != cid, "(h) controller %d after the pause, expected %d" % (nid, ctl[0]))
    check(nodes[cid][1] not in (0, old_lease), "(h) node %d's lease %x after waking (old %x)" % (cid, nodes[cid][1], old_lease))
    log("(h) controller %d paused: node %d took over after %.2f s; %d woke, stepped down and "
        "re-registered %.2f s after SIGCONT" % (cid, nid, took, cid, woke))


def probe_bin():
    p = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "tests", "interop", "etcd_probe")
    check(os.path.exists(p), "etcd_probe not built at %s" % p)
    return p


def case_probe(etcd, dead):
    revs = []
    for i in range(1, 6):
        revs.append(int(post(etcd.port, "/v3/kv/put", {"key": b64("/probe/c/k"), "value": b64("v%d" % i)})
                        ["header"]["revision"]))
    post(etcd.port, "/v3/kv/compaction", {"revision": str(revs[-1]), "physical": True})
    eps = "http://127.0.0.1:%d,http://127.0.0.1:%d" % (dead, etcd.port)
    p = subprocess.run([probe_bin(), eps, str(revs[0])], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120 * SLOW)
    out = p.stdout.decode(errors="replace")
    log("(g) etcd_probe (exit %d):\n%s" % (p.returncode, out))
    check(p.returncode == 0, "(g) etcd_probe failed")
    got = {}
    for line in out.splitlines():
        name, _, rest = line.partition(" ")
        got[name] = dict(kv.split("=", 1) for kv in rest.split(" ") if "=" in kv and not kv.startswith("log="))
        got[name]["log"] = rest.partition("log=")[2].strip()
    want = {
        "put": {"rc": "0", "endpoint": "127.0.0.1:%d" % etcd.port},
        "range": {"rc": "0", "n": "3", "count": "3", "first": "1"},  # a, b and c/k
        "create-if-absent": {"rc": "0", "succeeded": "0", "value": "1"},
        "cas-current": {"rc": "0", "succeeded": "1"},
        "cas-stale": {"rc": "0", "succeeded": "0", "value": "2"},
        "create-new": {"rc": "0", "succeeded": "1"},
        "grant": {"rc": "0", "ttl": "5", "id_nonzero": "1"},
        "keepalive": {"rc": "0", "has_ttl": "1", "ttl": "5", "id_same": "1"},
        "revoke": {"rc": "0"},
        "leased-after-revoke": {"n": "0"},
        "keepalive-revoked": {"rc": "0", "has_ttl": "0"},
        "put-revoked-lease": {"rc": str(-3), "grpc": "5"},
        "watch": {"snapshots": "1", "events": "2"},
        "compacted-watch": {"snapshots": "1", "events": "1"},
        "delete-prefix": {"rc": "0", "deleted": "4"},
    }
    for name, fields in want.items():
        for k, v in fields.items():
            check(got.get(name, {}).get(k) == v, "(g) %s: %s = %r, expected %r" % (name, k, got.get(name, {}).get(k), v))
    check(int(got["cas-stale"]["mod"]) > int(got["create-if-absent"]["mod"]), "(g) CAS did not move mod_revision")
    wl = got["watch"]["log"].split()
    check(len(wl) == 3 and wl[0].startswith("snapshot@") and ",/probe/a=2" in wl[0] and ",/probe/b=x" in wl[0]
          and re.fullmatch(r"put@\d+:/probe/w=w1", wl[1]) and re.fullmatch(r"delete@\d+:/probe/b=", wl[2]),
          "(g) watch log %r" % wl)
    cl = got["compacted-watch"]["log"].split()
    check(len(cl) == 2 and re.fullmatch(r"snapshot@(\d+):1,/probe/c/k=v5", cl[0]) and
          int(cl[0].split("@")[1].split(":")[0]) >= revs[-1] and cl[1].endswith(":/probe/c/k=v6"),
          "(g) compacted watch log %r (compacted at %d, watched from %d)" % (cl, revs[-1], revs[0]))


def case_config(t):
    d = t.tmpdir
    for name, text, want in (
            ("no-id", "listen = 127.0.0.1:5999\ncluster = etcd\netcd_endpoints = http://127.0.0.1:2379\n",
             r"no-id\.conf:2: node_id: missing"),
            ("zero-id", "cluster = etcd\nnode_id = 0\netcd_endpoints = http://127.0.0.1:2379\n",
             r"zero-id\.conf:2: node_id: "),
            ("bad-ep", "cluster = etcd\nnode_id = 1\netcd_endpoints = 127.0.0.1:2379\n",
             r"bad-ep\.conf:3: etcd_endpoints: expected http://")):
        path = os.path.join(d, name + ".conf")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([mqdtest.mqd_bin(), "--check-config", "-c", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30 * SLOW)
        out = p.stdout.decode(errors="replace")
        check(p.returncode != 0 and re.search(want, out), "(f) %s: exit %d, output %r" % (name, p.returncode, out))
        log("(f) %s: %s" % (name, out.strip().splitlines()[-1]))
    b = t.broker("single")
    time.sleep(0.5)
    b.stop()
    text = open(b.logs[-1], errors="replace").read()
    check(" cluster:" not in text, "(f) cluster = none logged cluster activity:\n%s" % text)


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
