"""The default benchmark (no mode flag; --quick for CI): `swavg average` and `swavg ema` against
the Python peer (children/peer.py) and the I/O floor on a transformer in float32 and bfloat16
and on a ResNet, `swavg inspect`, start-up, memory scaling (scaling.py), update-bn (update_bn.py)
and many tiny tensors (many_tensors.py); the targets of issue 5 and the report.
"""
import dataclasses
import filecmp
import os
import shlex
import statistics
import sys

from ._common import MiB, PEER, log
from .children.peer import resnet_spec
from .datasets import make_resnet_set, make_transformer_sets
from .many_tensors import time_many_tensors
from .report import compare_state_dicts, fmt_mib, fmt_r, fmt_s, machine_info, table
from .runner import Job, run_rounds, warm
from .scaling import memory_scaling, plan_scaling
from .update_bn import time_update_bn


EMA_DECAY = 0.999
MODES = (("average", []), ("ema", ["--decay", str(EMA_DECAY)]))
# Several outputs from one read (issue 32): ema with these decays in one run against one run each.
MANY_DECAYS = ("0.99", "0.999", "0.9999", "0.99999")


def fold_jobs(b, s):
    """swavg average/ema, the peer's average/ema and the I/O floor on one checkpoint set."""
    py = [sys.executable, PEER]
    jobs = []
    for mode, extra in MODES:
        out, rep = b.out(f"{s.key}_{mode}_swavg.pt"), b.out(f"{s.key}_{mode}_swavg.json")
        jobs.append(Job(f"{s.key}/{mode}/swavg", [b.args.swavg, "-q", mode, *extra, *s.paths,
                                                  "-o", out, "--force", "--report", rep], out, rep))
        out = b.out(f"{s.key}_{mode}_peer.pt")
        jobs.append(Job(f"{s.key}/{mode}/peer", py + [mode, *extra, *s.paths, "--out", out], out))
    out = b.out(f"{s.key}_floor.bin")
    jobs.append(Job(f"{s.key}/floor", py + ["floor", *s.paths, "--out", out], out))
    return jobs


def many_output_paths(b, s, how):
    return [b.out(f"{s.key}_ema_{how}_{d}.pt") for d in MANY_DECAYS]


def many_output_jobs(b, s):
    """`swavg ema` with every decay of MANY_DECAYS from one read, and one `swavg ema` per decay."""
    decays = [x for d in MANY_DECAYS for x in ("--decay", d)]
    one = Job(f"{s.key}/ema-many/one-read", [b.args.swavg, "-q", "ema", *decays, *s.paths, "-o",
                                              b.out(f"{s.key}_ema_one_{{decay}}.pt"), "--force"])
    runs = [shlex.join([b.args.swavg, "-q", "ema", "--decay", d, *s.paths, "-o", out, "--force"])
            for d, out in zip(MANY_DECAYS, many_output_paths(b, s, "separate"))]
    return [one, Job(f"{s.key}/ema-many/separate", ["sh", "-c", " && ".join(runs)])]


def time_main(b, sets):
    """The alternating rounds: start-up, average/ema/floor per set, inspect. Returns {key: Job}."""
    f32 = sets[0]
    jobs = [Job("version", [b.args.swavg, "--version"]),
            Job("version/torch", [b.args.swavg + "-torch", "--version"])]
    for s in sets:
        jobs += fold_jobs(b, s)
    jobs += many_output_jobs(b, f32)
    jobs += [Job("inspect/swavg", [b.args.swavg, "inspect", f32.paths[0]]),
             Job("inspect/peer", [sys.executable, PEER, "inspect", f32.paths[0]])]
    log(f"warming the page cache, then {b.args.repeats} round(s) of {len(jobs)} runs ...")
    warm([p for s in sets for p in s.paths])
    run_rounds(b.runner, jobs, b.args.repeats)
    return {j.key: j for j in jobs}


