"""The context-manager protocol shared by the test components (Redis
servers, RabbitMQ, chaos clusters)."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T", bound="Lifecycle")


class Lifecycle:
    """A component with ``start()`` (returning itself) and ``close()``.

    Used as a context manager it is closed on exit, and also when
    ``start()`` fails: ``__exit__`` does not run then, and a half-started
    server must not outlive the test.
    """

    def start(self: T) -> T:  # pragma: no cover - overridden
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self: T) -> T:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.close()
