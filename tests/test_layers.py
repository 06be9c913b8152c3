"""scripts/check_layers.py: the real tree passes, and each rule of src/ARCHITECTURE.md (and the test
map of CONTRIBUTING.md), broken on a copy of the tree, is reported (a check that cannot fail checks
nothing)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "scripts", "check_layers.py")


def append(path, text):
    def change(root):
        with open(os.path.join(root, path), "a") as f:
            f.write(text)
    return change


def create(path, text):
    def change(root):
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    return change


def remove(path):
    return lambda root: os.remove(os.path.join(root, path))


def replace(path, old, new):
    def change(root):
        with open(os.path.join(root, path)) as f:
            text = f.read()
        assert old in text, (path, old)
        with open(os.path.join(root, path), "w") as f:
            f.write(text.replace(old, new, 1))
    return change


def both(*changes):
    def change(root):
        for c in changes:
            c(root)
    return change


MAP_ROW = "| util/sigbus_guard.cpp |"


def function_of(lines):
    """A function of `lines` lines in all, its braces' lines counted, with a '{' in a literal."""
    return "\nnamespace swavg {\nint long_one() {\n" + "  if ('{' == 0) return 1;\n" * (lines - 3) + "  return 0;\n}\n}\n"


# (what, change to the copy, a line the check must print)
VIOLATIONS = [
    ("an include that runs up", append("src/tensor/dtype.cpp", '\n#include "fold/plan.h"\n'),
     'src/tensor/dtype.cpp: includes "fold/plan.h": tensor is below fold'),
    ("formats includes the CLI", append("src/formats/io/load.cpp", '\n#include "cli/report.h"\n'),
     "formats is below cli"),
    ("LibTorch outside src/libtorch", append("src/fold/plan.cpp", "\n#include <ATen/Functions.h>\n"),
     "src/fold/plan.cpp: includes <ATen/Functions.h>; only src/libtorch/"),
    ("a c10 header beyond the documented exception", append("src/fold/native_kernels.cpp", "\n#include <c10/core/Device.h>\n"),
     "src/fold/native_kernels.cpp: includes <c10/core/Device.h>"),
    ("the CLI includes a LibTorch header of src/libtorch", append("src/cli/report.cpp", '\n#include "libtorch/module.h"\n'),
     'includes "libtorch/module.h", which includes LibTorch headers'),
    ("a fuzz driver includes LibTorch", append("tests/fuzz/replay.cpp", "\n#include <torch/version.h>\n"),
     "the fuzz targets build without LibTorch"),
    ("a second stand-in", append("tests/fuzz/replay.cpp",
                                 "\nnamespace swavg {\nvoid require_libtorch(const std::string& why) {\n}\n}\n"),
     "seam require_libtorch: defined again in tests/fuzz/replay.cpp"),
    ("a stand-in without a real definition", append("src/libtorch/without_libtorch.cpp",
                                                   "\nnamespace swavg {\nvoid only_a_stub(int x) {\n}\n}\n"),
     "seam only_a_stub: expected one definition in src/libtorch/"),
    ("a folder that is no layer", create("src/core/averager.h", "#pragma once\n"), "src/core/averager.h: folder 'core' is not a layer"),
    ("a layer without its library", remove("src/fold/CMakeLists.txt"), "src/fold/: has no CMakeLists.txt"),
    ("a header paired by stem with a source in another folder", create("src/fold/tensor_bridge.h", "#pragma once\n"),
     "src/fold/tensor_bridge.h: pairs by stem with src/libtorch/tensor_bridge.cpp, in another folder"),
    ("a stem in two folders", create("src/util/plan.cpp", "namespace swavg {}\n"),
     "stem 'plan' in two folders of src/ (src/fold/plan.cpp, src/fold/plan.h, src/util/plan.cpp)"),
    ("a header without its .cpp, not listed", create("src/fold/lonely.h", "#pragma once\n"),
     'src/fold/lonely.h: no fold/lonely.cpp beside it, and not listed in src/ARCHITECTURE.md\'s table'),
    ("a listed header that is gone", remove("src/util/checked.h"),
     'src/ARCHITECTURE.md: "Seams and header-only files" lists util/checked.h, which is no header of src/'),
    ("a listed header that has its .cpp", create("src/util/checked.cpp", "namespace swavg {}\n"),
     'lists util/checked.h, which has util/checked.cpp'),
    ("no table of seams and header-only files", remove("src/ARCHITECTURE.md"),
     'src/ARCHITECTURE.md: no table under a heading "Seams and header-only files"'),
    ("a source without a row in the test map", create("src/fold/orphan.cpp", "namespace swavg {}\n"),
     'src/fold/orphan.cpp: no row in CONTRIBUTING.md\'s table "Which tests cover which file"'),
    ("a row of the test map for a file that does not exist",
     replace("CONTRIBUTING.md", MAP_ROW, "| util/gone.cpp | test_gone | faults |\n" + MAP_ROW),
     'CONTRIBUTING.md: "Which tests cover which file" has a row for util/gone.cpp, which is no source of src/'),
    ("a row of the test map whose file was removed", remove("src/util/sigbus_guard.cpp"),
     "has a row for util/sigbus_guard.cpp, which is no source of src/"),
    ("a row of the test map twice", replace("CONTRIBUTING.md", MAP_ROW, MAP_ROW + " — | faults |\n" + MAP_ROW),
     'CONTRIBUTING.md: "Which tests cover which file" has 2 rows for util/sigbus_guard.cpp'),
    ("no test map", remove("CONTRIBUTING.md"), 'CONTRIBUTING.md: no table under a heading "Which tests cover which file"'),
    ("a file of formats/ outside its sub-libraries", create("src/formats/loose.h", "#pragma once\n"),
     "src/formats/loose.h: not in a sub-library of formats/"),
    ("a folder of formats/ not declared as a sub-library", create("src/formats/onnx/onnx_file.h", "#pragma once\n"),
     "src/formats/onnx/onnx_file.h: not in a sub-library of formats/"),
    ("an include of a sub-library the includer does not link",
     append("src/formats/zip/zip_reader.cpp", '\n#include "formats/pickle/pickle.h"\n'),
     'src/formats/zip/zip_reader.cpp: includes "formats/pickle/pickle.h", but swavg_formats_zip does not link '
     'swavg_formats_pickle'),
    ("a sub-library that links one after it",
     replace("src/formats/zip/CMakeLists.txt", "PUBLIC swavg_tensor", "PUBLIC swavg_tensor swavg_formats_io"),
     "src/formats/zip/CMakeLists.txt: links swavg_formats_io, which is not before zip"),
    ("a sub-library that links itself",
     replace("src/formats/zip/CMakeLists.txt", "PUBLIC swavg_tensor", "PUBLIC swavg_tensor swavg_formats_zip"),
     "src/formats/zip/CMakeLists.txt: links swavg_formats_zip, which is not before zip"),
    ("a sub-library without its CMakeLists.txt", remove("src/formats/dcp/CMakeLists.txt"),
     "src/formats/dcp/: has no CMakeLists.txt"),
    ("a sub-library's library under another name",
     replace("src/formats/dcp/CMakeLists.txt", "add_library(swavg_formats_dcp", "add_library(swavg_dcp"),
     "src/formats/dcp/CMakeLists.txt: expected one library swavg_formats_dcp"),
    ("no declared order of the sub-libraries",
     replace("src/formats/CMakeLists.txt", "set(SWAVG_FORMATS core", "set(SWAVG_FORMAT_LIST core"),
     "src/formats/CMakeLists.txt: no set(SWAVG_FORMATS ...)"),
    ("an include circle inside a folder",
     append("src/formats/zip/zip_format.cpp", '\n#include "formats/zip/zip_reader.h"\n'),
     "include circle between src/formats/zip/zip_format, src/formats/zip/zip_reader"),
    ("a function of 101 lines, the first too long", append("src/util/crc32.cpp", function_of(101)),
     "src/util/crc32.cpp: long_one is 101 lines, over 100"),
    ("a long table not listed where it is", append("src/util/crc32.cpp", function_of(101).replace("long_one", "step")),
     "src/util/crc32.cpp: step is 101 lines"),
    ("an include circle across folders",
     both(create("src/util/ping.h", '#pragma once\n#include "util/pong.h"\n'),
          create("src/util/pong.h", '#pragma once\n#include "util/ping.h"\n')),
     "include circle between src/util/ping, src/util/pong"),
]

# Changes after which the copy still passes.
KEPT = [
    ("a new source with its row in the test map",
     both(create("src/fold/orphan.cpp", "namespace swavg {}\n"),
          replace("CONTRIBUTING.md", MAP_ROW, "| fold/orphan.cpp | test_orphan | average |\n" + MAP_ROW))),
    ("a function of 100 lines, the longest allowed", append("src/util/crc32.cpp", function_of(100))),
    ("a new format as a sub-library: its folder declared, its library, its row",
     both(create("src/formats/onnx/onnx_file.h", '#pragma once\n#include "formats/zip/zip_reader.h"\n'),
          create("src/formats/onnx/onnx_file.cpp", '#include "formats/onnx/onnx_file.h"\n'),
          create("src/formats/onnx/CMakeLists.txt",
                 "add_library(swavg_formats_onnx STATIC onnx_file.cpp)\n"
                 "target_link_libraries(swavg_formats_onnx PUBLIC swavg_formats_zip swavg_tensor)\n"),
          replace("src/formats/CMakeLists.txt", "dataset io)", "dataset onnx io)"),
          replace("CONTRIBUTING.md", MAP_ROW, "| formats/onnx/onnx_file.cpp | test_onnx_file | inspect |\n" + MAP_ROW))),
]


def copy_tree(tmp, change):
    """The parts of the checkout the check reads, copied to `tmp` and changed by `change`."""
    shutil.copytree(os.path.join(ROOT, "src"), os.path.join(tmp, "src"))
    shutil.copytree(os.path.join(ROOT, "tests", "fuzz"), os.path.join(tmp, "tests", "fuzz"))
    shutil.copy(os.path.join(ROOT, "CONTRIBUTING.md"), tmp)
    change(tmp)
    return tmp


def run_check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True, timeout=120)


class LayersTest(unittest.TestCase):
    def test_tree_holds_the_rules(self):
        p = run_check(ROOT)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(": OK", p.stdout)

    def test_each_violation_is_reported(self):
        for what, change, expected in VIOLATIONS:
            with self.subTest(what), tempfile.TemporaryDirectory() as tmp:
                p = run_check(copy_tree(tmp, change))
                self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
                self.assertIn(expected, p.stdout)

    def test_a_complete_copy_passes(self):
        for what, change in [("the copy as it is", lambda root: None)] + KEPT:
            with self.subTest(what), tempfile.TemporaryDirectory() as tmp:
                p = run_check(copy_tree(tmp, change))
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertIn(": OK", p.stdout)


if __name__ == "__main__":
    unittest.main()
