"""Tests of the sbx Python SDK: test_offline needs nothing; the others run
against a real daemon named by SBX_URL and SBX_API_KEY."""

import os
import sys

# Run from a source checkout without installing: src/ first on the path.
_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if os.path.isdir(_SRC) and _SRC not in sys.path:
    sys.path.insert(0, _SRC)
