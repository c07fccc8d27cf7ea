"""Does a spare worker serve the first configuration after the notebook's process changed its own environment?

A notebook primes a spare before its imports; then ``hv.extension()`` sets ``_PYVIZ_COMMS_INSTALLED`` and a
compile in the notebook's process (the kernel doctor's probe) sets Inductor's cache folder and a private pointer.
This does the same in one process, then measures two configurations through the runner and prints how each one's
process started (``worker_process``, ``spare_unused``) and where its time went (the records' ``process_s`` and
``phase_s``; nothing is stored). On a GPU:

    NBHELPERS_SPARE_WORKER=on python benchmarks/gpu_spare_probe.py [MODEL]
"""

from __future__ import annotations

import json
import os
import sys
import time

from nbhelpers.measure import runner
from nbhelpers.measure.config import RunConfig


def main(model: str = "qwen3-0.6b") -> int:
    runner.prime_spare()
    os.environ["_PYVIZ_COMMS_INSTALLED"] = "1"  # what hv.extension() sets in a notebook's process
    import torch

    torch.compile(lambda x: x * 2)(torch.ones(2))  # what the doctor's compile probe leaves in os.environ
    time.sleep(8)  # the notebook's other set-up
    base = RunConfig(run_name="spare-probe", model=model, batch_size=4, max_length=1024, num_samples=16, steps=2,
                     warmup=1)  # fmt: skip
    rows = []
    for label in ("first", "second"):
        record = runner.run_isolated(base.replace(label=label))
        m = record.metrics
        rows.append({
            "label": label, "ok": record.ok, "reason": record.reason[:300], "worker_process": m.get("worker_process"),
            "spare_unused": m.get("spare_unused"), "process_s": m.get("process_s"), "phase_s": m.get("phase_s"),
            "real_tokens_per_s": m.get("real_tokens_per_s"), "timed_steps": m.get("timed_steps"),
        })  # fmt: skip
    print(json.dumps({"rows": rows}, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
