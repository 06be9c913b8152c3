"""The disk-bound modes: --cold (and --dcp's cases), --larger-than-ram, --workers (workers.py).

Inputs are written as safetensors with numpy (datasets.py); the peer reads them whole, as
safetensors.torch.load_file does, and merges sharded folders. Each case is averaged from a cold page
cache (dropped before every run, root) and a warm one, against the I/O floor (children/peer.py
floor: read every input once, write and fsync one output), optionally with swavg's read-ahead
set by SWAVG_PREFETCH_BYTES and at each --read-ahead-kb of the block device (readahead.py).
"""
import json
import os
import shutil
import sys

from ._common import GiB, MiB, PEER, log
from .datasets import CkptSet, files_of, make_disk_set, write_random_safetensors
from .dcp import DCP_KEY, check_dcp_output, make_dcp_set
from .readahead import ReadAhead, current_read_ahead_kb, default_read_ahead, print_matrix, tool_name
from .report import fmt_mib, fmt_s, machine_info, table
from .runner import Job, drop_caches, run_job, warm
from .workers import run_workers


DISK_TARGET = 1.2  # issue 12: average within 1.2x of the I/O floor, cold and warm
FLOOR_AHEAD = 64 << 20  # --floor-ahead: the floor's reads with this much under POSIX_FADV_WILLNEED ahead


def disk_jobs(b, s, peer=True):
    """swavg average, (swavg without read-ahead), the peer and the floor on one set."""
    py = [sys.executable, PEER]
    out, rep = b.out(f"{s.key}_swavg.safetensors"), b.out(f"{s.key}_swavg.json")
    avg = [b.args.swavg, "-q", "average", *s.paths, "-o", out, "--force", "--report", rep]
    jobs = [Job(f"{s.key}/swavg", avg, out, rep)]
    for v in b.args.prefetch_bytes:
        jobs.append(Job(f"{s.key}/swavg-readahead-{v}", ["env", f"SWAVG_PREFETCH_BYTES={v}", *avg], out, rep))
    if peer:
        out = b.out(f"{s.key}_peer.pt")
        jobs.append(Job(f"{s.key}/peer", py + ["average", *s.paths, "--out", out], out))
    out = b.out(f"{s.key}_floor.bin")
    files = [f for p in s.paths for f in files_of(p)]
    jobs.append(Job(f"{s.key}/floor", py + ["floor", *files, "--out", out, "--out-bytes", str(s.file_bytes)], out))
    if b.args.floor_ahead:
        jobs.append(Job(f"{s.key}/floor-ahead", py + ["floor", *files, "--out", out, "--out-bytes", str(s.file_bytes),
                                                      "--ahead", str(FLOOR_AHEAD)], out))
    return jobs


def time_disk(b, s, cache, repeats, peer=True):
    """Rounds of the set's jobs, each run after dropping the page cache (cold) or reading every
    input once (warm). Returns {key: Job}."""
    jobs = disk_jobs(b, s, peer)
    files = [f for p in s.paths for f in files_of(p)]
    for r in range(repeats):
        shift = r % len(jobs)
        for job in jobs[shift:] + jobs[:shift]:
            drop_caches() if cache == "cold" else warm(files)
            run_job(b.runner, job)
        log(f"  {s.key} {cache}: round {r + 1}/{repeats} done")
    return {j.key: j for j in jobs}


def disk_rows(s, cache, jobs, baseline_rss=None):
    floor = jobs[f"{s.key}/floor"].median()
    rows = []
    for key, job in jobs.items():
        tool = key.split("/", 1)[1]
        ratio = job.median() / floor
        row = {"set": s.key, "label": s.label, "cache": cache, "tool": tool, "median_s": job.median(),
               "floor_s": floor, "ratio_to_floor": ratio, "peak_rss_bytes": job.peak_rss(),
               "throughput_mib_s": s.total_bytes / MiB / job.median(), "runs": [r.wall_s for r in job.runs],
               "ratio_min": job.min() / floor, "ratio_max": max(r.wall_s for r in job.runs) / floor,
               "median_user_s": job.median("user_s"), "median_sys_s": job.median("sys_s"),
               "model_bytes": s.file_bytes, "budget_bytes": s.budget_bytes}
        if tool.startswith("swavg") and baseline_rss is not None:
            row["rss_above_baseline_bytes"] = job.peak_rss() - baseline_rss
            row["rss_ok"] = row["rss_above_baseline_bytes"] <= s.budget_bytes
        if tool == "swavg":
            row["target"] = f"within {DISK_TARGET}x of the I/O floor"
            row["ok"] = ratio <= DISK_TARGET
        rows.append(row)
    return rows


