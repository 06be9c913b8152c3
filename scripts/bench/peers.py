"""Real peers (--peers): what users run instead of swavg, side by side on the same files.

N Hugging Face folders of a Llama-like model (config.json + one model.safetensors, datasets.py).
swavg averages the folders into a folder; the peers (children/real_peers.py, run with
--peer-python) are timm's avg_checkpoints.py logic on the folders' model.safetensors files, a
transformers model soup (from_pretrained, sum, save_pretrained) and mergekit's linear merge;
`loop` is children/peer.py's AveragedModel loop. Every one of them fsyncs its output, as swavg does.
"""
import dataclasses
import os
import subprocess

from ._common import CHILDREN, MiB, PEER, log
from .datasets import make_hf_set
from .report import compare_state_dicts, fmt_mib, fmt_s, machine_info, table
from .runner import Job, run_rounds, warm


PEER_TOOLS = ("loop", "timm", "transformers", "mergekit")
PEER_TARGET = 5.0  # issue 18: swavg at least 5x faster than the fastest peer
REAL_PEERS = os.path.join(CHILDREN, "real_peers.py")


def peer_env(args):
    """argv prefix for a peer: `env` with --peer-path on PYTHONPATH and the Hub offline."""
    path = [args.peer_path] if args.peer_path else []
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return ["env", "HF_HUB_OFFLINE=1", "TRANSFORMERS_NO_ADVISORY_WARNINGS=1"] + (
        [f"PYTHONPATH={os.pathsep.join(path)}"] if path else [])


def probe_peers(b):
    """{tool: version} of the asked-for peers that import with --peer-python; notes for the rest."""
    a = b.args
    found = {}
    for tool in a.peers:
        mod = "torch" if tool == "loop" else tool
        res = subprocess.run(peer_env(a) + [a.peer_python, REAL_PEERS, "probe", mod],
                             capture_output=True, text=True)
        if res.returncode == 0:
            found[tool] = ("torch " if tool == "loop" else "") + res.stdout.strip()
        else:
            why = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
            b.notes.append(f"peer {tool} skipped: {mod} does not import with {a.peer_python} ({why})")
    return found


def peers_jobs(b, s, tools):
    """swavg average (folders in, a folder out) and each peer's job on the same folders."""
    a = b.args
    env, py = peer_env(a), a.peer_python
    out, rep = b.out("peers_swavg/"), b.out("peers_swavg.json")
    avg = [a.swavg, "-q", "average", *s.paths, "-o", out, "--force", "--report", rep]
    jobs = [Job("peers/version", [a.swavg, "--version"]), Job("peers/swavg", avg, out.rstrip("/"), rep)]
    files = [os.path.join(p, "model.safetensors") for p in s.paths]
    argv = {"loop": [py, PEER, "average", *s.paths, "--out", b.out("peers_loop.pt"), "--fsync"],
            "timm": [py, REAL_PEERS, "timm", *files, "--safetensors", "--out", b.out("peers_timm.safetensors")],
            "transformers": [py, REAL_PEERS, "transformers", *s.paths, "--out", b.out("peers_transformers")],
            "mergekit": [py, REAL_PEERS, "mergekit", *s.paths, "--out", b.out("peers_mergekit")]}
    outputs = {t: v[v.index("--out") + 1] for t, v in argv.items()}
    jobs += [Job(f"peers/{t}", env + argv[t], outputs[t]) for t in PEER_TOOLS if t in tools]
    return jobs


def run_peers_bench(b):
    """--peers: swavg against the asked-for real peers on the same folders, warm, fsynced."""
    a = b.args
    info = machine_info(a.swavg)
    print(f"swavg peers bench: {info['swavg_version']} ({info['swavg_commit']}), {info['nproc']} CPUs, "
          f"{info['date']}, load average {info['loadavg_start'][0]:.1f}")
    tools = probe_peers(b)
    s = make_hf_set(b.workdir, a.peers_mb, a.peers_n, a.peers_dtype, a.seed)
    jobs = peers_jobs(b, s, tools)
    log(f"peers: {s.label}; warming the page cache, then {a.repeats} round(s) of {len(jobs)} runs ...")
    warm([os.path.join(p, "model.safetensors") for p in s.paths])
    run_rounds(b.runner, jobs, a.repeats)
    by_key = {j.key: j for j in jobs}
    sw, base = by_key["peers/swavg"], by_key["peers/version"].peak_rss()
    rows = []
    for tool in ("swavg",) + PEER_TOOLS:
        job = by_key.get(f"peers/{tool}")
        if job is None:
            continue
        row = {"tool": tool, "version": info["swavg_version"] if tool == "swavg" else tools[tool],
               "min_s": job.min(), "median_s": job.median(), "ratio": job.min() / sw.min(),
               "peak_rss_bytes": job.peak_rss(), "min_cpu_s": min(r.user_s + r.sys_s for r in job.runs),
               "runs": [r.wall_s for r in job.runs]}
        if tool != "swavg":
            exact = tool == "loop"  # the AveragedModel loop is swavg's bit-for-bit reference
            ok, detail = compare_state_dicts(sw.output, job.output, exact=exact, rtol=1e-5, atol=1e-7)
            row.update({"matches_swavg": ok, "detail": detail, "bit_exact_expected": exact})
        rows.append(row)
    peers = [r for r in rows if r["tool"] != "swavg"]
    res = {"machine": info, "args": vars(a), "set": dict(dataclasses.asdict(s), total_bytes=s.total_bytes),
           "baseline_rss_bytes": base, "rows": rows, "notes": b.notes,
           "jobs": {k: j.summary() for k, j in by_key.items()}, "targets": []}
    if peers:
        fastest = min(peers, key=lambda r: r["min_s"])
        res["targets"].append({"target": f"at least {PEER_TARGET:g}x faster than the fastest peer",
                               "value": fastest["ratio"], "ok": fastest["ratio"] >= PEER_TARGET,
                               "show": f"{fastest['ratio']:.1f}x ({fastest['tool']})"})
    above = sw.peak_rss() - base
    res["targets"].append({"target": "peak RSS above baseline < 3 x largest tensor + 64 MiB",
                           "value": above / s.budget_bytes, "ok": above <= s.budget_bytes,
                           "show": f"{above / MiB:.1f} of {s.budget_bytes / MiB:.0f} MiB"})
    info["loadavg_end"] = os.getloadavg()
    print_peers_report(res, s)
    return res


def print_peers_report(res, s):
    a = res["args"]
    print(f"\n{s.label} ({s.n_tensors} tensors), page cache warm, every output fsynced; "
          f"min of {a['repeats']} run(s), wall time with start-up; ratio = tool / swavg; RSS in MiB")
    rows = [[r["tool"], r["version"], fmt_s(r["min_s"]), fmt_s(r["median_s"]), f"{r['ratio']:.1f}x",
             fmt_s(r["min_cpu_s"]), fmt_mib(r["peak_rss_bytes"]),
             "" if "detail" not in r else ("ok" if r["matches_swavg"] else "DIFFERS") + f" ({r['detail']})"]
            for r in res["rows"]]
    print(table(["tool", "version", "min s", "median s", "/swavg", "CPU s", "peak RSS", "output vs swavg's"],
                rows))
    print(f"swavg --version: {fmt_mib(res['baseline_rss_bytes'])} MiB RSS (baseline)")
    print("\ntargets:")
    for t in res["targets"]:
        print(f"  {'PASS' if t['ok'] else 'MISS'}  {t['target']}: {t['show']}")
    for n in res["notes"]:
        print("note: " + n)