def many_output_paths_of(jobs, s, how):
    """The outputs many_output_jobs wrote (the paths in their command lines)."""
    if how == "one":
        pattern = jobs[f"{s.key}/ema-many/one-read"].argv[-2]
        return [pattern.replace("{decay}", d) for d in MANY_DECAYS]
    return [shlex.split(run)[-2] for run in jobs[f"{s.key}/ema-many/separate"].argv[2].split(" && ")]


def check_outputs(jobs, sets):
    """swavg's outputs against the peer's, tensor by tensor with torch.equal."""
    f32, bf16, resnet = sets
    checks = {}
    for s, mode in ((f32, "average"), (f32, "ema"), (bf16, "average"), (bf16, "ema"),
                    (resnet, "average")):
        ok, detail = compare_state_dicts(jobs[f"{s.key}/{mode}/swavg"].output,
                                         jobs[f"{s.key}/{mode}/peer"].output)
        checks[f"{s.key}/{mode}"] = {"bit_exact": ok, "detail": detail}
    same = [filecmp.cmp(a, b, shallow=False)
            for a, b in zip(many_output_paths_of(jobs, f32, "one"), many_output_paths_of(jobs, f32, "separate"))]
    checks[f"{f32.key}/ema-many"] = {"bit_exact": all(same),
                                     "detail": "each decay's output from one read byte-identical to its own run"
                                     if all(same) else f"differ: {same}"}
    return checks


def run_bench(b):
    """The default benchmark, start to report. Returns what --json writes."""
    args = b.args
    info = machine_info(args.swavg)
    print(f"swavg bench: {info['swavg_version']} ({info['swavg_commit']}), torch {info['torch']}, "
          f"{info['cpu']}, {info['nproc']} CPUs, {info['date']}")
    if info["loadavg_start"][0] > 0.5:
        b.notes.append(f"load average {info['loadavg_start'][0]:.1f} on {info['nproc']} CPUs at "
                       "start: other work was running, timings are noisy")
        print("note: " + b.notes[-1])
    sizes = plan_scaling(b)
    log(f"work folder {b.workdir}; generating checkpoints ...")
    sets = make_transformer_sets(b.workdir, "main", args.model_mb, args.n, args.n,
                                 ("float32", "bfloat16"), args.seed)
    spec = resnet_spec(args.quick)
    resnet, model_ts, data_npy = make_resnet_set(b.workdir, spec, args.n, args.seed,
                                                 args.bn_samples, args.bn_res)
    sets.append(resnet)

    jobs = time_main(b, sets)
    res = {"machine": info, "args": vars(args),
           "sets": [dict(dataclasses.asdict(s), total_bytes=s.total_bytes) for s in sets],
           "baseline_rss_bytes": jobs["version"].peak_rss(), "startup_s": jobs["version"].median(),
           "baseline_torch_rss_bytes": jobs["version/torch"].peak_rss(),
           "startup_torch_s": jobs["version/torch"].median()}
    res["correctness"] = check_outputs(jobs, sets)
    log("memory scaling ...")
    res["scaling"] = memory_scaling(b, sets[0], sizes, res["baseline_rss_bytes"])
    res["update_bn"], bn_jobs = time_update_bn(b, resnet, model_ts, data_npy, spec)
    jobs.update({j.key: j for j in bn_jobs})
    res["many_tensors"], many_jobs = time_many_tensors(b)
    jobs.update({j.key: j for j in many_jobs})
    res["jobs"] = {k: j.summary() for k, j in jobs.items()}
    res["targets"] = targets(res, jobs, sets)
    res["notes"] = b.notes
    info["loadavg_end"] = os.getloadavg()
    print_report(res, jobs, sets, args)
    return res


