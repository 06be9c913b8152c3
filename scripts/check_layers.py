#!/usr/bin/env python3
"""Checks the layering rules of src/ARCHITECTURE.md by reading the sources; exits 1 on a violation.

1. Includes run only down the layers util <- tensor <- formats <- fold <- libtorch <- cli (a file
   may include its own folder and any folder below it; tests/ may include anything). They must also
   run down as a drawing that pairs each header with the source of its stem shows them: no header
   has a .cpp of its stem in another folder (whose includes would be drawn as the header's).
2. Only src/libtorch/ includes <ATen/...>, <torch/...> or <c10/...> (so that swavg builds without
   LibTorch: cmake -DSWAVG_LIBTORCH=none). The LibTorch-free code (everything else, tests/fuzz/ too) may include a src/libtorch/ header only
   if that header is itself LibTorch-free.
3. Every function defined in src/libtorch/without_libtorch.cpp (the stand-ins) is a seam: declared
   once, in one header under src/, and defined once more, in another file of src/libtorch/; no file
   outside src/libtorch/ defines it.
4. Each folder under src/ has a CMakeLists.txt that adds exactly one library, named swavg_<folder>.
5. One name, one place (rule 6 of src/ARCHITECTURE.md, as is 6 below): no file stem (the name up
   to its first dot) is in two folders of src/ (CMakeLists.txt excepted).
6. Every header has a .cpp of its stem in its folder, or is listed in the table under the heading
   "Seams and header-only files" of src/ARCHITECTURE.md (its first column, `folder/name.h`); a
   listed file must be a header of src/ without such a .cpp.
7. Every source (src/**/*.cpp) has one row in the table under the heading "Which tests cover which
   file" of CONTRIBUTING.md (its first column, `folder/name.cpp`), and every row there names a
   source of src/ (no row for a file split, renamed or removed since).
8. src/formats/ is sub-libraries in a declared order (`set(SWAVG_FORMATS ...)` in
   src/formats/CMakeLists.txt): every file of it lives in one of their folders, each folder's
   CMakeLists.txt adds one library swavg_formats_<folder> and links only sub-libraries before it in
   that order, and a file includes another sub-library's headers only when its own links that one.
9. No include circles: drawn with one node per file stem of a folder (its header and its source
   together), the includes of src/ form no cycle, inside a folder or across folders.
10. Functions a reader can hold: no function defined at namespace scope in a source of src/ is over
   MAX_FUNCTION_LINES lines, but the tables listed in LONG_TABLES (an opcode switch, an option list).

Usage: scripts/check_layers.py [ROOT]   (ROOT: the checkout, default: this script's parent folder)
"""
import pathlib
import re
import sys

LAYERS = ["util", "tensor", "formats", "fold", "libtorch", "cli"]
MAX_FUNCTION_LINES = 100
# Functions that are one long table, where a row per case reads better than a split.
LONG_TABLES = {"pickle/unpickler.cpp": ["unpickler::step"], "cli/fold_options.cpp": ["add_fold_options"]}
LITERAL = re.compile(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"")
FUNCTION_START = re.compile(r'^(?!namespace\b|using\b|struct\b|class\b|enum\b|template\b|typedef\b|#)[A-Za-z_~]')
FUNCTION_NAME_AT = re.compile(r'([A-Za-z_~][\w:~]*)\s*\(')
FORMATS_CMAKE = "formats/CMakeLists.txt"
FORMATS_ORDER = re.compile(r'^\s*set\(\s*SWAVG_FORMATS\s+([^)$]*)\)', re.M)
FORMATS_LINK = re.compile(r'target_link_libraries\(\s*swavg_formats_\w+([^)]*)\)')
TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*<((?:ATen|torch|c10)/[^>]+)>', re.M)
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
STAND_IN_FILE = "libtorch/without_libtorch.cpp"
ARCHITECTURE = "ARCHITECTURE.md"
HEADER_TABLE = "Seams and header-only files"
CONTRIBUTING = "CONTRIBUTING.md"
TEST_MAP = "Which tests cover which file"
# A definition at namespace scope: a line starting (unindented) with a return type and the name,
# whose parameter list ends in an opening brace.
DEFINITION = r'^[A-Za-z_][\w:<>,\s\*&]*?[\s\*&:]{name}\([^;{{]*\)\s*(?:const\s*)?\{{'
DECLARATION = r'^[A-Za-z_][\w:<>,\s\*&]*?[\s\*&:]{name}\([^;{{]*\)\s*;'
FUNCTION_NAME = re.compile(r'^[A-Za-z_][\w:<>,\s\*&]*?[\s\*&]([a-z_][a-z0-9_]*)\([^;{]*\)\s*(?:const\s*)?\{', re.M)


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def stem(rel):
    """"plan" for fold/plan.h, "version" for util/version.h.in."""
    return rel.rsplit("/", 1)[-1].split(".", 1)[0]


