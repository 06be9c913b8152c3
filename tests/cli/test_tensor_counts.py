"""Checkpoints of many tiny tensors: the average of two safetensors files of 100,000 tensors each is
torch's, its report lists every tensor, and the run's memory per tensor stays near what the
tensor's description needs (scripts/bench_counts.py, row `tensors`, measures 10^5 and 10^6).

Reference: safetensors.torch.load_file of the inputs, averaged in Python as AveragedModel does for
two checkpoints; the output read back with safetensors.torch.load_file."""
import json
import unittest

import torch
from safetensors.torch import load_file

import safetensors_ref
from common import TempDirTest, same_bits
from peak_rss import peak_rss
from reference import swa_fold

N = 100_000
# Measured on Linux x86-64 (glibc malloc): about 1,430 bytes per tensor of peak RSS at N = 10^5 (the
# two inputs' tensor views, the plan, the output's specs and header); 2,130 when the run built its
# report as a JSON DOM.
MAX_RSS_PER_TENSOR = 2_000


class ManyTensorsTest(TempDirTest):
    def test_average_report_and_memory_per_tensor(self):
        g = torch.Generator().manual_seed(44)
        paths = []
        for k in range(2):
            paths.append(self.path("ckpt_%d.safetensors" % k))
            values = torch.randn(N, 1, generator=g)
            safetensors_ref.write(paths[-1], {"layers.%d.weight" % i: values[i] for i in range(N)})
        out, report = self.path("avg.safetensors"), self.path("report.json")
        rss = peak_rss("average", *paths, "-o", out, "--report", report)
        self.assertLess(rss / N, MAX_RSS_PER_TENSOR, "peak RSS %d bytes for %d tensors" % (rss, N))

        inputs = [load_file(p) for p in paths]
        got = load_file(out)
        self.assertEqual(list(got), list(inputs[0]))
        names = list(inputs[0])
        want = swa_fold([torch.cat([x[n] for n in names]) for x in inputs])
        self.assertTrue(same_bits(torch.cat([got[n] for n in names]), want))
        with open(report) as f:
            r = json.load(f)
        self.assertEqual(r["tensors"], N)
        self.assertEqual([d["name"] for d in r["details"]], names)
        self.assertEqual({d["action"] for d in r["details"]}, {"average"})


if __name__ == "__main__":
    unittest.main()
