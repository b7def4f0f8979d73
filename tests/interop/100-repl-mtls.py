#!/usr/bin/python3
"""Node identity between nodes (mutual TLS, replication_peer_verify): a real etcd and
three real mqd nodes on loopback, each with a plain listener (clients, mqctl) and an
amqps:// listener. The test makes its PKI with the openssl command: a CA, one certificate
per node (CN mqd-node-<id>, SAN IP:127.0.0.1: the same file is the node's server and
client certificate, replication_cert unset), client-only certificates (CN mqd-node-<id>,
extendedKeyUsage clientAuth), one named mqd-node-9, one named alice and one of another CA.
Every node has replication_tls = on, replication_ca_file = the CA, replication_peer_verify
= on and, up to (h), replication_user = repl (the password is checked as well: (a) is the
case of PLAIN + replication_user with the certificates); from (i) on none (the
certificates alone, SASL EXTERNAL).

(z) replication_peer_verify = on without replication_ca_file: mqd refuses to start and
    names the key.
(a) the three nodes replicate: ISR 3 in etcd, 1,000 acks = all sends accepted, the
    leader lists both fetch connections as TLS, the three logs are byte-equal.
(b) a probe over TLS with follower A's certificate, logged in as repl with the right
    password, claiming follower B's node id at B's log end: refused with
    amqp:unauthorized-access, the description naming the CN rule; 0 messages; B's fetch
    link is not replaced (no new attach of B on the leader) and keeps settling: 200 more
    acks = all sends are accepted within replica_lag_ms and the leader's lag gauge for B
    reads 0 at the new end.
(c) the same over TLS without a client certificate: refused "no verified client
    certificate"; 0 messages.
(d) a probe with a certificate of another CA (CN mqd-node-B): the handshake fails (the
    leader logs certificate verify failed), no link ever opens, 0 messages.
(e) follower B restarted with replication_cert = the mqd-node-9 certificate:
    - with replication_peer_verify on itself it refuses to start, naming replication_cert
      and the CN;
    - with it off (a node in the middle of a rolling change; its leader has it on) it
      starts, its log says why the leader refuses it (CN=mqd-node-9, not mqd-node-B), etcd's
      ISR drops it and stays without it, 100 further sends are accepted by the other two
      and its log keeps the records it had.
(f) B with its own client-only certificate as replication_cert but follower A's certificate
    as tls_cert (the server certificate its followers would check) refuses to start,
    naming tls_cert and the CN; restarted with replication_cert/replication_key = its own
    client-only certificate and its own tls_cert: back in the ISR, and the three logs end
    byte-equal.
(g) a node certificate is not a client's: with [user peer] cert_cn = mqd-node-1 and [user
    alice] cert_cn = alice on every node (and no tls_ca), SASL EXTERNAL with node 1's
    certificate logs in as the node, not as peer: a sender it attaches is refused with
    amqp:unauthorized-access; EXTERNAL with alice's certificate (same CA, not a node's
    name) fails ("never a user" in the leader's log); PLAIN as repl on node 1's certificate
    opens and may send.
(h) SIGHUP on the leader rebuilds its TLS context with the node CAs: the probe of (b) is
    refused the same way after the reload, and 50 more acks = all sends are accepted.
(i) the three nodes restarted without replication_user / replication_password: the
    followers log in with SASL EXTERNAL (the leader lists their fetch connections as
    EXTERNAL, user mqd-node-<id>, TLS), ISR 3, 1,000 more acks = all sends accepted, the
    three logs byte-equal.
(j) a client with follower A's node certificate, SASL EXTERNAL: a fetch link as A at A's
    log end opens; a fetch link as B is refused by the CN rule; a sender to the topic, a
    receiver from it, a sender to $management and a receiver from $management are each
    refused with amqp:unauthorized-access; nothing is stored (the leader's log unchanged),
    and afterwards A is in the ISR and 100 more sends are accepted.
(k) a follower pointed at a node that is not the leader: the test rewrites the leader's
    etcd key (same lease) so that its repl_address is follower A's TLS listener (a
    certificate for the right host, CN mqd-node-A) and restarts follower B: B refuses the
    handshake ("the peer's certificate names CN=mqd-node-A, not mqd-node-L") on every
    attempt, never logs in at A nor attaches, leaves the ISR, and keeps its records while
    the other two take 100 more; with the key restored and B restarted, ISR 3 and the
    three logs byte-equal.
(l) the leader's tls_cert and tls_key files overwritten with follower A's and a SIGHUP: the
    reload is refused naming tls_cert and CN=mqd-node-A, the listener still serves the
    leader's own certificate; files restored, the next SIGHUP reloads and 50 more sends
    are accepted."""

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdcluster import (repl_user_sets, Etcd, Props, Sender, b64, cluster_sets, count_records, fetch_conn,  # noqa: E402
                        get_json, partition_bytes, post, read_keys, wait_for)
