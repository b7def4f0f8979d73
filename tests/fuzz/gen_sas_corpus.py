#!/usr/bin/python3
"""Writes the seed corpus of fuzz_sas (tests/fuzz/corpus/fuzz_sas): SAS tokens as the
Event Hubs SDKs make them (byte 0 even) and encoded $cbs put-token requests (byte 0 odd),
plus broken variants. Needs python3-qpid-proton. Run from the source tree."""
import base64, hashlib, hmac, os, sys, urllib.parse
from proton import Message

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "fuzz_sas")
os.makedirs(out, exist_ok=True)


def token(aud, skn, key, se):
    sr = urllib.parse.quote(aud, safe="")
    sig = base64.b64encode(hmac.new(key.encode(), (sr + "\n" + str(se)).encode(), hashlib.sha256).digest()).decode()
    return "SharedAccessSignature sr=%s&sig=%s&se=%d&skn=%s" % (sr, urllib.parse.quote(sig, safe=""), se, skn)


def put(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


aud = "sb://127.0.0.1:5672/hub"
toks = {
    "tok-hub": token(aud, "RootManageSharedAccessKey", "k", 4102444800),
    "tok-partition": token(aud + "/Partitions/3", "send", "k", 4102444800),
    "tok-group": token(aud + "/ConsumerGroups/$Default/Partitions/0", "listen", "k", 1),
    "tok-mgmt": token(aud + "/$management", "root", "k", 4102444800),
    "tok-namespace": token("sb://127.0.0.1:5672/", "root", "k", 4102444800),
    "tok-reordered": "SharedAccessSignature skn=a&se=9&sig=%2BAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%3D&sr=sb%3A%2F%2Fh%2Fx",
    "tok-missing-sig": "SharedAccessSignature sr=sb%3A%2F%2Fh%2Fx&se=9&skn=a",
    "tok-bad-escape": "SharedAccessSignature sr=sb%3&sig=x&se=9&skn=a",
    "tok-dup": "SharedAccessSignature sr=a&sr=b&sig=x&se=9&skn=a",
}
for n, t in toks.items():
    put(n, b"\x00" + t.encode())
for n, (props, body, rt) in {
    "req-put-token": ({"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": aud,
                       "expiration": 4102444800000}, toks["tok-hub"], "cbs-1"),
    "req-jwt": ({"operation": "put-token", "type": "jwt", "name": aud}, "eyJ.a.b", "cbs-2"),
    "req-no-reply-to": ({"operation": "put-token"}, toks["tok-hub"], None),
    "req-binary-body": ({"operation": "put-token", "name": aud}, b"\x00\x01", "cbs-3"),
}.items():
    m = Message(id="m-" + n, reply_to=rt, properties=props, body=body)
    put(n, b"\x01" + m.encode())
print("wrote", len(os.listdir(out)), "seeds to", out)
