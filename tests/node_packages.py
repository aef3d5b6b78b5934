"""Node.js packages for the tests whose programs are JavaScript (a producer using the
OpenTelemetry JS SDK, agents using the official openai and Anthropic npm packages).

:func:`installed_node_modules` runs ``npm ci`` from a folder's committed ``package.json`` and
``package-lock.json`` once per lock file (cached under pytest's cache, or a temporary folder
when the cache is off), in a folder of its own renamed into place, so a folder that is there is
whole. Without node and npm the test skips, or fails when ``AGENTTRACE_REQUIRE_NODE=1`` (what
``.ci/run`` sets: it installs Debian's nodejs and npm).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

#: ``npm ci`` from a cold npm cache downloads a dozen small packages; bounded all the same.
NPM_TIMEOUT = 240
#: Debian 12's nodejs is 18.20; the packages pinned here run on 18.19 and later.
NODE_MIN = (18, 19)


def installed_node_modules(request: pytest.FixtureRequest, tmp_path_factory, folder: Path,
                           what: str) -> Path:  # fmt: skip
    """``folder``'s packages installed; returns their ``node_modules``."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        why = f"node and npm are needed to run {what} (.ci/run installs them)"
        if os.environ.get("AGENTTRACE_REQUIRE_NODE") == "1":
            pytest.fail(f"{why}, and AGENTTRACE_REQUIRE_NODE=1")
        pytest.skip(why)
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    found = tuple(int(part) for part in version.stdout.strip().lstrip("v").split(".")[:2])
    assert found >= NODE_MIN, f"node {version.stdout.strip()} is older than 18.19"
    manifests = [folder / "package.json", folder / "package-lock.json"]
    key = hashlib.sha256(b"".join(path.read_bytes() for path in manifests)).hexdigest()[:16]
    cache = getattr(request.config, "cache", None)
    root = cache.mkdir(folder.name) if cache is not None else tmp_path_factory.mktemp("npm")
    installed = root / key
    if not installed.is_dir():
        staging = Path(tempfile.mkdtemp(prefix=".installing-", dir=root))
        for path in manifests:
            shutil.copy(path, staging)
        command = [npm, "ci", "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund"]
        try:
            done = subprocess.run(
                command, cwd=staging, capture_output=True, text=True, timeout=NPM_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.fail(f"npm ci took more than {NPM_TIMEOUT} s")
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.fail(f"npm ci failed ({done.returncode}):\n{done.stderr[-3000:]}")
        try:
            staging.rename(installed)
        except OSError:  # another session installed the same lock file meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    return installed / "node_modules"
