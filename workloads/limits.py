"""Limits on workload values, checked by every reader before a run starts.

A trace or workload whose numbers would make the simulator run without end
or exhaust memory (sizes of 1e30 bytes, arrivals of 1e300 s, a billion hosts,
1e12 iterations, a link of 5e-324 bit/s) is refused up front with one line
naming the field and the limit. The limits sit far beyond any cluster or trace
we know of. Writers hold themselves to the same limits: what the project writes,
its readers read.
"""

from __future__ import annotations

from control import files
from control.errors import UserError
from control.model import WEIGHT_RANGE

MAX_HOSTS = 10_000
"""Hosts (trace ports): the simulator keeps coflows × ports matrices."""
MAX_FLOW_BYTES = 1e15
"""One flow's size: a petabyte."""
MAX_TIME_S = 1e8
"""Arrival and compute times: about three years. One flow alone on its link must
also finish within this time (size × 8 / link_bps ≤ MAX_TIME_S)."""
MAX_ITERATIONS = 1_000_000
"""Iterations of one trial in one stage."""
MAX_COFLOWS = 1_000_000
"""Coflows of a whole workload (trials × iterations, summed)."""
MAX_FLOWS = 5_000_000
"""Flows of a whole workload (each trial's synchronisation flows, summed)."""
MAX_COFLOW_HOSTS = 20_000_000
"""Coflows × hosts of a whole workload. The simulator's ranking reads the active
coflows' remaining bytes by port (16 bytes per coflow and host, built with two
temporaries of the same size), and every coflow may be active at once: at the limit
that is 320 MB; measured at its peak, 1.1 GB under Sincronia and 2.9 GB under Beamer,
whose ranking keeps several per-port vectors per experiment (workloads/FORMAT.md).
Each limit alone allowed 10,000 hosts and a million coflows, 160 GB. FB2010 has 78,900
(526 coflows, 150 ports); the HP-tuning generator at its most coflows, 16 million (a
million coflows on 16 hosts)."""


def max_coflows(num_hosts: int) -> int:
    """The most coflows a workload on ``num_hosts`` hosts (trace ports) may hold."""
    return min(MAX_COFLOWS, MAX_COFLOW_HOSTS // max(num_hosts, 1))


def coflows_above_limit(coflows: int, num_hosts: int, hosts: str = "hosts") -> str | None:
    """Why ``coflows`` coflows on ``num_hosts`` hosts are too many, or None."""
    if coflows <= MAX_COFLOWS and coflows * num_hosts <= MAX_COFLOW_HOSTS:
        return None
    if coflows > MAX_COFLOWS:
        return f"{coflows:,} coflows exceed the limit of {MAX_COFLOWS:,}"
    return (
        f"{coflows:,} coflows on {num_hosts:,} {hosts} exceed the limit of "
        f"{max_coflows(num_hosts):,} (coflows × {hosts} at most {MAX_COFLOW_HOSTS:,}: "
        "the simulator keeps the remaining bytes of every active coflow by port)"
    )


MAX_LINK_BPS = 1e15
"""Host link rate."""
MIN_LINK_BPS = 1e3
"""Host link rate, at least 1 kbit/s: four orders of magnitude below the slowest
links the project emulates (tens of Mbit/s), and far from the rates that break a
run (at 5e-324 bit/s the simulator's shares round to zero; at 1e-300 bit/s a
stage takes 1e300 s). With the per-flow rule of :data:`MAX_TIME_S`, a slow link
limits how large its flows may be; it does not refuse the link."""
MIN_WEIGHT, MAX_WEIGHT = WEIGHT_RANGE
"""An experiment's weight, 10^-6 … 10^6 as the controller's event API takes it (see
:data:`control.model.WEIGHT_RANGE`)."""
MAX_JOBS = 10_000
"""Tuning jobs of a generated HP-tuning workload."""
MAX_FILE_BYTES = files.MAX_FILE_BYTES
"""A workload file (JSON or trace), 1 GiB like any user file, checked before it is
read. The largest file the writers produce within the limits above is about 570 MB
(measured: a JSON workload of 1,000,000 one-iteration trial stages with five flows
each, every number at its longest; the HP-tuning generator at 930,000 coflows writes
78 MB, the FB2010 trace is 138 KB), so the limit refuses no written file and still
bounds what is read into memory before any other check (``/dev/zero`` or a 100 GB
file)."""


class SettingError(UserError):
    """A setting (a generator field, a load) whose workload would break a limit.

    ``field`` names the setting as the library spells it (``num_jobs``,
    ``load``, ...) and ``detail`` says what is wrong; the message is
    ``"<field>: <detail>"``. A command line maps ``field`` to its option.
    """

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail
