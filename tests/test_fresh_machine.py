"""The README's Quick start holds on the machine it describes: scripts/fresh-machine.sh makes a new Debian 12
minbase root with exactly the Quick start's packages, clones this checkout into it, and runs both commands
there (example.sh as root and as an unprivileged user, its output compared with the README's sample; test.sh,
the whole suite, with Debian's own Python 3.11.2). It runs in CI (CI=true) as root, where it fits the time
(about 10 to 15 minutes beside the rest of the suite); by hand elsewhere. No Debian mirror answering is a
skip, never a pass: the script exits 3 then."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(os.environ.get("CI") != "true" or os.geteuid() != 0 or bool(os.environ.get(
    "CUSTOMOPS_FRESH_INSIDE")), reason="runs in CI (CI=true) as root, not inside the fresh machine itself: run "
                                       "scripts/fresh-machine.sh by hand elsewhere")
def test_the_quick_starts_promises_hold_on_a_fresh_debian_12():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "fresh-machine.sh")], capture_output=True, text=True,
                          timeout=3600, cwd=ROOT)
    if done.returncode == 3:
        pytest.skip(f"no fresh machine could be made here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-6000:]
