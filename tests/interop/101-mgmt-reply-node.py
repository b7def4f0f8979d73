#!/usr/bin/python3
"""Reply nodes (issue 32 points 1 and 7d): a receiver from `$management` or `$cbs` reads
a temporary node of its own connection, whatever its target names, and a management
reply goes only to such a node of the requesting connection.

Broker 1: allow_anonymous = off, users alice (ACL: send, receive, browse and create on
orders.* only) and admin (all); topic `secret` holds 10 messages, a queue consumer of
admin took 4 of them (6 left, lag 6).
- alice attaches a receiver with source $management and target `secret` (also one in
  copy mode, as a browser): neither gets any of secret's messages. Her requests with
  reply-to `secret` are answered on that receiver: READ com.mqd:topic secret 401,
  CREATE orders.b 401, READ com.microsoft:eventhub orders.a 200 (her own hub), each
  with its correlation-id and `to` = `secret`; the browser (same connection and target:
  the same node) sees copies of those 3 replies and nothing else. Afterwards secret's partition ends (10),
  its messages_in, its group lag (6) are unchanged (mqctl as admin) and a new queue
  consumer gets exactly the 6 messages admin did not take.
- a receiver from $management with target `brandnew` (a name alice may not create)
  works for her requests (200), and no topic `brandnew` exists after (mqctl topic list
  and describe: rc 3; no file or directory of that name in the data dir).
- a request whose reply-to names no receiver of its connection is rejected and not run:
  admin (who may send to `secret`) sends CREATE orders.viareply with reply-to `secret`:
  rejected; orders.viareply does not exist; secret unchanged.
- temporary nodes are their connection's: admin's second connection cannot attach a
  receiver to admin's first connection's dynamic address (amqp:unauthorized-access) but
  may send to it (ordinary reply-to messaging, as 05-request-response), and the first
  connection receives it; a sender to a `$tmp.r.` node is refused, a relayed message
  to one rejected. mqctl (dynamic reply-to) works throughout.
- 7d: two connections each attach a $management receiver with the same link name and
  target `shared-reply`; each gets exactly its own 4 replies, the other none.
- a reply that comes later (CREATE of 32 partitions) reaches the reply node: 201.

Broker 2 (Event Hubs style): sas_required = on, SASL ANONYMOUS, topic `secret` (2
partitions) written through a client holding a `manage` SAS token ($cbs put-token, 200),
which took 4 of 10 messages as a queue consumer.
- a client with no token: a receiver from `secret` is refused (amqp:unauthorized-access);
  a receiver from $management with target `secret` (link name as the SDKs use) gets none
  of secret's messages; READ com.microsoft:eventhub secret and READ com.mqd:topic secret
  with reply-to `secret` are answered 401 on that receiver; a $cbs receiver with no
  target (the reply address is its link name) gets the 401 of a bad put-token. Then
  secret's ends and messages_in are unchanged (READ with the token) and a queue consumer
  gets exactly the 6 left; target `brandnew2` made no topic (READ: 404).
- 7d for $cbs: two token-less connections with the same $cbs receiver link name: a
  put-token on one is answered on that one only."""

import base64
import hashlib
import hmac
import os
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mqdtest  # noqa: E402
from mqdtest import check, log, skip  # noqa: E402

from proton import Delivery, Message, Timeout  # noqa: E402
from proton.reactor import Copy, LinkOption  # noqa: E402
from proton.utils import BlockingConnection, LinkDetached, SendException  # noqa: E402

SLOW = mqdtest.SLOW
PW = {"alice": "alice-pw", "admin": "admin-pw"}
QUIET = 1.5  # seconds a receiver that must get nothing is watched (times SLOW)


class FixedTarget(LinkOption):
    """A receiver's target address, as the Event Hubs SDKs attach their reply receiver."""

    def __init__(self, address):
        self.address = address

    def apply(self, link):
        link.target.address = self.address


def mqd_passwd(user, pw):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--both", "--iterations", "4096", user], input=pw + "\n",
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return r.stdout


