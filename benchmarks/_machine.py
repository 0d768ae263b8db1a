"""What the benchmarks print about the machine they ran on."""

from __future__ import annotations

import os


def load() -> str:
    """The load averages and the number of cores, for the lines that bracket a timed section."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"
