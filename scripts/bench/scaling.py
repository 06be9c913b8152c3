"""Memory scaling of the default benchmark: the peak RSS of one `swavg average` per point, for
--scale-ns inputs (hard links to the distinct files) and for models of --scale-mb MiB, against
3 x the largest tensor + 64 MiB above the baseline, with sampled peaks of RssAnon and RssFile.
"""
import os
import shutil

from ._common import GiB, MiB
from .datasets import link_inputs, make_transformer_sets
from .runner import Job, run_job, warm


RESNET_MIB = 98  # resnet50's state dict, for the disk estimate


def plan_scaling(b):
    """The model sizes for memory scaling that fit on the disk (the largest dropped first)."""
    args = b.args
    free = shutil.disk_usage(b.workdir).free
    main = (args.n * args.model_mb * 1.5 + args.n * (1 if args.quick else RESNET_MIB)
            + 8 * args.model_mb) * MiB
    if main + GiB > free:
        raise SystemExit(f"not enough disk in {b.workdir}: need ~{main / GiB:.1f} GiB, "
                         f"{free / GiB:.1f} GiB free")
    sizes = sorted(args.scale_mb)

    def need(szs):
        return main + sum((scale_distinct(m, args) + 2) * m * MiB
                          for m in szs if m != args.model_mb)

    while sizes and need(sizes) + 2 * GiB > free:
        b.notes.append(f"scaling size {sizes[-1]} MiB skipped: {free / GiB:.1f} GiB free")
        sizes.pop()
    return sizes


def scale_distinct(mib, args):
    """Distinct files generated for a scaling size: N up to the main model's size, two above."""
    return args.n if mib <= args.model_mb else min(2, args.n)


def memory_scaling(b, f32, sizes, baseline):
    """Peak RSS of one `swavg average` per point: N inputs of the smallest size, then each size.

    Also samples the anonymous and file-backed parts (mapped inputs and libraries count in RSS);
    the first row is `swavg --version`, their baseline."""
    args = b.args
    size_sets = {}
    for mib in sizes:
        if mib == args.model_mb:
            size_sets[mib] = f32
        else:
            size_sets[mib] = make_transformer_sets(b.workdir, f"scale{mib}", mib, args.n,
                                                   scale_distinct(mib, args), ("float32",),
                                                   args.seed + mib)[0]
    small = size_sets[sizes[0]] if sizes else f32
    points = [(n, small) for n in args.scale_ns]
    points += [(args.n, s) for s in size_sets.values() if (args.n, s) not in points]
    version = Job("scale/version", [args.swavg, "--version"], sample=True)
    run_job(b.runner, version)
    r = version.runs[0]
    rows = [{"set": "swavg --version", "model_bytes": None, "n": None, "wall_s": r.wall_s,
             "peak_rss_bytes": r.maxrss_bytes, "peak_anon_bytes": r.peak_anon_bytes,
             "peak_file_bytes": r.peak_file_bytes, "above_baseline_bytes": None,
             "largest_tensor_bytes": None, "budget_bytes": None, "ok": None}]
    out = b.out("scale.pt")
    for n, s in points:
        paths = s.paths if n == len(s.paths) else link_inputs(
            s.paths, n, os.path.join(b.workdir, "links", f"{s.key}_n{n}"))
        warm(paths)
        job = Job(f"scale/{s.key}/n{n}",
                  [args.swavg, "-q", "average", *paths, "-o", out, "--force"], out, sample=True)
        run_job(b.runner, job)
        r = job.runs[0]
        above = r.maxrss_bytes - baseline
        rows.append({"set": s.key, "model_bytes": s.file_bytes, "n": n, "wall_s": r.wall_s,
                     "peak_rss_bytes": r.maxrss_bytes, "peak_anon_bytes": r.peak_anon_bytes,
                     "peak_file_bytes": r.peak_file_bytes, "above_baseline_bytes": above,
                     "largest_tensor_bytes": s.largest_tensor_bytes, "budget_bytes": s.budget_bytes,
                     "ok": above <= s.budget_bytes})
        os.unlink(out)
    shutil.rmtree(os.path.join(b.workdir, "links"), ignore_errors=True)
    return rows
