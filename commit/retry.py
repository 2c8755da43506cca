"""When to retry a commit, and how long to wait first (Iceberg's ``commit.retry.*``).

A writer that loses the compare-and-swap of the metadata pointer refreshes
and tries again; writers that collide would collide again if they retried at
once, so the pause doubles with each retry and gets a random extra of up to
10% (jitter) to spread them apart. Retries stop after ``num-retries`` or when
``total-timeout-ms`` has passed since the first attempt, as Iceberg Java's
``Tasks`` retry loop does.

The same shape, with its own properties (``commit.status-check.*``), paces
the reloads that settle a commit whose outcome the catalog could not report.

Everything here is pure except :class:`Backoff`, whose clock and random
source are injectable for tests.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from commit.errors import InvalidArgument, commit_property
from table import properties as props

SCALE_FACTOR = 2.0
JITTER_FRACTION = 0.1


@dataclass(frozen=True)
class RetryPolicy:
    """How many retries, and the bounds of the exponential pause between them."""

    num_retries: int = 4
    min_wait_ms: int = 100
    max_wait_ms: int = 60_000
    total_timeout_ms: int = 1_800_000

    def __post_init__(self) -> None:
        for name in ("num_retries", "min_wait_ms", "max_wait_ms", "total_timeout_ms"):
            if getattr(self, name) < 0:
                raise InvalidArgument(f"retry setting {name} must not be negative, got {getattr(self, name)}")
        if self.max_wait_ms < self.min_wait_ms:
            raise InvalidArgument(f"retry max wait {self.max_wait_ms} ms is below the min wait {self.min_wait_ms} ms")

    @classmethod
    def for_commits(cls, properties: Mapping[str, str]) -> RetryPolicy:
        """The policy for lost compare-and-swaps, from table properties (Java's defaults)."""
        return cls._read(
            properties,
            props.COMMIT_NUM_RETRIES,
            props.COMMIT_MIN_RETRY_WAIT_MS,
            props.COMMIT_MAX_RETRY_WAIT_MS,
            props.COMMIT_TOTAL_RETRY_TIME_MS,
        )

    @classmethod
    def for_status_checks(cls, properties: Mapping[str, str]) -> RetryPolicy:
        """The policy for reloads that settle an unknown commit outcome (Java's defaults)."""
        return cls._read(
            properties,
            props.COMMIT_STATUS_CHECKS_NUM_RETRIES,
            props.COMMIT_STATUS_CHECKS_MIN_WAIT_MS,
            props.COMMIT_STATUS_CHECKS_MAX_WAIT_MS,
            props.COMMIT_STATUS_CHECKS_TOTAL_WAIT_MS,
        )

    @classmethod
    def _read(cls, properties: Mapping[str, str], *keys: props.Property[int]) -> RetryPolicy:
        """The four settings; a bad one is an :class:`InvalidArgument` naming its table property."""
        values = [commit_property(key, properties) for key in keys]
        for key, value in zip(keys, values):
            if value < 0:
                raise InvalidArgument(f"table property {key.key}={value}: must not be negative")
        (_, min_key, max_key, _), (_, min_wait, max_wait, _) = keys, values
        if max_wait < min_wait:
            raise InvalidArgument(
                f"table property {max_key.key}={max_wait}: below {min_key.key}={min_wait}; "
                "the longest pause cannot be shorter than the shortest"
            )
        return cls(*values)

    @property
    def max_attempts(self) -> int:
        return self.num_retries + 1

    def base_delay_ms(self, retry: int) -> float:
        """The pause before retry number ``retry`` (1-based), before jitter."""
        if retry < 1:
            raise InvalidArgument(f"retry numbers start at 1, got {retry}")
        return min(self.min_wait_ms * SCALE_FACTOR ** (retry - 1), float(self.max_wait_ms))

    def delay_ms(self, retry: int, unit_random: float) -> float:
        """The pause before retry ``retry`` with jitter; ``unit_random`` is drawn from [0, 1)."""
        base = self.base_delay_ms(retry)
        return base + unit_random * base * JITTER_FRACTION

    def may_retry(self, attempts_made: int, elapsed_ms: float) -> bool:
        """Whether another attempt is allowed after ``attempts_made`` failed ones.

        As in Java, the time limit never stops the first retry: a slow first
        attempt still gets a second chance.
        """
        if attempts_made >= self.max_attempts:
            return False
        return attempts_made <= 1 or elapsed_ms <= self.total_timeout_ms

    def backoff(
        self,
        clock: Callable[[], float] = time.monotonic,
        unit_random: Callable[[], float] = random.random,
    ) -> Backoff:
        return Backoff(self, clock, unit_random)


class Backoff:
    """The retry state of one commit: attempts made, and time since the first began."""

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float], unit_random: Callable[[], float]) -> None:
        self.policy = policy
        self._clock = clock
        self._random = unit_random
        self._started = clock()
        self.attempts = 0

    def next_delay_ms(self) -> float | None:
        """Record a failed attempt; the pause before the next, or None when retries are spent."""
        self.attempts += 1
        elapsed_ms = (self._clock() - self._started) * 1000.0
        if not self.policy.may_retry(self.attempts, elapsed_ms):
            return None
        return self.policy.delay_ms(self.attempts, self._random())
