#!/usr/bin/env python3
"""mqd-passwd: output format, argument checks, and the hash verified independently
with Python's hashlib (so the C side cannot be wrong in a self-consistent way)."""
import base64
import hashlib
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
    r = run(["--iterations", "1000", "alice"], "correct horse\n")
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
    r2 = run(["--iterations", "1000", "alice"], "correct horse\n")
    check(r2.stdout != r.stdout, "a new salt each run")

    check(run(["bad user"], "pw\n").returncode == 2, "user with a blank refused")
    check(run(["[x]"], "pw\n").returncode == 2, "user with brackets refused")
    check(run([], "pw\n").returncode == 2, "missing user refused")
    check(run(["--iterations", "10", "u"], "pw\n").returncode == 2, "too few iterations refused")
    check(run(["u"], "\n").returncode == 1, "empty password refused")
    check(run(["u"], "").returncode == 1, "no input refused")
    check(run(["--help"], "").returncode == 0, "--help exits 0")


if __name__ == "__main__":
    main()
