"""A smoke run of scripts/bench.py's DCP row (--dcp --quick): 4 tiny DCP checkpoints of 4 gloo ranks,
averaged warm once, against the floor; no timing is asserted, only that the row runs, reports peak RSS
and read_ahead_kb, and that swavg's average equals torch's dcp_to_torch_save + average.

Not in ctest (not named test_*.py): 5 processes import torch, 105 s at load average 8 on 2 CPUs. Run it by hand:
    SWAVG_BIN=$PWD/build/swavg PYTHONPATH=tests/cli /var/lib/swavg/venv/bin/python tests/cli/bench_smoke.py
"""
import json
import os
import subprocess
import sys
import unittest

import common

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "bench.py")


class BenchDcpTest(common.TempDirTest):
    def test_dcp_row(self):
        out = self.path("bench.json")
        p = subprocess.run([sys.executable, BENCH, "--swavg", common.SWAVG, "--quick", "--dcp", "--caches", "warm",
                            "--prefetch-bytes", "0", "--workdir", self.path("work"), "--json", out,
                            "--dcp-python", sys.executable], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        with open(out) as f:
            res = json.load(f)
        rows = {r["tool"]: r for r in res["cold"]}
        self.assertEqual(sorted(rows), ["floor", "swavg", "swavg-readahead-0"])
        for r in rows.values():
            self.assertEqual(r["set"], "dcp4x4")
            self.assertEqual(r["cache"], "warm")
            self.assertGreater(r["peak_rss_bytes"], 0)
            self.assertIn("read_ahead_kb", r)
        self.assertIn("rss_ok", rows["swavg"])
        self.assertTrue(res["dcp_check"]["dcp4x4"]["matches_torch"], res["dcp_check"])
        self.assertEqual(len(res["default_read_ahead"]), 1)
        self.assertIn("4 x 5 MiB DCP of 4 ranks", p.stdout)


if __name__ == "__main__":
    unittest.main()
