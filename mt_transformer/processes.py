"""This process's place among the processes torchrun started: from the variables torchrun sets
(RANK, WORLD_SIZE, LOCAL_RANK), read without torch. training/distributed.py joins the group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Processes:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_environment() -> Processes:
    """This process's place in the group, from the variables torchrun sets (one process without them)."""
    return Processes(
        int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
    )
