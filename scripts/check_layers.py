#!/usr/bin/env python3
"""Checks the layering rules of src/ARCHITECTURE.md by reading the sources; exits 1 on a violation.

1. Includes run only down the layers util <- tensor <- formats <- fold <- libtorch <- cli (a file
   may include its own folder and any folder below it; tests/ may include anything).
2. Only src/libtorch/ includes <ATen/...>, <torch/...> or <c10/...>; the one exception is the
   header-only c10/util/Half.h and c10/util/BFloat16.h in src/fold/native_kernels.cpp. The
   LibTorch-free code (everything else, tests/fuzz/ too) may include a src/libtorch/ header only
   if that header is itself LibTorch-free.
3. Every function defined in src/libtorch/without_libtorch.cpp (the stand-ins) is a seam: declared
   once, in one header under src/, and defined once more, in another file of src/libtorch/; no file
   outside src/libtorch/ defines it.
4. Each folder under src/ has a CMakeLists.txt that adds exactly one library, named swavg_<folder>.

Usage: scripts/check_layers.py [ROOT]   (ROOT: the checkout, default: this script's parent folder)
"""
import pathlib
import re
import sys

LAYERS = ["util", "tensor", "formats", "fold", "libtorch", "cli"]
TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*<((?:ATen|torch|c10)/[^>]+)>', re.M)
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
HEADER_ONLY_EXCEPTIONS = {("fold/native_kernels.cpp", "c10/util/Half.h"), ("fold/native_kernels.cpp", "c10/util/BFloat16.h")}
STAND_IN_FILE = "libtorch/without_libtorch.cpp"
# A definition at namespace scope: a line starting (unindented) with a return type and the name,
# whose parameter list ends in an opening brace.
DEFINITION = r'^[A-Za-z_][\w:<>,\s\*&]*?[\s\*&:]{name}\([^;{{]*\)\s*(?:const\s*)?\{{'
DECLARATION = r'^[A-Za-z_][\w:<>,\s\*&]*?[\s\*&:]{name}\([^;{{]*\)\s*;'
FUNCTION_NAME = re.compile(r'^[A-Za-z_][\w:<>,\s\*&]*?[\s\*&]([a-z_][a-z0-9_]*)\([^;{]*\)\s*(?:const\s*)?\{', re.M)


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    src = root / "src"
    problems = []
    sources = {}
    for path in sorted(src.rglob("*")):
        if path.suffix in (".h", ".cpp", ".in") and path.is_file():
            sources[path.relative_to(src).as_posix()] = strip_comments(path.read_text())

    def folder(rel):
        return rel.split("/", 1)[0]

    def includes_torch(rel, seen=None):
        """True when `rel` (a path under src/) includes LibTorch headers, directly or through ours."""
        seen = seen if seen is not None else set()
        if rel in seen or rel not in sources:
            return False
        seen.add(rel)
        text = sources[rel]
        if any((rel, inc) not in HEADER_ONLY_EXCEPTIONS for inc in TORCH_INCLUDE.findall(text)):
            return True
        return any(includes_torch(inc, seen) for inc in LOCAL_INCLUDE.findall(text))

    for rel, text in sources.items():
        here = folder(rel)
        if here not in LAYERS:
            problems.append(f"src/{rel}: folder '{here}' is not a layer (expected one of {', '.join(LAYERS)})")
            continue
        for inc in LOCAL_INCLUDE.findall(text):
            there = folder(inc)
            if there not in LAYERS:
                problems.append(f"src/{rel}: includes \"{inc}\", which is in no layer")
            elif LAYERS.index(there) > LAYERS.index(here):
                problems.append(f"src/{rel}: includes \"{inc}\": {here} is below {there}, includes run only down")
            elif here != "libtorch" and there == "libtorch" and includes_torch(inc):
                problems.append(f"src/{rel}: includes \"{inc}\", which includes LibTorch headers")
        if here != "libtorch":
            for inc in TORCH_INCLUDE.findall(text):
                if (rel, inc) not in HEADER_ONLY_EXCEPTIONS:
                    problems.append(f"src/{rel}: includes <{inc}>; only src/libtorch/ includes LibTorch headers")

    for path in sorted((root / "tests").rglob("*")):
        if path.suffix in (".h", ".cpp") and "fuzz" in path.parts:
            text = strip_comments(path.read_text())
            for inc in TORCH_INCLUDE.findall(text):
                problems.append(f"{path.relative_to(root)}: includes <{inc}>; the fuzz targets build without LibTorch")
            for inc in LOCAL_INCLUDE.findall(text):
                if folder(inc) == "libtorch" and includes_torch(inc):
                    problems.append(f"{path.relative_to(root)}: includes \"{inc}\", which includes LibTorch headers")

    stand_ins = sorted(set(FUNCTION_NAME.findall(sources.get(STAND_IN_FILE, ""))))
    if not stand_ins:
        problems.append(f"src/{STAND_IN_FILE}: no stand-in found")
    outside = {p.relative_to(root).as_posix(): strip_comments(p.read_text())
               for p in (root / "tests").rglob("*.cpp")}
    outside.update({f"src/{rel}": text for rel, text in sources.items() if folder(rel) != "libtorch"})
    for name in stand_ins:
        definition = re.compile(DEFINITION.format(name=name), re.M)
        declaration = re.compile(DECLARATION.format(name=name), re.M)
        real = [rel for rel, text in sources.items()
                if folder(rel) == "libtorch" and rel != STAND_IN_FILE and rel.endswith(".cpp") and definition.search(text)]
        declared = [rel for rel, text in sources.items() if rel.endswith(".h") and declaration.search(text)]
        elsewhere = [rel for rel, text in outside.items() if rel.endswith(".cpp") and definition.search(text)]
        if len(real) != 1:
            problems.append(f"seam {name}: expected one definition in src/libtorch/ besides its stand-in, found "
                            f"{len(real)} ({', '.join(real) or 'none'})")
        if len(declared) != 1:
            problems.append(f"seam {name}: expected one declaring header, found {len(declared)} "
                            f"({', '.join(declared) or 'none'})")
        for rel in elsewhere:
            problems.append(f"seam {name}: defined again in {rel}; link src/{STAND_IN_FILE} instead")

    for layer in LAYERS:
        cmake = src / layer / "CMakeLists.txt"
        if not cmake.is_file():
            problems.append(f"src/{layer}/: has no CMakeLists.txt")
            continue
        libraries = re.findall(r'add_library\(\s*([\w-]+)', strip_comments(cmake.read_text()).replace('#', '//'))
        if libraries != [f"swavg_{layer}"]:
            problems.append(f"src/{layer}/CMakeLists.txt: expected one library swavg_{layer}, found {libraries or 'none'}")

    for p in problems:
        print(p)
    print(f"check_layers: {len(sources)} files, {len(stand_ins)} seams ({', '.join(stand_ins)}): "
          f"{'OK' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
