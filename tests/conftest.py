import os
import sys

# QKV_WITHOUT_NUMBA=1: run as on a machine without the qkv[fast] extra (scripts/test.sh does a
# pass like this over the engine's tests): `import numba` fails, the NumPy step runs.
if os.environ.get("QKV_WITHOUT_NUMBA") == "1":
    sys.modules["numba"] = None

from hypothesis import HealthCheck, settings

# Property tests: enough examples to cross tile edges and mask corners, without a deadline
# (timings on a shared 2-core machine are noise). CI runs the same profile.
settings.register_profile(
    "qkv", max_examples=int(os.environ.get("QKV_HYPOTHESIS_EXAMPLES", "60")), deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("qkv")
