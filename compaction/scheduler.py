"""When compactions run: every ``interval`` (hourly by default) plus random jitter, or once.

Rounds start ``interval + jitter`` apart, start to start (a round that
overruns is followed by the next one at once); the first round waits a
random part of the jitter, so that replicas and tables started together do
not hit the catalog in lockstep. Each round runs every table's runner in
turn. A run that raises is logged with its traceback and counted as failed
by its runner's metrics; the other tables and later rounds still run, since
an hourly sidecar that dies on one bad table compacts nothing at all.

The stop event (set by the service's SIGTERM handler) ends the wait at once
and is also the runners' stop request, so a round in progress ends between
groups.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compaction.runner import CompactionRunner, RunReport, RunResult

log = logging.getLogger(__name__)

HOUR_S = 3600.0


@dataclass(frozen=True)
class Schedule:
    """Rounds every ``interval_s`` seconds plus up to ``jitter_s`` (uniformly random)."""

    interval_s: float = HOUR_S
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise ValueError(f"the compaction interval must be positive, got {self.interval_s}s")
        if not 0 <= self.jitter_s < self.interval_s:
            raise ValueError(f"jitter must be >= 0 and shorter than the interval, got {self.jitter_s}s")

    def first_delay(self, rng: random.Random) -> float:
        return rng.uniform(0, self.jitter_s)

    def next_delay(self, rng: random.Random, elapsed_s: float) -> float:
        """Seconds from the end of a round that took ``elapsed_s`` to the start of the next."""
        return max(0.0, self.interval_s + rng.uniform(0, self.jitter_s) - elapsed_s)


@dataclass(frozen=True)
class RunOutcome:
    """One table's run in a round: its report, or the error it raised."""

    table: str
    report: RunReport | None = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        """No error and a result that needs no attention (a skipped run is fine: someone else ran)."""
        return (
            self.error is None
            and self.report is not None
            and self.report.result
            in (
                RunResult.SUCCESS,
                RunResult.SKIPPED,
            )
        )


class CompactionScheduler:
    """Runs ``runners`` in rounds (see the module docstring)."""

    def __init__(
        self,
        runners: Sequence[CompactionRunner],
        schedule: Schedule,
        stop: threading.Event,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runners = list(runners)
        self.schedule = schedule
        self.stop = stop
        self.rng = rng or random.Random()
        self.clock = clock
        self.rounds = 0

    def run_once(self) -> list[RunOutcome]:
        """One round: every table once, in order, until a stop request."""
        self.rounds += 1
        started = self.clock()
        log.info("compaction round started", extra={"round": self.rounds, "tables": len(self.runners)})
        outcomes = []
        for runner in self.runners:
            if self.stop.is_set():
                break
            outcomes.append(self._run(runner))
        log.info(
            "compaction round finished",
            extra={
                "round": self.rounds,
                "duration_s": round(self.clock() - started, 3),
                "runs": len(outcomes),
                "not_ok": [o.table for o in outcomes if not o.ok],
                "stopped": self.stop.is_set(),
            },
        )
        return outcomes

    def run_forever(self) -> None:
        """Rounds until the stop event is set."""
        delay = self.schedule.first_delay(self.rng)
        while not self._wait(delay):
            started = self.clock()
            self.run_once()
            delay = self.schedule.next_delay(self.rng, self.clock() - started)

    def _wait(self, delay_s: float) -> bool:
        """Sleep ``delay_s`` or until stopped; True when stopped."""
        if delay_s > 0:
            log.info("next compaction round", extra={"in_seconds": round(delay_s, 1)})
        return self.stop.wait(delay_s) if delay_s > 0 else self.stop.is_set()

    def _run(self, runner: CompactionRunner) -> RunOutcome:
        try:
            return RunOutcome(runner.table, report=runner.run())
        except Exception as error:  # counted as failed by the runner; the other tables still run
            log.exception("compaction run raised", extra={"table": runner.table, "round": self.rounds})
            return RunOutcome(runner.table, error=error)


def run_once(runners: Sequence[CompactionRunner], stop: threading.Event | None = None) -> list[RunOutcome]:
    """One-shot mode (``floe compact --once``, back-fills, tests): one round, no waiting."""
    return CompactionScheduler(runners, Schedule(), stop or threading.Event()).run_once()
