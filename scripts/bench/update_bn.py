"""`swavg update-bn` against torch.optim.swa_utils.update_bn (children/peer.py update-bn) on the
default benchmark's ResNet: scripted for swavg, eager for Python; skipped when the binary lacks it.
"""
import subprocess
import sys

from ._common import PEER, log
from .report import compare_state_dicts
from .runner import Job, run_rounds, warm


def update_bn_usage(swavg):
    """(ok, note): whether `swavg update-bn --help` works and has the options used here."""
    res = subprocess.run([swavg, "update-bn", "--help"], capture_output=True, text=True)
    if res.returncode != 0:
        return False, "swavg update-bn is not in this build (--help fails): skipped"
    missing = [o for o in ("--model", "--data", "--checkpoint", "--batch-size", "--output",
                           "--force") if o not in res.stdout]
    if missing:
        return False, f"swavg update-bn lacks {missing}: skipped"
    return True, ""


def time_update_bn(b, resnet, model_ts, data_npy, spec):
    """swavg update-bn against update_bn: (result dict, jobs); result["ran"] False if skipped."""
    args = b.args
    ok, note = update_bn_usage(args.swavg)
    if not ok:
        b.notes.append(note)
        return {"ran": False, "note": note}, []
    log("update-bn ...")
    common = ["--checkpoint", resnet.paths[0], "--data", data_npy,
              "--batch-size", str(args.bn_batch)]
    sw_out, py_out = b.out("bn_swavg.pt"), b.out("bn_peer.pt")
    jobs = [Job("update-bn/swavg", [args.swavg, "-q", "update-bn", "--model", model_ts, *common,
                                    "-o", sw_out, "--force"], sw_out),
            Job("update-bn/peer", [sys.executable, PEER, "update-bn", "--arch", spec, *common,
                                   "--out", py_out], py_out)]
    warm([resnet.paths[0], data_npy, model_ts])
    run_rounds(b.runner, jobs, args.repeats, progress=False)
    close, detail = compare_state_dicts(sw_out, py_out, exact=False, rtol=1e-4, atol=1e-5)
    return ({"ran": True, "arch": spec, "samples": args.bn_samples, "res": args.bn_res,
             "batch": args.bn_batch, "matches_update_bn": close, "detail": detail}, jobs)