def connect(url, user=None):
    if user is None:
        return BlockingConnection(url, timeout=10 * SLOW)
    return BlockingConnection(url, timeout=10 * SLOW, user=user, password=PW[user], allowed_mechs="PLAIN")


def nothing_on(r, what):
    """r gets no message within QUIET s."""
    try:
        m = r.receive(timeout=QUIET * SLOW)
    except Timeout:
        return
    mqdtest.fail("%s received %r (to %r, correlation-id %r)" % (what, m.body, m.address, m.correlation_id))


class ReplyClient:
    """A $management (or $cbs) sender and a reply receiver on one connection."""

    def __init__(self, conn, node="$management", name="eh-reply", target=None, browse=False):
        opts = [FixedTarget(target)] if target else []
        if browse:
            opts.append(Copy())
        self.conn = conn
        self.reply_to = target or name
        self.r = conn.create_receiver(node, name=name, credit=50, options=opts or None)
        self.s = conn.create_sender(node, name=name + "-s")
        self.n = 0

    def send(self, props, body=None, reply_to=None):
        self.n += 1
        mid = "req-%s-%d" % (self.reply_to, self.n)
        self.s.send(Message(id=mid, reply_to=reply_to or self.reply_to, properties=props, body=body),
                    timeout=10 * SLOW)
        return mid

    def reply(self, mid):
        m = self.r.receive(timeout=10 * SLOW)
        self.r.accept()
        check(m.correlation_id == mid, "reply correlation-id %r, want %r (body %r)" % (m.correlation_id, mid, m.body))
        check(m.address == self.reply_to, "reply `to` %r, want %r" % (m.address, self.reply_to))
        ap = {str(k): v for k, v in (m.properties or {}).items()}
        st = ap.get("status-code", ap.get("statusCode"))
        return st, ap, m.body

    def call(self, props, body=None):
        return self.reply(self.send(props, body))


def sas_token(aud, key_name, key, se):
    """HMAC-SHA256 of the url-encoded audience, a newline and se (as the SDKs sign)."""
    sr = urllib.parse.quote(aud, safe="-_.!~*'()")
    sig = base64.b64encode(hmac.new(key.encode(), ("%s\n%d" % (sr, se)).encode(), hashlib.sha256).digest())
    return "SharedAccessSignature sr=%s&sig=%s&se=%d&skn=%s" % (
        sr, urllib.parse.quote(sig.decode(), safe="-_.!~*'()"), se, key_name)


def put_token(cbs, aud, token):
    props = {"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": aud}
    return cbs.call(props, token)


def fill_secret(conn, address="secret"):
    """10 messages into secret; a queue consumer takes 4: the bodies it took."""
    s = conn.create_sender(address)
    for i in range(10):
        s.send(Message(body="secret-%d" % i), timeout=10 * SLOW)
    s.close()
    q = conn.create_receiver(address, credit=4)
    took = set()
    for _ in range(4):
        took.add(q.receive(timeout=10 * SLOW).body)
        q.accept()
    q.close()
    return took


def drain_queue(conn, address, want):
    """A queue consumer's messages: exactly `want` of them, then nothing more."""
    q = conn.create_receiver(address, credit=20)
    got = []
    for _ in range(want):
        got.append(q.receive(timeout=10 * SLOW).body)
        q.accept()
    nothing_on(q, "queue consumer of %s after %d messages" % (address, want))
    q.close()
    return set(got)


# ---------------------------------------------------------------- broker 1: users and ACL

class Ctl:
    def __init__(self, b):
        self.url = "amqp://admin@127.0.0.1:%d" % b.port

    def json(self, *args):
        import json
        rc, out, err = mqdtest.mqctl(self.url, "--json", *args)
        check(rc == 0, "mqctl %s: exit %d: %s" % (" ".join(args), rc, err))
        return json.loads(out)

    def rc(self, *args):
        return mqdtest.mqctl(self.url, *args)[0]


def secret_state(ctl):
    t = ctl.json("topic", "describe", "secret")
    g = ctl.json("group", "describe", "secret", "$shared")
    return ([p["end"] for p in t["partition_info"]], t["messages_in"], g["lag"])


