"""The fuzz tests' bookkeeping: how many inputs each decoder took and refused (pure)."""

from __future__ import annotations

import random
import resource
import time

import attrs

__all__ = ["Tally", "fuzzing"]


@attrs.define
class Tally:
    ok: int = 0
    rejected: int = 0
    started: float = attrs.field(factory=time.perf_counter)

    @property
    def total(self) -> int:
        return self.ok + self.rejected

    def report(self, what: str) -> None:
        """One line for make fuzz (shown with pytest -s): count, time, peak memory."""
        seconds = time.perf_counter() - self.started
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"\nfuzz {what}: {self.total:,} inputs ({self.ok:,} accepted, "
            f"{self.rejected:,} rejected) in {seconds:.1f} s, peak RSS {peak_mb:.0f} MB"
        )

    def report_both_ways(self, what: str, at_least: int = 1_000) -> None:
        """:meth:`report`, then check more than ``at_least`` inputs went each way."""
        self.report(what)
        assert self.ok > at_least and self.rejected > at_least, self


def fuzzing(seed: int) -> tuple[random.Random, Tally]:
    """A run's random source, seeded (every run the same), and its fresh tally."""
    return random.Random(seed), Tally()
