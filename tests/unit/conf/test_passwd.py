#!/usr/bin/env python3
"""mqd-passwd: output format, argument checks, and the hash verified independently
with Python's hashlib (so the C side cannot be wrong in a self-consistent way)."""
import base64
import hashlib
import hmac
import os
import subprocess
import sys

BUILD = os.environ.get("MQD_BUILDDIR", ".")
PROG = os.path.join(BUILD, "mqd-passwd")


def run(args, stdin):
    return subprocess.run([PROG] + args, input=stdin, capture_output=True, text=True)


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)


def main():
    if not os.access(PROG, os.X_OK):
        print("SKIP: mqd-passwd not built")
        sys.exit(77)
    # the default is --both: the installed config (allow_plain_without_tls = off) needs
    # scram_sha256 on plain TCP, PLAIN over TLS the password_hash
    r = run(["--iterations", "1000", "carol"], "correct horse\n")
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and len(lines) == 3 and lines[0] == "[user carol]" and
          lines[1].startswith("password_hash = pbkdf2-sha256$1000$") and
          lines[2].startswith("scram_sha256 = 1000$"), "the default prints both lines: %r" % lines)
    check(run(["u"], "p\u00e4ss\n").returncode == 1, "the default refuses non-ASCII (SCRAM)")
    check(run(["--plain", "u"], "p\u00e4ss\n").returncode == 0, "--plain takes non-ASCII")
    r = run(["--plain", "--iterations", "1000", "alice"], "correct horse\n")
    check(r.returncode == 0, "exit 0 for a good run")
    lines = r.stdout.splitlines()
    check(len(lines) == 2 and lines[0] == "[user alice]", "prints the section line")
    key, _, value = lines[1].partition(" = ")
    check(key == "password_hash", "prints a password_hash line")
    scheme, iters, salt64, hash64 = value.split("$")
    check(scheme == "pbkdf2-sha256" and iters == "1000", "scheme and iteration count")
    salt, want = base64.b64decode(salt64), base64.b64decode(hash64)
    check(len(salt) == 16 and len(want) == 32, "16-byte salt, 32-byte hash")
    got = hashlib.pbkdf2_hmac("sha256", b"correct horse", salt, 1000)
    check(got == want, "hash verifies with hashlib")
    r2 = run(["--plain", "--iterations", "1000", "alice"], "correct horse\n")
    check(r2.stdout != r.stdout, "a new salt each run")

    check(run(["bad user"], "pw\n").returncode == 2, "user with a blank refused")
    check(run(["[x]"], "pw\n").returncode == 2, "user with brackets refused")
    check(run([], "pw\n").returncode == 2, "missing user refused")
    check(run(["--iterations", "10", "u"], "pw\n").returncode == 2, "too few iterations refused")
    check(run(["u"], "\n").returncode == 1, "empty password refused")
    check(run(["u"], "").returncode == 1, "no input refused")
    check(run(["--help"], "").returncode == 0, "--help exits 0")

    # --scram: StoredKey/ServerKey as RFC 5802 computes them, never the password
    r = run(["--scram", "--iterations", "4096", "bob"], "pencil\n")
    check(r.returncode == 0, "--scram exits 0")
    lines = r.stdout.splitlines()
    check(len(lines) == 2 and lines[1].startswith("scram_sha256 = "), "prints a scram_sha256 line")
    iters, salt64, stored64, server64 = lines[1].partition(" = ")[2].split("$")
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", base64.b64decode(salt64), int(iters))
    ck = hmac.new(salted, b"Client Key", "sha256").digest()
    check(hashlib.sha256(ck).digest() == base64.b64decode(stored64), "StoredKey verifies")
    check(hmac.new(salted, b"Server Key", "sha256").digest() == base64.b64decode(server64),
          "ServerKey verifies")
    r = run(["--both", "--iterations", "1000", "bob"], "pencil\n")
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 3, "--both prints both lines")
    check(run(["--scram", "u"], "p\u00e4ss\n").returncode == 1, "--scram refuses non-ASCII")


if __name__ == "__main__":
    main()
