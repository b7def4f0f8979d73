#!/usr/bin/python3
"""Prints the subsystem include graph of src/ (A -> B when a file of src/A/ includes
"B/..."), the cycles among subsystems, and fails (exit 1) on a cycle.

  scripts/include-graph.py [--src DIR] [--known-cycle "a b c"] [--max-edges N]

--known-cycle names the subsystems of the one cycle the core still has (issue 18 point 1
breaks it): a cycle within them passes, any subsystem that joins it or any other cycle
fails; --max-edges fails when the graph grows past N edges. Both are a ratchet for
`make check` (tests/lint/include-graph.sh) until the cycle is gone."""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"')


def edges_of(src):
    subs = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    out = {s: set() for s in subs}
    for s in subs:
        for root, _, files in os.walk(os.path.join(src, s)):
            for name in files:
                if not name.endswith((".c", ".h")):
                    continue
                with open(os.path.join(root, name), errors="replace") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        if m and m.group(1) in out and m.group(1) != s:
                            out[s].add(m.group(1))
    return out


def cycles(g):
    """Strongly connected components of more than one node (Kosaraju, iterative)."""
    order, seen = [], set()
    for start in g:
        if start in seen:
            continue
        stack = [(start, iter(sorted(g[start])))]
        seen.add(start)
        while stack:
            v, it = stack[-1]
            nxt = next((w for w in it if w not in seen), None)
            if nxt is None:
                order.append(v)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(g[nxt]))))
    rev = {v: set() for v in g}
    for v, ws in g.items():
        for w in ws:
            rev[w].add(v)
    comps, done = [], set()
    for v in reversed(order):
        if v in done:
            continue
        comp, todo = [], [v]
        done.add(v)
        while todo:
            x = todo.pop()
            comp.append(x)
            for y in rev[x]:
                if y not in done:
                    done.add(y)
                    todo.append(y)
        if len(comp) > 1:
            comps.append(sorted(comp))
    return sorted(comps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
    ap.add_argument("--known-cycle", default="")
    ap.add_argument("--max-edges", type=int, default=-1)
    a = ap.parse_args()
    g = edges_of(a.src)
    n_edges = sum(len(v) for v in g.values())
    for s in sorted(g):
        print("%-8s -> %s" % (s, " ".join(sorted(g[s]))))
    known = set(a.known_cycle.split())
    bad = []
    for c in cycles(g):
        ok = known and set(c) <= known
        print("cycle: %s%s" % (" <-> ".join(c), " (known)" if ok else ""))
        if not ok:
            bad.append(c)
    print("subsystems=%d edges=%d cycles=%d" % (len(g), n_edges, len(cycles(g))))
    if a.max_edges >= 0 and n_edges > a.max_edges:
        print("FAIL: %d edges, more than the %d allowed" % (n_edges, a.max_edges))
        return 1
    if bad:
        print("FAIL: include cycle(s) %s" % "; ".join(" <-> ".join(c) for c in bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
