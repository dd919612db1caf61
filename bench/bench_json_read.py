"""What the hostile-input checks of ``control.files.parse_json`` cost when reading a large
workload: the nesting scan and the decode, against plain ``json.loads`` of the same text
in the same run, and the whole workload read (``workloads.json_format.loads``)."""

from __future__ import annotations

import json
import os

from bench.common import emit, median_seconds
from control.cli import OneLineErrors
from control.files import parse_json
from workloads import json_format
from workloads.hp_tuning import HpTuningConfig, generate


def main() -> None:
    parser = OneLineErrors(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    jobs = 40 if args.quick else 400
    text = json_format.dumps(generate(HpTuningConfig(num_jobs=jobs)))
    repeats = 3 if args.quick else 5
    plain_s = median_seconds(lambda: json.loads(text), repeats)
    checked_s = median_seconds(lambda: parse_json(text, "bench.json"), repeats)
    workload_s = median_seconds(lambda: json_format.loads(text, "bench.json"), repeats)
    emit(
        {
            "jobs": jobs,
            "text_bytes": len(text.encode()),
            "json_loads_s": plain_s,
            "parse_json_s": checked_s,
            "parse_json_vs_json_loads": checked_s / plain_s,
            "checks_share_of_workload_read": (checked_s - plain_s) / workload_s,
            "workload_read_s": workload_s,
            "load_average_1min": os.getloadavg()[0],
        }
    )


if __name__ == "__main__":
    main()
