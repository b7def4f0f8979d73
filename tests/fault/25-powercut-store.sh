#!/bin/bash
# The store crash test across power cuts: 10-store-crash.sh with its data dir on
# powercutfs; each SIGKILL is followed by a cut (every other round cut-torn: a random
# prefix of the unsynced writes in 512-byte sectors) and a remount, then the checker
# verifies every offset the writer was told was stable. Exit 77 without root or FUSE.
# Env: MQD_BUILDDIR, MQD_PC_STORE_ROUNDS (default 10), MQD_CRASH_SEED.
MQD_CRASH_POWERCUT=1 MQD_CRASH_ROUNDS=${MQD_PC_STORE_ROUNDS:-10} \
    exec bash "$(dirname "$0")/10-store-crash.sh"
