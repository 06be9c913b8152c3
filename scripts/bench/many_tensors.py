"""Many tensors (--many-tensors): `swavg average` and the Python peer over 3 checkpoints of that
many 4-element tensors, where the per-tensor work of reading, planning and writing dominates.
"""
import dataclasses
import sys

from ._common import PEER, log
from .datasets import make_many_set
from .report import compare_state_dicts
from .runner import Job, run_rounds, warm


def time_many_tensors(b):
    """swavg average and the peer's over --many-tensors tiny tensors. Returns (result, jobs)."""
    args = b.args
    if not args.many_tensors:
        return {"ran": False}, []
    s = make_many_set(b.workdir, args.many_tensors, 3, args.seed)
    out, rep = b.out("many_swavg.pt"), b.out("many_swavg.json")
    jobs = [Job("many/swavg", [args.swavg, "-q", "average", *s.paths, "-o", out, "--force", "--report", rep],
                out, rep),
            Job("many/peer", [sys.executable, PEER, "average", *s.paths, "--out", b.out("many_peer.pt")],
                b.out("many_peer.pt"))]
    log(f"many tensors: 3 x {args.many_tensors} ...")
    warm(s.paths)
    run_rounds(b.runner, jobs, args.repeats, progress=False)
    ok, detail = compare_state_dicts(jobs[0].output, jobs[1].output)
    return {"ran": True, "tensors": args.many_tensors, "set": dataclasses.asdict(s), "bit_exact": ok,
            "detail": detail}, jobs