def targets(res, jobs, sets):
    """PASS/MISS per target of issue 5: [{"target", "value", "ok", "show"}]."""
    f32, bf16, _ = sets
    startup = res["startup_s"]

    def med(key):
        return jobs[key].median()

    out = []
    for mode, _ in MODES:
        sw, peer = med(f"{f32.key}/{mode}/swavg"), med(f"{f32.key}/{mode}/peer")
        floor = med(f"{f32.key}/floor")
        out.append({"target": f"{mode} f32: >= 5x faster than the Python peer",
                    "value": peer / sw, "ok": peer / sw >= 5, "show": f"{peer / sw:.2f}x"})
        out.append({"target": f"{mode} f32: within 1.5x of the I/O floor",
                    "value": sw / floor, "ok": sw / floor <= 1.5, "show": f"{sw / floor:.2f}x"})
    base = res["baseline_rss_bytes"]
    points = [(f"{s.key}/{mode}", jobs[f"{s.key}/{mode}/swavg"].peak_rss() - base, s.budget_bytes)
              for s in sets for mode, _ in MODES]
    points += [(f"scaling {p['set']} N={p['n']}", p["above_baseline_bytes"], p["budget_bytes"])
               for p in res["scaling"] if p["n"]]
    worst = max(points, key=lambda p: p[1] / p[2])
    out.append({"target": "peak RSS above baseline < 3 x largest tensor + 64 MiB, every run",
                "value": worst[1] / worst[2], "ok": all(a <= lim for _, a, lim in points),
                "show": f"worst {worst[0]}: {worst[1] / MiB:.0f} of {worst[2] / MiB:.0f} MiB"})
    for mode, _ in MODES:
        t32, t16 = med(f"{f32.key}/{mode}/swavg"), med(f"{bf16.key}/{mode}/swavg")
        raw = (t16 / bf16.total_bytes) / (t32 / f32.total_bytes)
        if min(t16, t32) > 2 * startup:
            net = ((t16 - startup) / bf16.total_bytes) / ((t32 - startup) / f32.total_bytes)
            show = f"{net:.2f}x (with start-up {raw:.2f}x)"
        else:
            net, show = raw, f"{raw:.2f}x (runs too short to take start-up out)"
        out.append({"target": f"{mode} bf16 (f32 accumulation) <= 1.3x f32 time per byte, "
                              "start-up excluded", "value": net, "raw_value": raw,
                    "ok": net <= 1.3, "show": show})
    one, separate = med(f"{f32.key}/ema-many/one-read"), med(f"{f32.key}/ema-many/separate")
    out.append({"target": f"ema with {len(MANY_DECAYS)} decays from one read faster than {len(MANY_DECAYS)} runs",
                "value": one / separate, "ok": one < separate,
                "show": f"{one:.2f} s vs {separate:.2f} s ({one / separate:.2f}x)"})
    if res["many_tensors"]["ran"]:
        t = med("many/swavg")
        out.append({"target": f"average of 3 x {res['many_tensors']['tensors']} tiny tensors within 5 s "
                              "(linear in the tensor count)", "value": t, "ok": t <= 5.0, "show": f"{t:.2f} s"})
    name = "update-bn no slower than Python's update_bn"
    if res["update_bn"]["ran"]:
        ratio = med("update-bn/swavg") / med("update-bn/peer")
        out.append({"target": name, "value": ratio, "ok": ratio <= 1.0,
                    "show": f"swavg/peer {ratio:.2f}"})
    else:
        out.append({"target": name, "value": None, "ok": None, "show": res["update_bn"]["note"]})
    return out


