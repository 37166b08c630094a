"""The worker: claimer, executors, finalizer and heartbeat around one in-flight registry."""

from .supervisor import Worker as Worker

__all__ = ["Worker"]
