"""What a handler receives as its first argument."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loguru import logger


@dataclass(slots=True)
class Context:
    """The running attempt of one job.

    ``attempt`` is 1 on the first run and counts every charged attempt since;
    ``execution_id`` is the attempt's fencing token (and its ``Execution`` row's id).
    """

    job_id: int
    kind: str
    args: dict[str, Any]
    attempt: int
    execution_id: int
    namespace: str
    worker_id: int | None = None
    _log: Any = field(default=None, repr=False)

    @property
    def log(self) -> Any:
        """A loguru logger bound to this job (``job_id``, ``kind``, ``attempt``)."""
        if self._log is None:
            self._log = logger.bind(
                job_id=self.job_id, kind=self.kind, attempt=self.attempt, stage="handler"
            )
        return self._log
