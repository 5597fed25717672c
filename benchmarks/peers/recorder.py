"""Records every enqueue of the peers' periodic messages the same way
benchmarks/app.py records ours: ``<tick or ->\\t<enqueued at>`` per line."""

import os
import threading
import time

from dramatiq.middleware import Middleware


class LagRecorder(Middleware):
    """Buffered lines, flushed by a thread, so recording stays off the
    measured path."""

    def __init__(self, directory):
        self.path = os.path.join(directory, f"lag-{os.getpid()}.tsv")
        self.lock = threading.Lock()
        self.file = None

    def after_enqueue(self, broker, message, delay):
        at = time.time()
        # periodiq stamps the tick it fires; dramatiq-crontab stamps none.
        tick = message.options.get("scheduled_at", "-")
        with self.lock:
            if self.file is None:
                self.file = open(self.path, "a", buffering=1 << 20)
                threading.Thread(target=self.flush_forever, daemon=True).start()
            self.file.write(f"{tick}\t{at:.6f}\n")

    def flush_forever(self):
        while True:
            time.sleep(0.25)
            with self.lock:
                self.file.flush()