def parent(rel):
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def first_column(text, heading):
    """The first cells of the rows of the first table under `heading` (a Markdown heading), header
    and separator rows left out; None without such a table."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.lstrip().startswith("#") and heading.lower() in line.lower()), None)
    if start is None:
        return None
    cells, in_table = [], False
    for line in lines[start + 1:]:
        if line.lstrip().startswith("|"):
            in_table = True
            cells.append(line.strip().strip("|").split("|")[0].strip())
        elif in_table or line.lstrip().startswith("#"):
            break
    if not in_table:
        return None
    separator = next((i for i, cell in enumerate(cells) if re.fullmatch(r":?-+:?", cell)), None)
    return cells[separator + 1:] if separator is not None else cells


def listed_headers(text):
    """The files in the first column of the table under the heading HEADER_TABLE (None without it)."""
    cells = first_column(text, HEADER_TABLE)
    if cells is None:
        return None
    return [m.group(1) for m in (re.fullmatch(r"`([^`]+)`", cell) for cell in cells) if m]


def cmake_text(path):
    return re.sub(r'#[^\n]*', '', path.read_text()) if path.is_file() else None


def library_problems(src, folder, why=""):
    """Rules 4 and 8: src/<folder>/CMakeLists.txt adds exactly one library, swavg_<folder with _ for
    />. Returns (its text without comments or None, the problems)."""
    cmake = cmake_text(src / folder / "CMakeLists.txt")
    if cmake is None:
        return None, [f"src/{folder}/: has no CMakeLists.txt{why}"]
    expected = "swavg_" + folder.replace("/", "_")
    libraries = re.findall(r'add_library\(\s*([\w-]+)', cmake)
    if libraries != [expected]:
        return cmake, [f"src/{folder}/CMakeLists.txt: expected one library {expected}, found {libraries or 'none'}"]
    return cmake, []


def formats_problems(src, sources):
    """Rule 8: the sub-libraries of src/formats/, their declared order, their links and includes."""
    top = cmake_text(src / FORMATS_CMAKE)
    declared = FORMATS_ORDER.search(top or "")
    if not declared:
        return [f"src/{FORMATS_CMAKE}: no set(SWAVG_FORMATS ...) declaring the sub-libraries' order"]
    order = declared.group(1).split()
    problems, links = [], {}
    for sub in order:
        cmake, found = library_problems(src, f"formats/{sub}", f" (declared in src/{FORMATS_CMAKE})")
        problems += found
        if cmake is None:
            continue
        linked = set()
        for args in FORMATS_LINK.findall(cmake):
            linked.update(re.findall(r'\bswavg_formats_(\w+)', args))
        links[sub] = linked
        for other in sorted(linked):
            if other not in order or order.index(other) >= order.index(sub):
                problems.append(f"src/formats/{sub}/CMakeLists.txt: links swavg_formats_{other}, which is not "
                                f"before {sub} in SWAVG_FORMATS ({' '.join(order)}): sub-libraries link only down")
    for rel in sorted(p.relative_to(src).as_posix() for p in (src / "formats").rglob("*") if p.is_file()):
        parts = rel.split("/")
        if rel == FORMATS_CMAKE:
            continue
        if len(parts) != 3 or parts[1] not in order:
            problems.append(f"src/{rel}: not in a sub-library of formats/ (a folder named in SWAVG_FORMATS: "
                            f"{' '.join(order)})")
    for rel, text in sorted(sources.items()):
        parts = rel.split("/")
        if parts[0] != "formats" or len(parts) != 3 or parts[1] not in links:
            continue
        for inc in LOCAL_INCLUDE.findall(text):
            there = inc.split("/")
            if there[0] != "formats" or there[1:2] == [parts[1]]:
                continue
            if len(there) != 3 or there[1] not in order:
                problems.append(f"src/{rel}: includes \"{inc}\", which is in no sub-library of formats/")
            elif there[1] not in links[parts[1]]:
                problems.append(f"src/{rel}: includes \"{inc}\", but swavg_formats_{parts[1]} does not link "
                                f"swavg_formats_{there[1]}")
    return problems


def circle_problems(sources):
    """Rule 9: the include drawing with one node per folder/stem has no cycle (Tarjan's components)."""
    graph = {}
    for rel, text in sources.items():
        node = f"{parent(rel)}/{stem(rel)}"
        graph.setdefault(node, set())
        for inc in LOCAL_INCLUDE.findall(text):
            target = f"{parent(inc)}/{stem(inc)}"
            if target != node and inc in sources:
                graph[node].add(target)
    index, low, stack, on_stack, circles = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return [f"include circle between {', '.join(f'src/{c}' for c in circle)}: each reaches the others through "
            f"includes (move what they share into a file that includes neither)" for circle in sorted(circles)]


def long_functions(rel, text):
    """Rule 10: (name, lines) of each function defined at namespace scope in `text` (comments
    stripped) over MAX_FUNCTION_LINES lines. Google style leaves namespaces unindented, so such a
    definition starts at column 0 and ends at its matching brace."""
    lines = LITERAL.sub('""', text).split("\n")
    found, i = [], 0
    while i < len(lines):
        if not FUNCTION_START.match(lines[i]):
            i += 1
            continue
        head, j = lines[i], i
        while "{" not in head and ";" not in head and j + 1 < len(lines) and j - i < 10:
            j += 1
            head += " " + lines[j]
        before = head.split("{", 1)[0]
        name = FUNCTION_NAME_AT.search(before)
        if "{" not in head or ";" in before or not name or "=" in before.split("(", 1)[0]:
            i = j + 1
            continue
        depth, k = 0, j
        depth += lines[j].count("{") - lines[j].count("}")
        while depth > 0 and k + 1 < len(lines):
            k += 1
            depth += lines[k].count("{") - lines[k].count("}")
        if k - i + 1 > MAX_FUNCTION_LINES:
            found.append((name.group(1), k - i + 1))
        i = k + 1
    return found


def function_problems(sources):
    problems = []
    for rel, text in sorted(sources.items()):
        if not rel.endswith(".cpp"):
            continue
        allowed = next((names for suffix, names in LONG_TABLES.items() if rel.endswith(suffix)), [])
        for name, count in long_functions(rel, text):
            if name not in allowed:
                problems.append(f"src/{rel}: {name} is {count} lines, over {MAX_FUNCTION_LINES}: cut it into "
                                f"steps a reader can hold (or, for one long table, list it in LONG_TABLES)")
    return problems


def map_problems(root, files):
    """Rule 7: a row of CONTRIBUTING.md's test map for every source of src/, and no other row."""
    contributing = root / CONTRIBUTING
    rows = first_column(contributing.read_text(), TEST_MAP) if contributing.is_file() else None
    if rows is None:
        return [f"{CONTRIBUTING}: no table under a heading \"{TEST_MAP}\""]
    rows = [row.strip("`") for row in rows]
    problems = []
    for rel in (rel for rel in files if rel.endswith(".cpp") and rel not in rows):
        problems.append(f"src/{rel}: no row in {CONTRIBUTING}'s table \"{TEST_MAP}\" (name the tests that "
                        f"cover it)")
    for rel in sorted(set(rows)):
        if not rel.endswith(".cpp") or rel not in files:
            problems.append(f"{CONTRIBUTING}: \"{TEST_MAP}\" has a row for {rel}, which is no source of src/ "
                            f"(split, renamed or removed: update or drop the row)")
        elif rows.count(rel) > 1:
            problems.append(f"{CONTRIBUTING}: \"{TEST_MAP}\" has {rows.count(rel)} rows for {rel}")
    return problems


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
        if TORCH_INCLUDE.search(text):
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
        problems += library_problems(src, layer)[1]

    files = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    in_folders = [rel for rel in files if "/" in rel and rel.rsplit("/", 1)[-1] != "CMakeLists.txt"]
    by_stem = {}
    for rel in in_folders:
        by_stem.setdefault(stem(rel), []).append(rel)
    for name, rels in sorted(by_stem.items()):
        folders = sorted({parent(rel) for rel in rels})
        if len(folders) > 1:
            problems.append(f"stem '{name}' in two folders of src/ ({', '.join(f'src/{rel}' for rel in rels)}): "
                            f"name each file after what it defines")
        for header in (rel for rel in rels if rel.endswith(".h")):
            for cpp in (rel for rel in rels if rel.endswith(".cpp") and parent(rel) != parent(header)):
                problems.append(f"src/{header}: pairs by stem with src/{cpp}, in another folder: a drawing that "
                                f"pairs headers with sources by stem shows {parent(cpp)}'s includes as "
                                f"{parent(header)}'s")

    architecture = src / ARCHITECTURE
    listed = listed_headers(architecture.read_text()) if architecture.is_file() else None
    if listed is None:
        problems.append(f"src/{ARCHITECTURE}: no table under a heading \"{HEADER_TABLE}\"")
        listed = []
    present = set(files)
    for rel in (rel for rel in in_folders if rel.endswith(".h")):
        cpp = f"{parent(rel)}/{stem(rel)}.cpp"
        if cpp not in present and rel not in listed:
            problems.append(f"src/{rel}: no {cpp} beside it, and not listed in src/{ARCHITECTURE}'s table "
                            f"\"{HEADER_TABLE}\"")
    for rel in listed:
        cpp = f"{parent(rel)}/{stem(rel)}.cpp"
        if rel not in present or not rel.endswith(".h"):
            problems.append(f"src/{ARCHITECTURE}: \"{HEADER_TABLE}\" lists {rel}, which is no header of src/")
        elif cpp in present:
            problems.append(f"src/{ARCHITECTURE}: \"{HEADER_TABLE}\" lists {rel}, which has {cpp}: "
                            f"only headers without a .cpp of their stem are listed")
    problems += map_problems(root, files)
    problems += formats_problems(src, sources)
    problems += circle_problems(sources)
    problems += function_problems(sources)

    for p in problems:
        print(p)
    print(f"check_layers: {len(sources)} files, {len(stand_ins)} seams ({', '.join(stand_ins)}): "
          f"{'OK' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