def acl_cases(coll, t):
    users = mqd_passwd("alice", PW["alice"]) + mqd_passwd("admin", PW["admin"])
    conf = os.path.join(t.tmpdir, "mqd.conf")
    with open(conf, "w") as f:
        f.write("allow_anonymous = off\nauto_create_topics = on\n" + users +
                "[acl]\nallow admin all *\nallow alice send,receive,browse,create orders.*\ndeny * all *\n")
    b = t.broker("acl", conf=conf)
    os.environ["MQCTL_PASSWORD"] = PW["admin"]
    ctl = Ctl(b)
    admin = connect(b.url, "admin")
    took = fill_secret(admin)
    before = secret_state(ctl)
    log("secret before: ends %r messages_in %r lag %r" % before)
    check(sum(before[0]) == 10 and before[2] == 6, "secret before: %r" % (before,))
    alice = connect(b.url, "alice")
    alice.create_sender("orders.a").send(Message(body="hub"), timeout=10 * SLOW)

    with coll.case("alice: $management receiver with target secret reads none of secret"):
        mc = ReplyClient(alice, name="eh-reply", target="secret")
        br = ReplyClient(alice, name="eh-browse", target="secret", browse=True)
        nothing_on(mc.r, "alice's $management receiver (target secret)")
        nothing_on(br.r, "alice's $management browser (target secret)")
        st, ap, _ = mc.call({"operation": "READ", "type": "com.mqd:topic", "name": "secret"})
        check(st == 401, "READ secret: %r" % ap)
        st, ap, _ = mc.call({"operation": "CREATE", "type": "com.mqd:topic", "name": "orders.b"}, {"partitions": 1})
        check(st == 401, "CREATE orders.b: %r" % ap)
        st, ap, body = mc.call({"operation": "READ", "type": "com.microsoft:eventhub", "name": "orders.a"})
        check(st == 200 and body["name"] == "orders.a", "READ eventhub orders.a: %r %r" % (ap, body))
        nothing_on(mc.r, "alice's $management receiver after 3 replies")
        # the browser reads the same node (same connection, same target): copies of the
        # 3 replies, nothing else
        seen = []
        for _ in range(3):
            m = br.r.receive(timeout=10 * SLOW)
            br.r.accept()
            seen.append(m.correlation_id)
        check(seen == ["req-secret-%d" % i for i in (1, 2, 3)], "the browser saw %r" % seen)
        nothing_on(br.r, "alice's $management browser after the 3 replies")
        mc.r.close()
        br.r.close()

    with coll.case("secret unchanged after alice's replies"):
        after = secret_state(ctl)
        log("secret after: ends %r messages_in %r lag %r" % after)
        check(after == before, "secret changed: before %r after %r" % (before, after))

    with coll.case("target naming a new name creates no topic"):
        mc = ReplyClient(alice, name="eh-new", target="brandnew")
        st, ap, _ = mc.call({"operation": "READ", "type": "com.microsoft:eventhub", "name": "orders.a"})
        check(st == 200, "READ through target brandnew: %r" % ap)
        names = [x["name"] for x in ctl.json("topic", "list")]
        check("brandnew" not in names, "topic list has brandnew: %r" % names)
        check(ctl.rc("topic", "describe", "brandnew") == 3, "brandnew can be described")
        hits = [os.path.join(d, n) for d, dirs, files in os.walk(b.data_dir) for n in dirs + files if "brandnew" in n]
        check(not hits, "brandnew on disk: %r" % hits)
        mc.r.close()

    with coll.case("a reply-to with no receiver of the connection: rejected, not run"):
        s = admin.create_sender("$management", name="admin-mgmt-s")
        try:
            s.send(Message(id="via-secret", reply_to="secret", body={"partitions": 1},
                           properties={"operation": "CREATE", "type": "com.mqd:topic", "name": "orders.viareply"}),
                   timeout=10 * SLOW)
            mqdtest.fail("a request with reply-to secret (no receiver) was accepted")
        except SendException as e:
            check(e.state == Delivery.REJECTED, "request outcome %r, want rejected" % e.state)
        check(ctl.rc("topic", "describe", "orders.viareply") == 3, "orders.viareply was created")
        after = secret_state(ctl)
        check(after == before, "secret changed: before %r after %r" % (before, after))

    with coll.case("temporary nodes are their connection's"):
        admin2 = connect(b.url, "admin")
        dyn = admin.create_receiver(None, dynamic=True, credit=10)
        addr = dyn.remote_source.address
        log("admin's dynamic address %r" % addr)
        try:
            admin2.create_receiver(addr)
            mqdtest.fail("another connection attached a receiver to %s" % addr)
        except LinkDetached as e:
            check("unauthorized-access" in str(e), "refusal %s" % e)
        admin2.create_sender(addr).send(Message(body="to-dynamic"), timeout=10 * SLOW)
        m = dyn.receive(timeout=10 * SLOW)
        dyn.accept()
        check(m.body == "to-dynamic", "dynamic receiver got %r" % m.body)
        try:
            admin2.create_sender("$tmp.r.1.0123456789abcdef")
            mqdtest.fail("a sender to a $tmp.r. node attached")
        except LinkDetached as e:
            check("unauthorized-access" in str(e), "refusal %s" % e)
        relay = admin2.create_sender(None)
        try:
            relay.send(Message(address="$tmp.r.1.0123456789abcdef", body="forged"), timeout=10 * SLOW)
            mqdtest.fail("a relayed message to a $tmp.r. node was accepted")
        except SendException as e:
            check(e.state == Delivery.REJECTED, "relayed outcome %r" % e.state)
        admin2.close()

    with coll.case("7d: two connections, one reply link name and target"):
        c1, c2 = connect(b.url, "admin"), connect(b.url, "admin")
        m1 = ReplyClient(c1, name="eh-reply", target="shared-reply")
        m2 = ReplyClient(c2, name="eh-reply", target="shared-reply")
        props = {"operation": "READ", "type": "com.microsoft:eventhub", "name": "secret"}
        ids1 = [m1.send(props) for _ in range(4)]
        ids2 = [m2.send(props) for _ in range(4)]
        for mc, ids in ((m1, ids1), (m2, ids2)):
            for mid in ids:
                st, ap, _ = mc.reply(mid)
                check(st == 200, "READ: %r" % ap)
        nothing_on(m1.r, "connection 1's reply receiver after its 4 replies")
        nothing_on(m2.r, "connection 2's reply receiver after its 4 replies")
        c1.close()
        c2.close()

    with coll.case("a late reply (CREATE of 32 partitions, answered later) reaches the reply node"):
        c = connect(b.url, "admin")
        mc = ReplyClient(c, name="eh-late", target="late-reply")
        st, ap, body = mc.call({"operation": "CREATE", "type": "com.mqd:topic", "name": "orders.big"},
                               {"partitions": 32})
        check(st == 201 and body["partitions"] == 32, "CREATE orders.big: %r %r" % (ap, body))
        c.close()

    with coll.case("secret's queue consumer gets exactly the 6 it did not take"):
        rest = drain_queue(admin, "secret", 6)
        check(not (rest & took) and len(rest | took) == 10, "took %r, then %r" % (sorted(took), sorted(rest)))
    alice.close()
    admin.close()


