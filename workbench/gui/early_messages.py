"""Messages of a job that arrive before its job record says it is a panel's (events can overtake the reply
that names the run folder): kept per job until the record comes, bounded, so a job that never becomes ours is
dropped."""

from __future__ import annotations

from workbench.protocol import Message
from workbench.results import dig

LIMIT = 20  # jobs held at once


class EarlyMessages:
    def __init__(self, prefix: str, types: tuple[str, ...] = ("array",)):
        self.prefix = prefix  # array names of the panel's task ("quant/", "bench/"); "" for any
        self.types = types  # the message types kept (arrays; the Training tab's metrics and artifacts)
        self._held: dict[str, list[Message]] = {}

    def keep(self, msg: Message) -> None:
        job_id = msg.parent_id or ""
        if (
            job_id
            and msg.msg_type in self.types
            and str(dig(msg.content, "name", default="")).startswith(self.prefix)
        ):
            self._held.setdefault(job_id, []).append(msg)
            if len(self._held) > LIMIT:
                self._held.pop(next(iter(self._held)))

    def take(self, job_id: str) -> list[Message]:
        return self._held.pop(job_id, [])
