#!/bin/sh
# The subsystem include graph (scripts/include-graph.py): no include cycle, and no more
# edges than the layering of docs/architecture.md has (a ratchet: lower it when an edge
# goes). Issue 18 broke the last cycle by splitting server/broker.h into core/ (the
# model, below every broker subsystem) and one public header per subsystem; repl ->
# group, txn came with the state that moves with the leader; repl -> auth with node
# identity (a leader asks auth whether a fetch connection's certificate names the node);
# fwd -> amqp, repl, server came with node-to-node forwarding (issue 33), fwd -> txn with
# transactions forwarded to their leader (fwd/txn.c reads the client's transaction id);
# amqp091 -> auth, codec, conf, core, group, store: the AMQP 0-9-1 front end uses the core as
# amqp does (store: its stream consumers read a partition by offset, as a cursor does);
# amqp091 -> meta: its durable exchanges and bindings are rows of meta.db (exch.c).
srcdir=${MQD_SRCDIR:-$(dirname "$0")/../..}
exec python3 "$srcdir/scripts/include-graph.py" --src "$srcdir/src" --max-edges 62
