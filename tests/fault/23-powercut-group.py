#!/usr/bin/python3
"""Group offsets across SIGKILL + power cut: tests/interop/43-group-restart.py with the
data dir on powercutfs; committed offsets are never ahead of what was consumed. One cut (a
plain one) per run; the long runs (tests/fault/longrun.sh) repeat it with MQD_TEST_REPEAT=N,
every other cut then torn."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcfs  # noqa: E402

sys.exit(pcfs.run_variant("43-group-restart.py", "torn", {}))