from mqdtest import SLOW, check, fail, log, skip  # noqa: E402
from proton import SSLDomain, uint, ulong  # noqa: E402

N = 1000
MORE = 200
LATE = 100
RACKS = {1: "a", 2: "b", 3: "c"}
LAG_MS = int(3000 * SLOW)


def sh(args, cwd):
    r = subprocess.run(args, cwd=cwd, capture_output=True, timeout=60)
    if r.returncode != 0:
        fail("%s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))


def make_ca(d, name):
    sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", name + ".key", "-out", name + ".crt", "-days", "2", "-subj",
        "/CN=mqd test " + name], d)


def make_cert(d, name, cn, ca, ext):
    """name.crt/name.key: an EC key, subject CN=cn, signed by ca with the extensions ext."""
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write(ext + "\n")
    sh(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn], d)
    sh(["openssl", "x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
        "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext"], d)
    return os.path.join(d, name + ".crt"), os.path.join(d, name + ".key")


SERVER_EXT = "subjectAltName=IP:127.0.0.1"
CLIENT_EXT = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth"




class Probe(mqdtest.Client):
    """A $repl/ receiver over TLS (the CA verifies the leader), logged in as repl with SASL
    PLAIN, presenting cert/key when given. Records the link's refusal, the transport's
    error (a failed handshake) and what it received."""

    def __init__(self, url, props, ca, cert=None, key=None):
        super().__init__()
        self.url, self.props, self.ca, self.cert, self.key = url, props, ca, cert, key
        self.link_cond = self.transport_cond = None
        self.opened = False
        self.got = 0

    def on_start(self, e):
        dom = SSLDomain(SSLDomain.MODE_CLIENT)
        dom.set_trusted_ca_db(self.ca)
        dom.set_peer_authentication(SSLDomain.VERIFY_PEER)
        if self.cert:
            dom.set_credentials(self.cert, self.key, None)
        c = self.connect(e.container, self.url, user="repl", password="s3cret",
                         allowed_mechs="PLAIN", ssl_domain=dom)
        e.container.create_receiver(c, "$repl/r3/0", options=[Props(self.props)])

    def on_link_opened(self, e):
        self.opened = True
        e.container.schedule(1.0 * SLOW, self)

    def on_timer_task(self, e):
        self.finish()

    def on_message(self, e):
        self.got += 1

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description) if c else (None, None)
        self.finish()

    def on_transport_error(self, e):
        c = e.transport.condition
        self.transport_cond = (c.name, c.description) if c else ("?", "?")

    def on_transport_closed(self, e):
        if e.connection is not None:
            self.closed.add(id(e.connection))
        self.done = True


class Login(mqdtest.Client):
    """A TLS connection with cert/key logging in with mechs (user/password for PLAIN): was it
    opened, or what did the transport say? With send_to, once open it attaches a sender
    there: link_cond is its refusal, or "opened"."""

    def __init__(self, url, ca, cert, key, mechs, user=None, password=None, send_to=None):
        super().__init__()
        self.url, self.ca, self.cert, self.key = url, ca, cert, key
        self.mechs, self.user, self.password = mechs, user, password
        self.send_to = send_to
        self.opened = False
        self.transport_cond = self.link_cond = None

    def on_start(self, e):
        dom = SSLDomain(SSLDomain.MODE_CLIENT)
        dom.set_trusted_ca_db(self.ca)
        dom.set_peer_authentication(SSLDomain.VERIFY_PEER)
        dom.set_credentials(self.cert, self.key, None)
        kw = {"user": self.user, "password": self.password} if self.user else {}
        self.connect(e.container, self.url, allowed_mechs=self.mechs, ssl_domain=dom, **kw)

    def on_connection_opened(self, e):
        self.opened = True
        if self.send_to is None:
            self.finish()
        else:
            e.container.create_sender(e.connection, self.send_to)

    def on_link_opened(self, e):
        self.link_cond = "opened"
        self.finish()

    def on_link_error(self, e):
        c = e.link.remote_condition
        self.link_cond = (c.name, c.description) if c else (None, None)
        self.finish()

    def on_transport_error(self, e):
        c = e.transport.condition
        self.transport_cond = (c.name, c.description) if c else ("?", "?")

    def on_transport_closed(self, e):
        if e.connection is not None:
            self.closed.add(id(e.connection))
        self.done = True