def disk_cases(b):
    """The sets of --cold (8 x 159 MiB, 32 x 40 MiB, 8 sharded folders) and of --dcp, less those
    --disk-cases leaves out."""
    a = b.args
    q = a.quick
    keep = a.disk_cases.split(",") if a.disk_cases else None
    cases = []
    if a.cold:
        for key, mib, n, seed, shard in (("disk8", 4 if q else 159, 8, a.seed, None),
                                         ("disk32", 1 if q else 40, 32, a.seed + 1, None),
                                         ("disk8_sharded", 4 if q else 159, 8, a.seed + 2, 2 if q else 60)):
            if keep is None or key in keep:
                cases.append(make_disk_set(b.workdir, key, mib, n, "float32", seed, shard_mib=shard))
    if a.dcp and (keep is None or DCP_KEY in keep):
        cases.append(make_dcp_set(b, 4 if q else a.dcp_mb))
    return cases


def run_cold(b, cases, read_ahead_kb):
    """Every case, cold and warm (--caches), at the device's current read_ahead_kb."""
    a = b.args
    rows = []
    for s in cases:
        for cache in a.caches.split(","):
            jobs = time_disk(b, s, cache, a.repeats, peer=not a.no_peer and s.key != DCP_KEY)
            for r in disk_rows(s, cache, jobs, b.baseline_rss):
                r["read_ahead_kb"] = read_ahead_kb
                rows.append(r)
            if a.json:  # what is done so far, should the run be stopped
                with open(a.json + ".partial", "w") as f:
                    json.dump(b.done + rows, f, indent=1)
            if s.key == DCP_KEY and not a.no_check and s.key not in b.checked:
                ok, detail = check_dcp_output(b, s, jobs[f"{s.key}/swavg"].output)
                b.checked[s.key] = {"matches_torch": ok, "detail": detail}
                log(f"  {s.key}: {detail}")
    return rows


