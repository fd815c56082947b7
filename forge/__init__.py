"""OpenForge core.

Importing ``forge`` before ``ray`` makes a local Ray cluster bind to loopback only and run
without auth tokens (Ray reads these at import time); set them yourself to choose otherwise.
"""

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