class NodeClient(mqdtest.Client):
    """A TLS connection with a node certificate logging in with SASL EXTERNAL (Proton's
    client: an empty authzid). Once open: a fetch link with fetch_props; once the leader
    answered it (a first run, or a refusal), the links of `others` ((name, is_sender,
    address, props)); done when each of those was refused, or 1 s after they were
    attached. links[name]: the link's first refusal (name, description), else "opened"
    once the peer attached it; fetched: the runs the fetch link received."""

    def __init__(self, url, ca, cert, key, fetch_props, others):
        super().__init__()
        self.url, self.ca, self.cert, self.key = url, ca, cert, key
        self.fetch_props, self.others = fetch_props, others
        self.opened = False
        self.transport_cond = None
        self.links = {}
        self.fetched = 0
        self.started_others = False

    def on_start(self, e):
        dom = SSLDomain(SSLDomain.MODE_CLIENT)
        dom.set_trusted_ca_db(self.ca)
        dom.set_peer_authentication(SSLDomain.VERIFY_PEER)
        dom.set_credentials(self.cert, self.key, None)
        self.connect(e.container, self.url, allowed_mechs="EXTERNAL", ssl_domain=dom)

    def on_connection_opened(self, e):
        self.opened = True
        e.container.create_receiver(e.connection, "$repl/r3/0", name="fetch",
                                    options=[Props(self.fetch_props)])

    def _others(self, e):
        if self.started_others:
            return
        self.started_others = True
        for name, is_sender, addr, props in self.others:
            opts = [Props(props)] if props else None
            if is_sender:
                e.container.create_sender(e.connection, addr, name=name, options=opts)
            else:
                e.container.create_receiver(e.connection, addr, name=name, options=opts)
        e.container.schedule(1.0 * SLOW, self)

    def _check_done(self):
        if self.started_others and all(isinstance(self.links.get(n), tuple)
                                       for n, _, _, _ in self.others):
            self.finish()

    def on_timer_task(self, e):
        self.finish()

    def on_link_opened(self, e):
        self.links.setdefault(e.link.name, "opened")

    def on_message(self, e):
        if e.link.name == "fetch":
            self.fetched += 1
            self._others(e)

    def on_link_error(self, e):
        c = e.link.remote_condition
        if not isinstance(self.links.get(e.link.name), tuple):
            self.links[e.link.name] = (c.name, c.description) if c else (None, None)
        if e.link.name == "fetch":
            self._others(e)
        self._check_done()

    def on_transport_error(self, e):
        c = e.transport.condition
        self.transport_cond = (c.name, c.description) if c else ("?", "?")

    def on_transport_closed(self, e):
        if e.connection is not None:
            self.closed.add(id(e.connection))
        self.done = True

    def status(self):
        return "opened %s, links %r, fetched %d, transport %r" % (
            self.opened, self.links, self.fetched, self.transport_cond)


def log_end(raw):
    """(end offset, epoch of the last record) of a partition's raw records (0, 0 if empty):
    what a follower holding them puts in its fetch attach."""
    pos, end, epoch = 0, 0, 0
    while pos + 32 <= len(raw):
        end = int.from_bytes(raw[pos + 8:pos + 16], "little") + 1
        epoch = int.from_bytes(raw[pos + 24:pos + 28], "little")
        pos += 4 + int.from_bytes(raw[pos:pos + 4], "little")
    return end, epoch


def lag_of(port, node):
    """The leader's mqd_repl_follower_lag_records for node on r3/0 (None if absent)."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10 * SLOW) as r:
        text = r.read().decode()
    m = re.search(r'mqd_repl_follower_lag_records\{topic="r3",partition="0",follower="%d"\} (\d+)'
                  % node, text)
    return int(m.group(1)) if m else None


def current_log(b):
    with open(b.logs[-1], "rb") as f:
        return f.read().decode("utf-8", "replace")


def node_broker(t, etcd, i, pki, auth):
    tport = mqdtest.free_port()
    mport = mqdtest.free_port()
    sets = cluster_sets(etcd, i, RACKS[i], replica_lag_ms=LAG_MS, replication_tls="on",
                        replication_ca_file=pki["ca"], replication_peer_verify="on",
                        tls_cert=pki["n%d" % i][0], tls_key=pki["n%d" % i][1],
                        metrics_listen="127.0.0.1:%d" % mport)
    sets["user.peer.cert_cn"] = "mqd-node-1"
    sets["user.alice.cert_cn"] = "alice"
    sets.update(auth)
    conf = os.path.join(t.tmpdir, "n%d.conf" % i)  # a file for SIGHUP to reload (h)
    with open(conf, "w") as f:
        f.write("log_level = info\n")
    b = t.broker("n%d" % i, start=False, sets=sets, conf=conf,
                 args=["--listen", "amqps://127.0.0.1:%d" % tport])
    b.tls_port, b.metrics_port = tport, mport
    return b


def refused_start(b, sets, what):
    """Runs b's argv with sets instead of its own and expects exit != 0; the output."""
    saved = b.sets
    b.sets = sets
    try:
        r = subprocess.run(b.argv(), stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=30 * SLOW)
    finally:
        b.sets = saved
    out = (r.stdout + r.stderr).decode(errors="replace")
    log("%s: exit %d: %s" % (what, r.returncode, out.strip()[-400:]))
    check(r.returncode != 0, "mqd started with %s" % what)
    return out


