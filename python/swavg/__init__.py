"""Run swavg from Python: the installed binary with a JSON report, returned as a dict.

    import swavg
    report = swavg.ema(sorted(glob.glob("ckpt/*.pt")), "ema.pt", decay=0.999, force=True)

Keyword options become the command's flags: ``decay=0.999`` is ``--decay 0.999``, ``force=True``
is ``--force`` (False and None leave the flag out), a list repeats the flag (``strip_prefix=["module.",
"_orig_mod."]``), except for the options that take one comma list (``weights=[1, 2, 1]`` is
``--weights 1,2,1``). A non-zero exit raises the SwavgError subclass of its exit code (the codes of
``swavg --help``), carrying the exit code, swavg's stderr and the report if one was written.
Nothing here imports torch: the work is done by the binary, built against this environment's torch.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Type, Union

__all__ = [
    "SwavgError",
    "InternalError",
    "UsageError",
    "InputError",
    "MismatchError",
    "StorageError",
    "IOError_",
    "IncompleteError",
    "binary",
    "option_args",
    "run",
    "average",
    "ema",
    "update_bn",
]

PathLike = Union[str, "os.PathLike[str]"]
Report = Dict[str, Any]

# Options that take one comma-separated list instead of one value per use.
COMMA_LISTS = frozenset({"weights", "shape", "snapshot_times", "snapshot_sigmas"})
# Commands that write a JSON report with --report FILE, and those that print one with --json.
_REPORT_FILE_COMMANDS = frozenset({"average", "ema", "posthoc-ema", "update-bn"})
_REPORT_STDOUT_COMMANDS = frozenset({"inspect", "finalize"})


class SwavgError(RuntimeError):
    """swavg exited non-zero. exit_code, stderr (its messages) and report (a dict, or None)."""

    exit_code: int = 1

    def __init__(self, exit_code: int, stderr: str, report: Optional[Report] = None,
                 args: Sequence[str] = ()) -> None:
        lines = [line for line in stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("swavg: error:")]
        others = [line for line in lines if not line.startswith("Run with --help")]
        summary = errors[-1] if errors else (others or lines or ["swavg exited %d" % exit_code])[0]
        super().__init__(summary)
        self.exit_code = exit_code
        self.stderr = stderr
        self.report = report
        self.command = list(args)


class InternalError(SwavgError):
    """Exit 1: a bug or an unexpected failure."""

    exit_code = 1


class UsageError(SwavgError):
    """Exit 2: a bad command line (an unknown option, a value out of range)."""

    exit_code = 2


class InputError(SwavgError):
    """Exit 3: an input file is malformed, unsupported or unsafe."""

    exit_code = 3


class MismatchError(SwavgError):
    """Exit 4: the inputs disagree with each other (names, shapes, dtypes)."""

    exit_code = 4


class StorageError(SwavgError):
    """Exit 5: a file cannot be read or written (missing, permissions, disk full)."""

    exit_code = 5


IOError_ = StorageError  # the name of util/error.h's io_error, without shadowing the builtin IOError


class IncompleteError(SwavgError):
    """Exit 6: a shard-parallel job is not finished (finalize before every worker wrote its part)."""

    exit_code = 6


_ERRORS: Dict[int, Type[SwavgError]] = {
    c.exit_code: c for c in (InternalError, UsageError, InputError, MismatchError, StorageError, IncompleteError)
}


def binary() -> str:
    """The swavg binary: $SWAVG_BIN, else the one installed beside this Python, else swavg on PATH."""
    named = os.environ.get("SWAVG_BIN")
    if named:
        return named
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "swavg")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("swavg")
    if found:
        return found
    raise FileNotFoundError("the swavg binary is not installed with this Python (pip install swavg's source "
                            "folder) nor on PATH; set SWAVG_BIN to its path")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        raise TypeError("a boolean inside a list of option values: %r" % value)
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same double
    if isinstance(value, (str, int)):
        return str(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError("an option value must be a str, a number or a path, got %s" % type(value).__name__)


def _path(value: PathLike) -> str:
    """A path as an argument: one beginning with '-' gets './' so it does not read as an option."""
    text = os.fspath(value)
    return "./" + text if text.startswith("-") else text


def option_args(options: Mapping[str, Any]) -> List[str]:
    """The flags for keyword options: max_shard_size="5GB" -> ["--max-shard-size", "5GB"], force=True ->
    ["--force"], False or None -> nothing, a list -> the flag repeated (one comma list for COMMA_LISTS),
    a one-letter name -> a short flag (o="x.pt" -> ["-o", "x.pt"])."""
    args: List[str] = []
    for key, value in options.items():
        flag = ("-" if len(key) == 1 else "--") + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            values = [_text(v) for v in value]
            if key in COMMA_LISTS:
                args += [flag, ",".join(values)]
            else:
                for v in values:
                    args += [flag, v]
        else:
            args += [flag, _text(value)]
    return args


def _command(args: Sequence[str]) -> Optional[str]:
    for a in args:
        if not a.startswith("-"):
            return a
    return None


def _option_value(args: Sequence[str], name: str) -> Optional[str]:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def _read_report(path: Optional[str]) -> Optional[Report]:
    if path is None or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run(args: Sequence[Any], *, timeout: Optional[float] = None) -> Optional[Report]:
    """Runs `swavg ARGS...`; returns its JSON report as a dict (None for a command without one).

    average, ema, posthoc-ema and update-bn write it with --report (a temporary file unless ARGS name
    one); inspect and finalize print it with --json. Raises the SwavgError subclass of a non-zero
    exit code."""
    argv = [_text(a) for a in args]
    command = _command(argv)
    report_file = _option_value(argv, "--report")
    dry_run = "--dry-run" in argv  # the plan, on stdout with --json, is what it returns
    with tempfile.TemporaryDirectory(prefix="swavg-py-") as tmp:
        if command in _REPORT_FILE_COMMANDS and report_file is None and not dry_run:
            report_file = os.path.join(tmp, "report.json")
            argv += ["--report", report_file]
        stdout_json = command in _REPORT_STDOUT_COMMANDS or dry_run
        if stdout_json and "--json" not in argv:
            argv.append("--json")
        p = subprocess.run([binary(), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
        report = _read_report(report_file) if command in _REPORT_FILE_COMMANDS and not dry_run else None
    if stdout_json and p.returncode == 0:
        report = json.loads(p.stdout)
    if p.returncode != 0:
        raise _ERRORS.get(p.returncode, SwavgError)(p.returncode, p.stderr, report, argv)
    return report


def _inputs(inputs: Union[PathLike, Iterable[PathLike]]) -> List[str]:
    if isinstance(inputs, (str, os.PathLike)):
        return [_path(inputs)]
    return [_path(i) for i in inputs]


def average(inputs: Union[PathLike, Iterable[PathLike]], output: PathLike, **options: Any) -> Report:
    """`swavg average INPUTS -o OUTPUT` (SWA: equal weights, or weights=[...]); returns the report."""
    report = run(["average", *_inputs(inputs), "-o", _path(output), *option_args(options)])
    assert report is not None
    return report


def ema(inputs: Union[PathLike, Iterable[PathLike]], output: PathLike, decay: Optional[float] = None,
        **options: Any) -> Report:
    """`swavg ema INPUTS -o OUTPUT --decay D` (an exponential moving average); returns the report."""
    report = run(["ema", *_inputs(inputs), "-o", _path(output), *option_args({"decay": decay, **options})])
    assert report is not None
    return report


def update_bn(model: PathLike, data: PathLike, output: Optional[PathLike] = None, *,
              checkpoint: Optional[PathLike] = None, **options: Any) -> Report:
    """`swavg update-bn --model MODEL --data DATA [--checkpoint C] -o OUTPUT`: the BatchNorm statistics
    of torch.optim.swa_utils.update_bn; returns the report."""
    named = {"model": _path(model), "checkpoint": None if checkpoint is None else _path(checkpoint),
             "data": _path(data), "o": None if output is None else _path(output)}
    report = run(["update-bn", *option_args(named), *option_args(options)])
    assert report is not None
    return report
