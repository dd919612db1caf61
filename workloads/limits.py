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
MAX_LINK_BPS = 1e15
"""Host link rate."""
MIN_LINK_BPS = 1e3
"""Host link rate, at least 1 kbit/s: four orders of magnitude below the slowest
links the project emulates (tens of Mbit/s), and far from the rates that break a
run (at 5e-324 bit/s the simulator's shares round to zero; at 1e-300 bit/s a
stage takes 1e300 s). With the per-flow rule of :data:`MAX_TIME_S`, a slow link
limits how large its flows may be; it does not refuse the link."""
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