def partition(etcd):
    return get_json(etcd.port, "/mqd/partitions/r3/0")


def send(url, n, prefix):
    s = Sender(url, "r3", n, prefix)
    t0 = time.monotonic()
    mqdtest.run_container(s, 120)
    dt = time.monotonic() - t0
    log("%s: %s in %.2fs" % (prefix, s.status(), dt))
    check(s.link_cond is None and s.accepted == n and not s.rejected,
          "%s: %s, link %r, rejected %r" % (prefix, s.status(), s.link_cond, s.rejected[:3]))
    return dt


def body(t):
    if shutil.which("etcd") is None:
        skip("etcd is not on PATH (Debian: apt-get install etcd-server)")
    if shutil.which("openssl") is None:
        skip("openssl CLI not available")
    d = os.path.join(t.tmpdir, "pki")
    os.makedirs(d)
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    pki = {"ca": os.path.join(d, "ca.crt"), "other-ca": os.path.join(d, "other-ca.crt")}
    for i in RACKS:
        pki["n%d" % i] = make_cert(d, "n%d" % i, "mqd-node-%d" % i, "ca", SERVER_EXT)
    etcd = Etcd(t)
    etcd.start()
    auth = repl_user_sets()
    coll = mqdtest.Collect()
    brokers = {i: node_broker(t, etcd, i, pki, auth) for i in RACKS}
    with coll.case("(z) replication_peer_verify = on without replication_ca_file: refused"):
        sets = dict(brokers[1].sets)
        del sets["replication_ca_file"]
        out = refused_start(brokers[1], sets, "replication_peer_verify and no CA file")
        check("replication_peer_verify" in out and "replication_ca_file" in out,
              "the error does not name the keys: %r" % out[-300:])
        check(not read_keys(etcd.port, "/mqd/nodes/"), "the refused node registered in etcd")
    for b in brokers.values():
        b.start()
    wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)
    rc, out, err = mqdtest.mqctl(brokers[1].url, "topic", "create", "r3", "--partitions", "1",
                                 "--config", "replication_factor=3")
    check(rc == 0, "mqctl topic create: %s" % (out + err))
    ps = wait_for("/mqd/partitions/r3/0", lambda: partition(etcd), 10)
    leader = ps["leader"]
    fa, fb = [i for i in sorted(RACKS) if i != leader]
    L, B = brokers[leader], brokers[fb]
    tls_url = "amqps://127.0.0.1:%d" % L.tls_port
    log("leader %d, followers %d (A) and %d (B)" % (leader, fa, fb))
    with coll.case("(a) mutual TLS: ISR 3, %d acks = all sends, byte-equal" % N):
        wait_for("both followers fetching", lambda: all(
            "node %d fetches from" % f in L.log_text() for f in (fa, fb)), 30)
        send(L.url, N, "m")
        isr = wait_for("ISR 3", lambda: (lambda p: p["isr"] if p and len(p["isr"]) == 3
                                         else None)(partition(etcd)), 10)
        rc, out, err = mqdtest.mqctl(L.url, "--json", "connection", "list")
        check(rc == 0, "connection list: %d %s" % (rc, err))
        peers = [c for c in json.loads(out) if c.get("user") == "repl" and fetch_conn(c)]
        log("ISR %r; repl connections: %r" % (isr, [(c.get("tls_version"), c.get("sasl_mechanism"))
                                                   for c in peers]))
        check(len(peers) == 2 and all(c["tls"] is True and c["sasl_mechanism"] == "PLAIN"
                                      for c in peers), "fetch connections %r" % peers)

        def same():
            raw = {i: partition_bytes(b, "r3", 0) for i, b in brokers.items()}
            return raw if all(v == raw[leader] for v in raw.values()) else None
        raw = wait_for("the three logs equal", same, 30)
        n = {i: count_records(v) for i, v in raw.items()}
        log("records per node %r, %d bytes each" % (n, len(raw[leader])))
        check(all(v == N for v in n.values()), "records per node %r" % n)
    with coll.case("(b) follower %d's certificate claiming node %d: refused, B keeps fetching"
                   % (fa, fb)):
        ep = partition(etcd)["epoch"]
        attaches = L.log_text().count("node %d fetches from" % fb)
        lag0 = lag_of(L.metrics_port, fb)
        p = Probe(tls_url, {"mqd:node-id": uint(fb), "mqd:fetch-offset": ulong(N),
                            "mqd:last-epoch": uint(ep), "mqd:epoch": uint(ep)},
                  pki["ca"], *pki["n%d" % fa])
        mqdtest.run_container(p, 30)
        log("probe with node %d's certificate as node %d: %r, %d received" % (fa, fb, p.link_cond,
                                                                               p.got))
        want = ("amqp:unauthorized-access",
                "replication_peer_verify: the client certificate names CN=mqd-node-%d, not "
                "mqd-node-%d (the attach's mqd:node-id %d)" % (fa, fb, fb))
        check(p.link_cond == want, "probe link: %r, want %r" % (p.link_cond, want))
        check(p.got == 0, "the refused probe received %d messages" % p.got)
        dt = send(L.url, MORE, "after-probe")
        check(dt * 1000 < LAG_MS, "acks = all sends took %.2fs (B's settlements stalled?)" % dt)
        lag = wait_for("node %d's lag 0" % fb, lambda: (lambda v: v == 0 and [v])(
            lag_of(L.metrics_port, fb)), 10)
        n_b = count_records(partition_bytes(B, "r3", 0))
        again = L.log_text().count("node %d fetches from" % fb)
        log("node %d: settled end %d before the probe (lag %r), %d after %d more sends (lag %r);"
            " %d records; fetch attaches %d -> %d; ISR %r"
            % (fb, N - lag0, lag0, N + MORE - lag[0], MORE, lag[0], n_b, attaches, again,
               partition(etcd)["isr"]))
        check(again == attaches, "node %d attached again (%d -> %d): its link was taken over"
              % (fb, attaches, again))
        check(n_b == N + MORE and len(partition(etcd)["isr"]) == 3,
              "node %d holds %d records, ISR %r" % (fb, n_b, partition(etcd)["isr"]))
    with coll.case("(c) no client certificate: refused"):
        p = Probe(tls_url, {"mqd:node-id": uint(fb), "mqd:fetch-offset": ulong(N + MORE)},
                  pki["ca"])
        mqdtest.run_container(p, 30)
        log("probe without a certificate: %r, %d received" % (p.link_cond, p.got))
        check(p.link_cond == ("amqp:unauthorized-access",
                              "replication_peer_verify: no verified client certificate "
                              "(mqd-node-%d needed)" % fb), "probe link: %r" % (p.link_cond,))
        check(p.got == 0, "the refused probe received %d messages" % p.got)
    with coll.case("(d) a certificate of another CA never gets past TLS"):
        fails = L.log_text().count("certificate verify failed")
        foreign = make_cert(d, "foreign", "mqd-node-%d" % fb, "other-ca", SERVER_EXT)
        p = Probe(tls_url, {"mqd:node-id": uint(fb), "mqd:fetch-offset": ulong(N + MORE)},
                  pki["ca"], *foreign)
        mqdtest.run_container(p, 30)
        log("probe with another CA's certificate: transport %r, link %r, opened %s, %d received"
            % (p.transport_cond, p.link_cond, p.opened, p.got))
        check(p.transport_cond is not None and not p.opened and p.link_cond is None and p.got == 0,
              "foreign probe: transport %r link %r opened %s got %d"
              % (p.transport_cond, p.link_cond, p.opened, p.got))
        wait_for("the leader's handshake failure", lambda: L.log_text().count(
            "certificate verify failed") > fails, 5)
    with coll.case("(e) node %d with a certificate named mqd-node-9" % fb):
        n9 = make_cert(d, "n9", "mqd-node-9", "ca", CLIENT_EXT)
        B.stop()
        before = count_records(partition_bytes(B, "r3", 0))
        wrong = dict(B.sets, replication_cert=n9[0], replication_key=n9[1])
        out = refused_start(B, wrong, "peer verify on and a certificate of another node")
        check("replication_cert" in out and "CN=mqd-node-9, not mqd-node-%d" % fb in out,
              "the error does not say why: %r" % out[-400:])
        B.sets = dict(wrong, replication_peer_verify="off")
        B.start()
        why = ("amqp:unauthorized-access: replication_peer_verify: the client certificate names "
               "CN=mqd-node-9, not mqd-node-%d" % fb)
        wait_for("node %d's log saying why" % fb, lambda: why in current_log(B), 30)
        check("names CN=mqd-node-9, not mqd-node-%d (node_id %d)" % (fb, fb) in current_log(B),
              "no start-up warning about its own certificate")
        isr = wait_for("etcd's ISR without node %d" % fb, lambda: (
            lambda p: p["isr"] if p and fb not in p["isr"] else None)(partition(etcd)), 30)
        log("ISR without node %d: %r" % (fb, isr))
        send(L.url, LATE, "late")
        time.sleep(LAG_MS / 1000.0 + 1.0 * SLOW)  # time to catch up, were it able to
        p = partition(etcd)
        refusals = current_log(B).count(why)
        after = count_records(partition_bytes(B, "r3", 0))
        lead_n = count_records(partition_bytes(L, "r3", 0))
        log("node %d: %d records before, %d after; leader %d; ISR %r; %d refusals logged"
            % (fb, before, after, lead_n, p["isr"], refusals))
        check(fb not in p["isr"] and len(p["isr"]) == 2, "ISR %r" % p["isr"])
        check(before == N + MORE and after == before and lead_n == N + MORE + LATE,
              "records: node %d %d -> %d, leader %d" % (fb, before, after, lead_n))
        check(refusals >= 2, "%d refusals logged (it keeps retrying)" % refusals)
    with coll.case("(f) node %d with its own client certificate rejoins" % fb):
        own = make_cert(d, "c%d" % fb, "mqd-node-%d" % fb, "ca", CLIENT_EXT)
        B.stop()
        B.sets = dict(B.sets, replication_cert=own[0], replication_key=own[1],
                      replication_peer_verify="on")
        # its own client certificate, but the server certificate of another node
        out = refused_start(B, dict(B.sets, tls_cert=pki["n%d" % fa][0],
                                    tls_key=pki["n%d" % fa][1]),
                            "peer verify on and a server certificate of another node")
        check("tls_cert" in out and "CN=mqd-node-%d, not mqd-node-%d" % (fa, fb) in out and
              "refuse to fetch from this node" in out, "the error does not say why: %r" % out[-400:])
        B.start()
        isr = wait_for("ISR 3 again", lambda: (lambda p: p["isr"] if p and len(p["isr"]) == 3
                                               else None)(partition(etcd)), 30)
        raw = wait_for("the three logs equal", same, 30)
        n = {i: count_records(v) for i, v in raw.items()}
        log("ISR %r; records per node %r, %d bytes each" % (isr, n, len(raw[leader])))
        check(all(v == N + MORE + LATE for v in n.values()), "records per node %r" % n)
    with coll.case("(g) a node certificate logs in with SASL EXTERNAL as a node, never a user"):
        ext = Login(tls_url, pki["ca"], *pki["n1"], "EXTERNAL", send_to="r3")
        mqdtest.run_container(ext, 30)
        alice = make_cert(d, "alice", "alice", "ca", CLIENT_EXT)
        refusals = L.log_text().count("never a user")
        ali = Login(tls_url, pki["ca"], *alice, "EXTERNAL")
        mqdtest.run_container(ali, 30)
        plain = Login(tls_url, pki["ca"], *pki["n1"], "PLAIN", "repl", "s3cret", send_to="r3")
        mqdtest.run_container(plain, 30)
        log("node 1's certificate: EXTERNAL opened %s, its sender %r; alice's (same CA): "
            "EXTERNAL opened %s (%r); PLAIN opened %s, its sender %r"
            % (ext.opened, ext.link_cond, ali.opened, ali.transport_cond, plain.opened,
               plain.link_cond))
        check(ext.opened and ext.link_cond is not None and
              ext.link_cond[0] == "amqp:unauthorized-access" and "node connection" in
              ext.link_cond[1], "EXTERNAL with a node certificate: opened %s, sender %r"
              % (ext.opened, ext.link_cond))
        check(not ali.opened and ali.transport_cond is not None,
              "EXTERNAL with alice's certificate: opened %s %r" % (ali.opened, ali.transport_cond))
        wait_for("the leader's SASL refusal of alice",
                 lambda: L.log_text().count("never a user") > refusals, 5)
        check(plain.opened and plain.link_cond == "opened",
              "PLAIN with a node certificate: %r, sender %r" % (plain.transport_cond,
                                                               plain.link_cond))
    with coll.case("(h) after a reload of the leader the CN rule still holds"):
        reloads = L.log_text().count("reloaded: TLS on")
        os.kill(L.pid, signal.SIGHUP)
        wait_for("the leader's reload", lambda: L.log_text().count("reloaded: TLS on") > reloads, 10)
        end = N + MORE + LATE
        p = Probe(tls_url, {"mqd:node-id": uint(fb), "mqd:fetch-offset": ulong(end)}, pki["ca"],
                  *pki["n%d" % fa])
        mqdtest.run_container(p, 30)
        log("after SIGHUP, node %d's certificate as node %d: %r, %d received" % (fa, fb, p.link_cond,
                                                                                 p.got))
        check(p.link_cond is not None and p.link_cond[0] == "amqp:unauthorized-access"
              and "names CN=mqd-node-%d, not mqd-node-%d" % (fa, fb) in p.link_cond[1]
              and p.got == 0, "probe after the reload: %r, %d received" % (p.link_cond, p.got))
        send(L.url, 50, "after-reload")
        raw = wait_for("the three logs equal", same, 30)
        check(count_records(raw[leader]) == end + 50, "leader holds %d records"
              % count_records(raw[leader]))
    certificates_alone(t, coll, etcd, brokers, pki, end + 50)
    coll.finish()


def same_logs(brokers, leader):
    raw = {i: partition_bytes(b, "r3", 0) for i, b in brokers.items()}
    return raw if all(v == raw[leader] for v in raw.values()) else None


def isr3(etcd):
    p = partition(etcd)
    return p if p and len(p["isr"]) == 3 else None


def certificates_alone(t, coll, etcd, brokers, pki, total):
    """(i)-(l): the nodes without replication_user: SASL EXTERNAL, both ends checked."""
    with coll.case("(i) no replication_user: followers log in by certificate (SASL EXTERNAL)"):
        for b in brokers.values():
            b.stop()
        for b in brokers.values():
            b.sets = {k: v for k, v in b.sets.items()
                      if k not in ("replication_user", "replication_password")}
            b.start()
        wait_for("3 nodes in etcd", lambda: len(read_keys(etcd.port, "/mqd/nodes/")) == 3, 20)

        def settled():  # a restarted leader may hand the partition over (epoch + 1) first
            p = partition(etcd)
            lead = brokers[p["leader"]] if p else None
            return p if lead and all("node %d fetches from" % f in current_log(lead)
                                     for f in brokers if f != p["leader"]) else None
        leader = wait_for("a leader both followers fetch from", settled, 30)["leader"]
        L = brokers[leader]
        fol = [i for i in sorted(brokers) if i != leader]
        send(L.url, N, "ext")
        total += N
        ps = wait_for("ISR 3", lambda: isr3(etcd), 10)
        rc, out, err = mqdtest.mqctl(L.url, "--json", "connection", "list")
        check(rc == 0, "connection list: %d %s" % (rc, err))
        peers = [c for c in json.loads(out) if str(c.get("user", "")).startswith("mqd-node-") and fetch_conn(c)]
        log("leader %d, ISR %r, epoch %d; fetch connections: %r" % (
            leader, ps["isr"], ps["epoch"], [(c.get("user"), c.get("sasl_mechanism"),
                                              c.get("tls_version")) for c in peers]))
        check(sorted(c["user"] for c in peers) == ["mqd-node-%d" % f for f in fol] and
              all(c["tls"] is True and c["sasl_mechanism"] == "EXTERNAL" for c in peers),
              "fetch connections %r" % peers)
        logins = current_log(L).count("SASL EXTERNAL peer=")
        check(all("node=mqd-node-%d: a node connection" % f in current_log(L) for f in fol),
              "the leader logged no node login of %r" % fol)
        raw = wait_for("the three logs equal", lambda: same_logs(brokers, leader), 30)
        n = {i: count_records(v) for i, v in raw.items()}
        log("%d node logins on the leader; records per node %r, %d bytes each"
            % (logins, n, len(raw[leader])))
        check(all(v == total for v in n.values()), "records per node %r, want %d" % (n, total))
    fa, fb = fol
    A, B = brokers[fa], brokers[fb]
    tls_url = "amqps://127.0.0.1:%d" % L.tls_port
    with coll.case("(j) a node certificate's connection carries fetch links only"):
        before = partition_bytes(L, "r3", 0)
        end, last_epoch = log_end(partition_bytes(A, "r3", 0))
        ep = partition(etcd)["epoch"]
        own = {"mqd:node-id": uint(fa), "mqd:fetch-offset": ulong(end),
               "mqd:last-epoch": uint(last_epoch), "mqd:epoch": uint(ep)}
        other = dict(own, **{"mqd:node-id": uint(fb)})
        others = [("as-b", False, "$repl/r3/0", other), ("send", True, "r3", None),
                  ("recv", False, "r3", None), ("mgmt-send", True, "$management", None),
                  ("mgmt-recv", False, "$management", None)]
        p = NodeClient(tls_url, pki["ca"], *pki["n%d" % fa], own, others)
        mqdtest.run_container(p, 30)
        log("node %d's certificate, SASL EXTERNAL: %s" % (fa, p.status()))
        check(p.opened and p.fetched >= 1 and (
            p.links.get("fetch") == "opened" or p.links["fetch"][0] == "amqp:link:detach-forced"),
            "the fetch link as node %d: %r, %d runs" % (fa, p.links.get("fetch"), p.fetched))
        check(p.links.get("as-b") == (
            "amqp:unauthorized-access", "replication_peer_verify: the client certificate names "
            "CN=mqd-node-%d, not mqd-node-%d (the attach's mqd:node-id %d)" % (fa, fb, fb)),
            "the fetch link as node %d: %r" % (fb, p.links.get("as-b")))
        for name in ("send", "recv", "mgmt-send", "mgmt-recv"):
            got = p.links.get(name)
            check(isinstance(got, tuple) and got[0] == "amqp:unauthorized-access" and
                  "fetch links only" in got[1], "%s on a node connection: %r" % (name, got))
        check(partition_bytes(L, "r3", 0) == before, "the leader's log changed")
        ps = wait_for("ISR 3", lambda: isr3(etcd), 10)
        send(L.url, LATE, "after-node-probe")
        total += LATE
        raw = wait_for("the three logs equal", lambda: same_logs(brokers, leader), 30)
        log("ISR %r; records per node %r" % (ps["isr"], {i: count_records(v)
                                                        for i, v in raw.items()}))
        check(count_records(raw[leader]) == total, "leader holds %d records, want %d"
              % (count_records(raw[leader]), total))
    with coll.case("(k) node %d pointed at node %d, which is not the leader %d: never fetches"
                   % (fb, fa, leader)):
        key = "/mqd/nodes/%d" % leader
        value, lease, _ = read_keys(etcd.port, key)[key]
        doc = json.loads(value)
        doc["repl_address"] = "127.0.0.1:%d" % A.tls_port
        post(etcd.port, "/v3/kv/put", {"key": b64(key), "value": b64(json.dumps(doc)),
                                       "lease": str(lease)})
        a_fails = A.log_text().count("TLS handshake failed")
        B.stop()
        before = count_records(partition_bytes(B, "r3", 0))
        B.start()
        why = "the peer's certificate names CN=mqd-node-%d, not mqd-node-%d" % (fa, leader)
        wait_for("node %d's log saying why" % fb, lambda: why in current_log(B), 30)
        isr = wait_for("etcd's ISR without node %d" % fb, lambda: (
            lambda p: p["isr"] if p and fb not in p["isr"] else None)(partition(etcd)), 30)
        log("ISR without node %d: %r" % (fb, isr))
        send(L.url, LATE, "wrong-leader")
        time.sleep(LAG_MS / 1000.0 + 1.0 * SLOW)  # time to catch up, were it able to
        p = partition(etcd)
        refused = current_log(B).count(why)
        retries = current_log(B).count("next attempt in")
        after = count_records(partition_bytes(B, "r3", 0))
        lead_n = count_records(partition_bytes(L, "r3", 0))
        a_logins = A.log_text().count("node=mqd-node-%d" % fb)
        a_fails = A.log_text().count("TLS handshake failed") - a_fails
        log("node %d: %d refusals logged, %d retries; %d records before, %d after; leader %d; "
            "ISR %r; on node %d: %d handshakes failed, %d logins of node %d"
            % (fb, refused, retries, before, after, lead_n, p["isr"], fa, a_fails, a_logins, fb))
        for ln in [x for x in current_log(B).splitlines() if why in x][:2] + [
                x for x in A.log_text().splitlines() if "TLS handshake failed" in x][-1:]:
            log("  " + ln)
        check(fb not in p["isr"] and len(p["isr"]) == 2, "ISR %r" % p["isr"])
        check(after == before and lead_n == total + LATE,
              "records: node %d %d -> %d, leader %d" % (fb, before, after, lead_n))
        check(refused >= 2 and a_fails >= 2, "%d refusals logged, %d failed handshakes on node %d"
              % (refused, a_fails, fa))
        check(a_logins == 0 and "fetching from node" not in current_log(B),
              "node %d logged in at node %d (%d) or attached" % (fb, fa, a_logins))
        total += LATE
        post(etcd.port, "/v3/kv/put", {"key": b64(key), "value": b64(value.decode()),
                                       "lease": str(lease)})
        B.stop()
        B.start()
        isr = wait_for("ISR 3 again", lambda: isr3(etcd), 30)["isr"]
        raw = wait_for("the three logs equal", lambda: same_logs(brokers, leader), 30)
        n = {i: count_records(v) for i, v in raw.items()}
        log("key restored: ISR %r; records per node %r, %d bytes each" % (isr, n, len(raw[leader])))
        check(all(v == total for v in n.values()), "records per node %r, want %d" % (n, total))
    with coll.case("(l) a tls_cert replaced in place by another node's refuses the reload"):
        cert, key = pki["n%d" % leader]
        saved = {p: open(p, "rb").read() for p in (cert, key)}
        served = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", L.tls_port)))
        for src, dst in zip(pki["n%d" % fa], (cert, key)):
            shutil.copyfile(src, dst)
        failed = current_log(L).count("reload failed")
        os.kill(L.pid, signal.SIGHUP)
        wait_for("the leader's refused reload",
                 lambda: current_log(L).count("reload failed") > failed, 10)
        line = [x for x in current_log(L).splitlines() if "names CN=mqd-node-%d, not mqd-node-%d"
                % (fa, leader) in x]
        after = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", L.tls_port)))
        log("reload with node %d's certificate in node %d's files: %s; the listener still "
            "serves node %d's: %s" % (fa, leader, line[-1] if line else None, leader,
                                      after == served))
        check(line and "tls_cert" in line[-1] and after == served,
              "reload: %r, same certificate served %s" % (line, after == served))
        for p, data in saved.items():
            with open(p, "wb") as f:
                f.write(data)
        reloads = current_log(L).count("reloaded: TLS on")
        os.kill(L.pid, signal.SIGHUP)
        wait_for("the leader's reload", lambda: current_log(L).count("reloaded: TLS on") > reloads,
                 10)
        send(L.url, 50, "after-cert-reload")
        total += 50
        raw = wait_for("the three logs equal", lambda: same_logs(brokers, leader), 30)
        check(count_records(raw[leader]) == total, "leader holds %d records, want %d"
              % (count_records(raw[leader]), total))


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
