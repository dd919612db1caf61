"""Upper limits on workload values, checked by every reader before a run starts.

A trace or workload whose numbers would make the simulator run without end
or exhaust memory (sizes of 1e30 bytes, arrivals of 1e300 s, a billion hosts,
1e12 iterations) is refused up front with one line naming the field and the
limit. The limits sit far above any cluster or trace we know of.
"""

from __future__ import annotations

MAX_HOSTS = 10_000
"""Hosts (trace ports): the simulator keeps coflows × ports matrices."""
MAX_FLOW_BYTES = 1e15
"""One flow's size: a petabyte."""
MAX_TIME_S = 1e8
"""Arrival and compute times: about three years."""
MAX_ITERATIONS = 1_000_000
"""Iterations of one trial in one stage."""
MAX_COFLOWS = 1_000_000
"""Coflows of a whole workload (trials × iterations, summed)."""
MAX_FLOWS = 5_000_000
"""Flows of a whole workload (each trial's synchronisation flows, summed)."""
MAX_LINK_BPS = 1e15
"""Host link rate."""
MAX_JOBS = 10_000
"""Tuning jobs of a generated HP-tuning workload."""