def run_larger_than_ram(b):
    """--larger-than-ram: 4 bf16 checkpoints adding up to more than the machine's memory, averaged
    once from a cold cache; throughput and peak RSS; the inputs are removed afterwards."""
    a = b.args
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    total = int(a.ltr_gib * GiB) if a.ltr_gib else int(mem * 1.25)
    each = total // 4
    tensor = 256 * MiB // 2  # bf16 elements per tensor
    count = max(1, each // (tensor * 2))
    entries = [(f"layers.{i}.weight", (tensor // 4096, 4096)) for i in range(count)]
    folder = os.path.join(b.workdir, "larger_than_ram")
    os.makedirs(folder, exist_ok=True)
    log(f"larger than RAM: writing 4 x {count * tensor * 2 / GiB:.1f} GiB bf16 ({mem / GiB:.1f} GiB of memory) ...")
    try:
        paths = []
        for i in range(4):
            p = os.path.join(folder, f"ckpt_{i}.safetensors")
            write_random_safetensors(p, entries, "bfloat16", a.seed + i)
            paths.append(p)
        size = os.path.getsize(paths[0])
        s = CkptSet(key="larger_than_ram", paths=paths, file_bytes=size, label=f"4 x {size / GiB:.1f} GiB bf16",
                    largest_tensor_bytes=tensor * 2, n_tensors=count)
        saved, a.prefetch_bytes = a.prefetch_bytes, []
        jobs = time_disk(b, s, "cold", 1, peer=False)
        a.prefetch_bytes = saved
        rows = disk_rows(s, "cold", jobs, b.baseline_rss)
        for r in rows:
            r["inputs_bytes"] = s.total_bytes
            r["memory_bytes"] = mem
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for name in os.listdir(b.outdir):
            if name.startswith("larger_than_ram"):
                os.unlink(os.path.join(b.outdir, name))


def run_disk_bench(b):
    a = b.args
    info = machine_info(a.swavg)
    print(f"swavg disk bench: {info['swavg_version']} ({info['swavg_commit']}), {info['nproc']} CPUs, "
          f"{info['date']}, load average {info['loadavg_start'][0]:.1f}")
    if info["loadavg_start"][0] > 0.5:
        b.notes.append(f"load average {info['loadavg_start'][0]:.1f} on {info['nproc']} CPUs at start: "
                       "other work was running, timings are noisy")
    res = {"machine": info, "args": vars(a)}
    version = Job("disk/version", [a.swavg, "--version"])
    run_job(b.runner, version)
    b.baseline_rss = res["baseline_rss_bytes"] = version.peak_rss()
    if a.cold or a.dcp:
        cases = disk_cases(b)
        res["cold"] = []
        if a.read_ahead_kb:
            with ReadAhead(b.workdir) as ra:
                info["read_ahead_kb_original"] = ra.original
                for kb in a.read_ahead_kb:
                    got = ra.set(kb)
                    log(f"read_ahead_kb {got} ({ra.file})")
                    res["cold"] += run_cold(b, cases, got)
                    b.done = res["cold"]
                    res.setdefault("default_read_ahead", {}).update(
                        {f"{s.key} at read_ahead_kb {got}": default_read_ahead(b, s) for s in cases})
        else:
            kb = current_read_ahead_kb(b.workdir)
            res["cold"] = run_cold(b, cases, kb)
            res["default_read_ahead"] = {f"{s.key} at read_ahead_kb {kb}": default_read_ahead(b, s) for s in cases}
        res["dcp_check"] = b.checked
    if a.larger_than_ram:
        res["larger_than_ram"] = run_larger_than_ram(b)
    if a.workers:
        res["workers"] = run_workers(b, a.workers)
    info["loadavg_end"] = os.getloadavg()
    res["notes"] = b.notes
    print_disk_report(res)
    return res


def print_disk_report(res):
    if res.get("cold"):
        print("\nAverage from a cold and a warm page cache, against the I/O floor "
              f"(target {DISK_TARGET}x; medians of {res['args']['repeats']}; spread = fastest and slowest run / "
              "floor median;\nPREFETCH = SWAVG_PREFETCH_BYTES, 0 = none; RSS+ = peak RSS above `swavg --version`'s, "
              "budget 3 x largest tensor + 64 MiB; ra = read_ahead_kb):")
        rows = [[r["label"], r["read_ahead_kb"], r["cache"], tool_name(r["tool"]), fmt_s(r["median_s"]),
                 fmt_s(r["floor_s"]), f"{r['ratio_to_floor']:.2f}x", f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}",
                 fmt_s(r["median_user_s"] + r["median_sys_s"]), fmt_mib(r["peak_rss_bytes"]),
                 fmt_mib(r.get("rss_above_baseline_bytes")),
                 "" if "rss_ok" not in r else f"{fmt_mib(r['budget_bytes'])} {'ok' if r['rss_ok'] else 'OVER'}",
                 "" if "ok" not in r else ("PASS" if r["ok"] else "MISS")] for r in res["cold"]]
        print(table(["inputs", "ra", "cache", "tool", "median s", "floor s", "/floor", "spread", "CPU s",
                     "peak RSS MiB", "RSS+", "budget", "target"], rows))
        print_matrix(res["cold"])
    for key, d in res.get("default_read_ahead", {}).items():
        print(f"swavg's default read-ahead on {key}: {d}")
    for key, c in res.get("dcp_check", {}).items():
        print(f"{key}: swavg's average {'matches' if c['matches_torch'] else 'DIFFERS FROM'} torch's "
              f"dcp_to_torch_save + average ({c['detail']})")
    if res.get("larger_than_ram"):
        print("\nLarger than RAM (cold, one run):")
        rows = [[r["label"], r["tool"], fmt_s(r["median_s"]), f"{r['throughput_mib_s']:.0f}",
                 f"{r['ratio_to_floor']:.2f}x", fmt_mib(r["peak_rss_bytes"])] for r in res["larger_than_ram"]]
        print(table(["inputs", "tool", "s", "MiB/s", "/floor", "peak RSS MiB"], rows))
    if res.get("workers"):
        print("\nWorkers on one machine (N x `average --shard i/N` concurrently, then finalize):")
        rows = [[r["workers"], r["cache"], fmt_s(r["median_s"]),
                 "" if r["ratio_to_one_process"] is None else f"{r['ratio_to_one_process']:.2f}x",
                 fmt_mib(r["peak_rss_bytes"])] for r in res["workers"]]
        print(table(["workers", "cache", "median s", "/1 process", "peak RSS MiB (one worker)"], rows))
    for n in res.get("notes", []):
        print("note: " + n)
