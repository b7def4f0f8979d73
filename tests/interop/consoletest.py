"""Shared by the console tests (85-87): a broker with console_listen, users made by
mqd-passwd, and a plain-HTTP client of the console's API that keeps its own cookie."""

import base64
import hashlib
import hmac
import http.client
import json
import os
import subprocess

import mqdtest
from mqdtest import check, skip

PW = {"admin": "admin-pw", "viewer": "viewer-pw", "producer": "producer-pw"}
ACL = """[acl]
allow admin all *
allow viewer monitor,browse *
allow producer send,receive,create *
allow * send,receive,create,browse *
"""


def mqd_passwd(user, pw):
    prog = os.path.join(os.environ.get("MQD_BUILDDIR", ""), "mqd-passwd")
    if not os.access(prog, os.X_OK):
        skip("mqd-passwd not built")
    r = subprocess.run([prog, "--iterations", "4096", user], input=pw + "\n",
                       capture_output=True, text=True, timeout=30 * mqdtest.SLOW)
    check(r.returncode == 0, "mqd-passwd: %s" % r.stderr)
    return r.stdout


def write_conf(t, console_port, extra="", plain=True, name="mqd"):
    path = os.path.join(t.tmpdir, name + ".conf")
    with open(path, "w") as f:
        f.write("allow_anonymous = on\nallow_plain_without_tls = %s\n" % ("on" if plain else "off"))
        if console_port:
            f.write("console_listen = 127.0.0.1:%d\n" % console_port)
        f.write(extra)
        for u, pw in PW.items():
            f.write(mqd_passwd(u, pw))
        f.write(ACL)
    return path


def console_broker(t, extra="", name="mqd", plain=True):
    port = mqdtest.free_port()
    b = t.broker(name, conf=write_conf(t, port, extra, plain, name))
    mqdtest.wait_port(port, 10 * mqdtest.SLOW, b.proc, "console")
    b.console_port = port
    b.console_url = "http://127.0.0.1:%d" % port
    return b


class Http:
    """One console user agent: a cookie jar of one cookie, the CSRF token from login."""

    def __init__(self, port, source=None):
        self.port = port
        self.source = source  # a loopback address to connect from (None: the default)
        self.cookie = None
        self.csrf = None
        self.last_headers = {}

    def request(self, method, path, body=None, headers=None, raw=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30 * mqdtest.SLOW,
                                       source_address=(self.source, 0) if self.source else None)
        h = {"Accept": "application/json"}
        if self.cookie:
            h["Cookie"] = "mqd_session=" + self.cookie
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read()
        self.last_headers = {k.lower(): v for k, v in r.getheaders()}
        self.set_cookies = [v for k, v in r.getheaders() if k.lower() == "set-cookie"]
        c.close()
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = text
        return r.status, doc

    def login(self, user, pw=None):
        st, doc = self.request("POST", "/api/login", {"user": user, "password": pw or PW[user]})
        if st == 200:
            check(len(self.set_cookies) == 1, "one Set-Cookie on login: %r" % self.set_cookies)
            first = self.set_cookies[0].split(";")[0]
            check(first.startswith("mqd_session="), "cookie name: %r" % first)
            self.cookie = first.split("=", 1)[1]
            self.csrf = doc["csrf"]
        return st, doc

    def get(self, path):
        return self.request("GET", "/api/" + path)

    def post(self, path, body=None, csrf=True, headers=None):
        h = dict(headers or {})
        if csrf and self.csrf:
            h["X-CSRF-Token"] = self.csrf
        return self.request("POST", "/api/" + path, body if body is not None else {}, headers=h)


def scram_login(h, user, pw, tamper=False):
    """SCRAM-SHA-256 over POST /api/login/scram (RFC 5802), checking the server's
    signature. Returns (status, reply) of the final step (or of the first when it fails)."""
    cnonce = base64.b64encode(os.urandom(18)).decode()
    bare = "n=%s,r=%s" % (user.replace("=", "=3D").replace(",", "=2C"), cnonce)
    st, doc = h.request("POST", "/api/login/scram", {"client_first": "n,," + bare})
    if st != 200:
        return st, doc
    sfirst = doc["server_first"]
    attrs = dict(kv.split("=", 1) for kv in sfirst.split(","))
    check(attrs["r"].startswith(cnonce), "server nonce extends ours: %r" % sfirst)
    salted = hashlib.pbkdf2_hmac("sha256", pw.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    ckey = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored = hashlib.sha256(ckey).digest()
    without = "c=biws,r=" + attrs["r"]
    auth = ("%s,%s,%s" % (bare, sfirst, without)).encode()
    sig = hmac.new(stored, auth, hashlib.sha256).digest()
    proof = bytes(a ^ b for a, b in zip(ckey, sig))
    if tamper:
        proof = bytes([proof[0] ^ 1]) + proof[1:]
    final = without + ",p=" + base64.b64encode(proof).decode()
    st, doc = h.request("POST", "/api/login/scram", {"exchange": doc["exchange"], "client_final": final})
    if st == 200:
        skey = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
        want = "v=" + base64.b64encode(hmac.new(skey, auth, hashlib.sha256).digest()).decode()
        check(doc["server_final"] == want, "server signature: %r" % doc["server_final"])
        first = h.set_cookies[0].split(";")[0]
        h.cookie = first.split("=", 1)[1]
        h.csrf = doc["csrf"]
    return st, doc
