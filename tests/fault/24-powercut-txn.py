#!/usr/bin/python3
"""The transaction crash loop across power cuts: tests/interop/62-txn-crash.py with the
data dir on powercutfs and a power cut (every other one torn) after each SIGKILL; no torn
transaction, every acknowledged commit visible, exactly once. MQD_TXN_ROUNDS (default 8)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcfs  # noqa: E402

sys.exit(pcfs.run_variant("62-txn-crash.py", "torn", {"MQD_TXN_ROUNDS": os.environ.get("MQD_TXN_ROUNDS", "8")}))