def main_table(res, jobs, sets):
    base = res["baseline_rss_bytes"]

    def row(label, sw, peer, floor=None, budget=None):
        ts, tp, tf = sw.median(), peer.median(), floor.median() if floor else None
        internal = statistics.median(sw.internal_s) if sw.internal_s else None
        return [label, fmt_s(ts), fmt_s(internal), fmt_s(tp), fmt_s(tf), fmt_r(ts / tp),
                fmt_r(ts / tf) if tf else None,
                fmt_mib(sw.peak_rss() - base), fmt_mib(budget), fmt_mib(peer.peak_rss()),
                fmt_mib(floor.peak_rss()) if floor else None]

    rows = [row(f"{s.label} {mode}", jobs[f"{s.key}/{mode}/swavg"], jobs[f"{s.key}/{mode}/peer"],
                jobs[f"{s.key}/floor"], s.budget_bytes) for s in sets for mode, _ in MODES]
    rows.append(row(f"inspect one {sets[0].file_bytes / MiB:.0f} MiB file", jobs["inspect/swavg"],
                    jobs["inspect/peer"]))
    rows.append(row(f"{sets[0].label} ema, {len(MANY_DECAYS)} decays: one read (peer: one run each)",
                    jobs[f"{sets[0].key}/ema-many/one-read"], jobs[f"{sets[0].key}/ema-many/separate"]))
    if res["many_tensors"]["ran"]:
        rows.append(row(f"average 3 x {res['many_tensors']['tensors']} tensors of 4 floats",
                        jobs["many/swavg"], jobs["many/peer"]))
    bn = res["update_bn"]
    if bn["ran"]:
        rows.append(row(f"update-bn {bn['samples']}x3x{bn['res']}x{bn['res']}, batch {bn['batch']}",
                        jobs["update-bn/swavg"], jobs["update-bn/peer"]))
    rows.append(["swavg --version (start-up; baseline RSS)", fmt_s(res["startup_s"]), None, None, None,
                 None, None, f"({fmt_mib(base)})", None, None, None])
    rows.append(["swavg-torch --version (LibTorch loaded)", fmt_s(res["startup_torch_s"]), None, None, None,
                 None, None, f"({fmt_mib(res['baseline_torch_rss_bytes'])})", None, None, None])
    return table(["case", "swavg s", "(work)", "peer s", "floor s", "swavg/peer", "swavg/floor",
                  "swavg RSS+", "RSS budget", "peer RSS", "floor RSS"], rows)


def print_report(res, jobs, sets, args):
    print(f"\nmedians of {args.repeats} round(s), page cache warm, wall time with start-up; "
          "(work) = swavg's own wall_time_s (--report);\n"
          "RSS in MiB, swavg's above the baseline (`swavg --version`); "
          "floor = read the inputs + write and fsync one output;\n"
          "peer = python: torch.load / fold / torch.save")
    print(main_table(res, jobs, sets))
    print("\nmemory scaling: swavg average, one run each; MiB; anon and file: sampled peaks of "
          "RssAnon and RssFile\n(file = mapped inputs and shared libraries)")
    print(table(["set", "model", "N", "wall s", "RSS", "anon", "file", "RSS+", "largest tensor",
                 "budget", ""],
                [[p["set"], fmt_mib(p["model_bytes"]), p["n"], fmt_s(p["wall_s"]),
                  fmt_mib(p["peak_rss_bytes"]), fmt_mib(p["peak_anon_bytes"]), fmt_mib(p["peak_file_bytes"]),
                  fmt_mib(p["above_baseline_bytes"]), fmt_mib(p["largest_tensor_bytes"]),
                  fmt_mib(p["budget_bytes"]), {True: "ok", False: "OVER", None: ""}[p["ok"]]]
                 for p in res["scaling"]]))
    print("\ncorrectness (swavg's output against the Python peer's, torch.equal per tensor):")
    for k, c in res["correctness"].items():
        print(f"  {k}: {'bit-exact' if c['bit_exact'] else 'DIFFERS'} ({c['detail']})")
    many = res["many_tensors"]
    if many["ran"]:
        print(f"  many tensors: {'bit-exact' if many['bit_exact'] else 'DIFFERS'} ({many['detail']})")
    bn = res["update_bn"]
    if bn["ran"]:
        print(f"  update-bn against update_bn: {'match' if bn['matches_update_bn'] else 'DIFFER'} "
              f"({bn['detail']})")
    quick = " (--quick: sizes too small for the targets to mean much)" if args.quick else ""
    print(f"\ntargets{quick}:")
    for t in res["targets"]:
        mark = "SKIP" if t["ok"] is None else "PASS" if t["ok"] else "MISS"
        print(f"  {mark}  {t['target']}: {t['show']}")
    for n in res["notes"]:
        print(f"note: {n}")
