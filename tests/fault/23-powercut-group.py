#!/usr/bin/python3
"""Group offsets across SIGKILL + power cut: tests/interop/43-group-restart.py with the
data dir on powercutfs; committed offsets are never ahead of what was consumed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pcfs  # noqa: E402

sys.exit(pcfs.run_variant("43-group-restart.py", "torn", {}))
