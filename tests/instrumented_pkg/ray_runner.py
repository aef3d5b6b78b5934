"""A Ray actor version of the runner, as users write it: ``@ray.remote`` on a class."""

from __future__ import annotations

import os

import ray

from instrumented_pkg.runner import Runner


@ray.remote
class RayRunner(Runner):
    """play_episode is inherited from Runner and runs inside the actor process."""

    def pid(self) -> int:
        return os.getpid()
