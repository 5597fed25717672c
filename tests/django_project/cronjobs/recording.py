"""Records every cron enqueue as a JSON line, in the format
tests/support/instances.History reads."""

import json
import os
import time
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware


class Recorder(Middleware):
    """Appends each cron enqueue to ``$CRON_APP_RECORD/enqueues-<pid>.jsonl``."""

    def after_enqueue(self, broker: dramatiq.Broker, message: dramatiq.Message[Any], delay: int | None) -> None:
        if "cron_tick" not in message.options:
            return
        record = {
            "pid": os.getpid(),
            "actor": message.actor_name,
            "schedule": message.options.get("cron_schedule"),
            "tick": message.options["cron_tick"],
            "message_id": message.message_id,
            "at": time.time(),
        }
        with open(os.path.join(os.environ["CRON_APP_RECORD"], f"enqueues-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")