# ---------------------------------------------------------------- broker 2: SAS, no token

def sas_cases(coll, t):
    key = base64.b64encode(os.urandom(32)).decode()
    conf = os.path.join(t.tmpdir, "sas.conf")
    with open(conf, "w") as f:
        f.write("sas_required = on\n[topic secret]\npartitions = 2\n"
                "[sas_key root]\nkey = %s\nrights = manage\nscope = *\n" % key)
    b = t.broker("sas", conf=conf)
    aud = "sb://127.0.0.1:%d/secret" % b.port
    owner = connect(b.url)
    cbs = ReplyClient(owner, node="$cbs", name="cbs-owner")
    st, ap, _ = put_token(cbs, aud, sas_token(aud, "root", key, int(time.time()) + 3600))
    check(st == 200, "put-token: %r" % ap)
    # a namespace-wide token too: a READ of a name that is not `secret` (brandnew2 below)
    # must be answered 404, not the 401 of a token that covers one hub only
    ns = "sb://127.0.0.1:%d" % b.port
    st, ap, _ = put_token(cbs, ns, sas_token(ns, "root", key, int(time.time()) + 3600))
    check(st == 200, "namespace-wide put-token: %r" % ap)
    took = fill_secret(owner)
    mgmt = ReplyClient(owner, name="owner-mgmt", target="owner-mgmt")

    def state():
        st, ap, body = mgmt.call({"operation": "READ", "type": "com.mqd:topic", "name": "secret"})
        check(st == 200, "READ secret with the token: %r" % ap)
        return [p["end"] for p in body["partition_info"]], body["messages_in"]

    before = state()
    check(sum(before[0]) == 10, "secret before: %r" % (before,))
    anon = connect(b.url)

    with coll.case("no token: a receiver from secret is refused"):
        try:
            anon.create_receiver("secret")
            mqdtest.fail("a receiver from secret attached without a token")
        except LinkDetached as e:
            check("unauthorized-access" in str(e), "refusal %s" % e)

    with coll.case("no token: $management receiver with target secret"):
        mc = ReplyClient(anon, name="secret", target="secret")
        nothing_on(mc.r, "token-less $management receiver (target secret)")
        st, ap, _ = mc.call({"operation": "READ", "type": "com.microsoft:eventhub", "name": "secret"})
        check(st == 401, "READ eventhub secret without a token: %r" % ap)
        st, ap, _ = mc.call({"operation": "READ", "type": "com.mqd:topic", "name": "secret"})
        check(st == 401, "READ topic secret without a token: %r" % ap)
        nothing_on(mc.r, "token-less $management receiver after its 401s")
        mc.r.close()

    with coll.case("no token: $cbs replies on the link-name node"):
        cb = ReplyClient(anon, node="$cbs", name="cbs-anon")
        st, ap, _ = put_token(cb, aud, "SharedAccessSignature sr=x&sig=y&se=1&skn=root")
        check(st == 401, "bad put-token: %r" % ap)

    with coll.case("no token: target brandnew2 creates no topic"):
        mc = ReplyClient(anon, name="eh-new", target="brandnew2")
        st, ap, _ = mc.call({"operation": "READ", "type": "com.microsoft:eventhub", "name": "secret"})
        check(st == 401, "READ through target brandnew2: %r" % ap)
        st, ap, _ = mgmt.call({"operation": "READ", "type": "com.mqd:topic", "name": "brandnew2"})
        check(st == 404, "brandnew2 exists: %r" % ap)

    with coll.case("7d for $cbs: one link name on two connections"):
        a1, a2 = connect(b.url), connect(b.url)
        k1 = ReplyClient(a1, node="$cbs", name="cbs-same")
        k2 = ReplyClient(a2, node="$cbs", name="cbs-same")
        for _ in range(3):
            st, ap, _ = put_token(k1, aud, "SharedAccessSignature sr=x&sig=y&se=1&skn=root")
            check(st == 401, "put-token on connection 1: %r" % ap)
        nothing_on(k2.r, "connection 2's $cbs receiver (connection 1 asked)")
        nothing_on(k1.r, "connection 1's $cbs receiver after its 3 replies")
        a1.close()
        a2.close()

    with coll.case("secret unchanged (SAS)"):
        after = state()
        check(after == before, "secret changed: before %r after %r" % (before, after))
        rest = drain_queue(owner, "secret", 6)
        check(not (rest & took) and len(rest | took) == 10, "took %r, then %r" % (sorted(took), sorted(rest)))
    anon.close()
    owner.close()


def body(t):
    coll = mqdtest.Collect()
    acl_cases(coll, t)
    sas_cases(coll, t)
    coll.finish()


if __name__ == "__main__":
    mqdtest.main(body, timeout=300)
