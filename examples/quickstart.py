"""The quickstart app: two handlers, enqueued inside the application's own transaction."""

from __future__ import annotations

from acta_sqla import Acta, Context, Retry

acta = Acta(namespace="default")


@acta.job(max_attempts=5, timeout=60)
async def send_welcome(ctx: Context, user_id: int, template: str = "basic") -> dict[str, object]:
    ctx.log.info("sending the {} welcome to user {}", template, user_id)
    return {"sent": True, "user_id": user_id, "template": template}


@acta.job(max_attempts=3, backoff_base=0.1)
def resize_avatar(ctx: Context, user_id: int) -> dict[str, object]:
    """A sync handler: it runs in the worker's thread pool."""
    if ctx.attempt == 1:
        raise Retry(after=0.2, reason="the image store was busy")
    return {"user_id": user_id, "sizes": [64, 128, 256]}
