"""Shared by the end-to-end tests: where the binary and the fixtures are, and how to run swavg."""
import os
import shutil
import subprocess
import tempfile
import unittest

import torch

SWAVG = os.environ.get("SWAVG_BIN", "swavg")
FIXTURES = os.environ.get("SWAVG_FIXTURES", "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


def swavg(*args, check=True):
    """Runs swavg; returns the CompletedProcess. With check, a non-zero exit fails the test."""
    p = subprocess.run([SWAVG, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError("swavg %s exited %d:\n%s" % (" ".join(map(str, args)), p.returncode, p.stderr))
    return p


def same_bits(a, b):
    """Bit-for-bit equality (NaNs and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a, b = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    if a.dtype != width and a.element_size() > 1:
        a, b = a.view(width), b.view(width)
    return torch.equal(a, b)


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="swavg-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)
