#!/usr/bin/python3
"""Durability across SIGKILL + power cut: tests/interop/08-restart-durability.py (10,000 durable
messages, two kills, a prezero broker) with the data dir on powercutfs and a power cut
after each SIGKILL. The long runs (tests/fault/longrun.sh) repeat it with MQD_TEST_REPEAT=N
(3 cuts each) and MQD_PC_MODE=torn."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcfs  # noqa: E402

sys.exit(pcfs.run_variant("08-restart-durability.py", "cut", {}))
