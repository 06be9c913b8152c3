"""`swavg completion bash|zsh|fish` and the man page swavg.1, checked against what --help lists.

The bash script is sourced in a real bash and its completion function called with COMP_WORDS and
COMP_CWORD set, as bash's programmable completion calls it. The man page is the one the build wrote
(build/swavg.1, beside the binary), rendered by man(1).
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

from common import SWAVG, TempDirTest, swavg

BUILD = os.path.dirname(os.path.abspath(SWAVG))
MAN_PAGE = os.environ.get("SWAVG_MAN_PAGE", os.path.join(BUILD, "swavg.1"))


def help_text(*command):
    return swavg(*command, "--help").stdout


def sections(text):
    """--help's option lists: {heading: [lines]} for the headings ending in ':' at column 0."""
    out, current = {}, None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            current = out.setdefault(line[:-1], [])
        elif current is not None and line.strip():
            current.append(line)
    return out


def subcommands():
    return [line.split()[0] for line in sections(help_text())["Subcommands"] if re.match(r"^  \S", line)]


def help_options(*command):
    """{option name: value text} of each option --help lists (names as `-o`, `--output`)."""
    options = {}
    for heading, lines in sections(help_text(*command)).items():
        if heading in ("Positionals", "Subcommands", "Examples", "Usage"):
            continue
        for line in lines:
            m = re.match(r"^  (-[^\s,]+(?:,-[^\s,]+)*)(?: (\S+))?", line)
            if m:
                for name in m.group(1).split(","):
                    options[name] = m.group(2) or ""
    return options


def help_choices(value_text):
    m = re.match(r"^TEXT:\{([^{}]*)\}$", value_text)
    return sorted(m.group(1).split(",")) if m else None


class BashCompletion(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.script = swavg("completion", "bash").stdout
        cls.script_dir = tempfile.mkdtemp(prefix="swavg-test-")
        cls.script_file = os.path.join(cls.script_dir, "swavg.bash")
        with open(cls.script_file, "w") as f:
            f.write(cls.script)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.script_dir, ignore_errors=True)

    def complete(self, *words):
        """COMPREPLY for the command line `words` (the last one is the word being completed)."""
        program = ('source "$SWAVG_COMPLETION"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _swavg; '
                   'printf "%s\\n" "${COMPREPLY[@]}"')
        p = subprocess.run(["bash", "--norc", "--noprofile", "-c", program, "bash", *words], capture_output=True,
                           text=True, cwd=self.tmp, timeout=600, env=dict(os.environ, SWAVG_COMPLETION=self.script_file))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        return sorted(w for w in p.stdout.split("\n") if w)

    def test_registers_the_function_for_swavg(self):
        p = subprocess.run(["bash", "--norc", "--noprofile", "-c", 'source "$1"; complete -p swavg', "bash",
                            self.script_file], capture_output=True, text=True, timeout=600)
        self.assertEqual(p.stdout.strip(), "complete -F _swavg swavg")

    def test_subcommands(self):
        names = subcommands()
        self.assertIn("average", names)
        self.assertIn("completion", names)
        self.assertNotIn("help-man", names)  # hidden: the build runs it
        self.assertEqual(self.complete("swavg", ""), sorted(names))
        self.assertEqual(self.complete("swavg", "av"), ["average"])
        self.assertEqual(self.complete("swavg", "-v", "e"), ["ema"])
        self.assertEqual(self.complete("swavg", "--v"), ["--verbose", "--version"])

    def test_options_of_each_subcommand(self):
        for sub in subcommands():
            with self.subTest(sub):
                offered = set(self.complete("swavg", sub, "-"))
                listed = set(help_options(sub))
                # Its own options, and the program's -v and -q (taken after a subcommand too)
                self.assertEqual(offered, listed | {"-v", "--verbose", "-q", "--quiet", "--progress", "--color"})
        self.assertEqual(self.complete("swavg", "average", "--bu"), ["--buffer", "--buffers"])
        self.assertEqual(self.complete("swavg", "average", "a.pt", "--max-s"), ["--max-shard-size"])

    def test_enum_values(self):
        self.assertEqual(self.complete("swavg", "average", "--buffers", ""), ["average", "first", "latest"])
        self.assertEqual(self.complete("swavg", "average", "--buffers", "f"), ["first"])
        # --buffers=<Tab>: bash splits the word at '='
        self.assertEqual(self.complete("swavg", "average", "--buffers", "="), ["average", "first", "latest"])
        self.assertEqual(self.complete("swavg", "average", "--buffers", "=", ""), ["average", "first", "latest"])
        self.assertEqual(self.complete("swavg", "average", "--buffers", "=", "l"), ["latest"])
        self.assertEqual(self.complete("swavg", "completion", ""), ["bash", "fish", "zsh"])
        # Every option that --help shows as TEXT:{a,b,...}, in every subcommand, completes to those names.
        checked = 0
        for sub in subcommands():
            for name, value in help_options(sub).items():
                choices = help_choices(value)
                if choices:
                    with self.subTest(sub=sub, option=name):
                        self.assertEqual(self.complete("swavg", sub, name, ""), choices)
                    checked += 1
        self.assertGreaterEqual(checked, 10)

    def test_paths(self):
        for name in ("ckpt_1.pt", "ckpt_2.pt", "my ckpt.pt", "other.pt"):
            open(self.path(name), "wb").close()
        os.mkdir(self.path("ckpt_dir"))
        files = ["ckpt_1.pt", "ckpt_2.pt", "ckpt_dir"]
        self.assertEqual(self.complete("swavg", "average", "ck"), files)
        self.assertEqual(self.complete("swavg", "average", "-o", "ck"), files)
        self.assertEqual(self.complete("swavg", "average", "--output", "=", "ck"), files)
        self.assertEqual(self.complete("swavg", "inspect", "my"), ["my ckpt.pt"])
        self.assertEqual(self.complete("swavg", "update-bn", "--model", "o"), ["other.pt"])
        self.assertEqual(self.complete("swavg", "finalize", "ckpt_d"), ["ckpt_dir"])
        # A number is not a path.
        self.assertEqual(self.complete("swavg", "average", "--last", ""), [])
        self.assertEqual(self.complete("swavg", "average", "--last", "c"), [])

# File names a shell can complete and a naive script splits or mangles: a newline, spaces, quotes,
# a backslash, shell characters and a leading dash (issue 29, item 7).
ODD_NAMES = ["new\nline.pt", "with space.pt", "quote'd.pt", 'dq"uote.pt', "back\\slash.pt", "$dollar.pt",
             "*star.pt", "-dash.pt", "tab\tbed.pt"]

# Drives an interactive zsh in a pseudo-terminal (zsh/zpty), types the line and a Tab, and writes
# every match compadd adds, NUL-separated, to $2: zsh's own completion system, run for real.
ZSH_CAPTURE = r"""
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "cd ${(q)3} && autoload -Uz compinit && compinit -u -D && source ${(q)1}"
zpty -w z "compadd() { if [[ \${@[1,(i)(-|--)]} == *-(O|A|D)\\ * ]]; then builtin compadd \"\$@\"; return; fi; \
local -a hits; builtin compadd -A hits \"\$@\"; (( \$#hits )) && print -rn -- \"\${(pj:\\0:)\${(Q)hits}}\"\$'\\0' >> ${(q)2}; \
builtin compadd \"\$@\"; }"
zpty -w z "print -rn -- '' >> ${(q)2}.ready"
for i in {1..100}; do [[ -e $2.ready ]] && break; sleep 0.1; done
zpty -n -w z "$4"$'\t'
for i in {1..100}; do [[ -s $2 ]] && break; sleep 0.1; done
sleep 0.5
zpty -d z
"""


class AnyFileName(TempDirTest):
    """Each shell's real completion on files with odd names: one candidate per file, byte for byte."""

    def setUp(self):
        super().setUp()
        for name in ODD_NAMES:
            open(self.path(name), "wb").close()
        self.scripts = {}
        for shell, name in (("bash", "swavg.bash"), ("zsh", "_swavg"), ("fish", "swavg.fish")):
            self.scripts[shell] = self.tmp + "-" + name  # outside the folder completed
            with open(self.scripts[shell], "w") as f:
                f.write(swavg("completion", shell).stdout)
        self.scripts["capture"] = self.tmp + "-capture.zsh"
        with open(self.scripts["capture"], "w") as f:
            f.write(ZSH_CAPTURE)

    def tearDown(self):
        for path in list(self.scripts.values()) + [self.tmp + "-zsh-matches", self.tmp + "-zsh-matches.ready"]:
            if os.path.exists(path):
                os.unlink(path)
        super().tearDown()

    def bash(self, *words):
        program = ('source "$SWAVG_COMPLETION"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _swavg; '
                   '(( ${#COMPREPLY[@]} )) && printf "%s\\0" "${COMPREPLY[@]}"; shopt -p nullglob || true')
        p = subprocess.run(["bash", "--norc", "--noprofile", "-c", program, "bash", *words], capture_output=True,
                           cwd=self.tmp, timeout=60, env=dict(os.environ, SWAVG_COMPLETION=self.scripts["bash"]))
        self.assertEqual(p.returncode, 0, p.stderr)
        out, _, shopt = p.stdout.decode().rpartition("\0")
        self.assertEqual(shopt.strip(), "shopt -u nullglob")  # the user's setting, restored
        return sorted(w for w in out.split("\0") if w)

    def test_bash(self):
        self.assertEqual(self.bash("swavg", "average", "new"), ["new\nline.pt"])
        self.assertEqual(self.bash("swavg", "average", "with"), ["with space.pt"])
        self.assertEqual(self.bash("swavg", "average", "with\\ s"), ["with space.pt"])
        self.assertEqual(self.bash("swavg", "average", "'with s"), ["with space.pt"])
        self.assertEqual(self.bash("swavg", "average", '"with s'), ["with space.pt"])
        self.assertEqual(self.bash("swavg", "average", "quote\\'"), ["quote'd.pt"])
        self.assertEqual(self.bash("swavg", "average", 'dq\\"'), ['dq"uote.pt'])
        self.assertEqual(self.bash("swavg", "average", '"dq\\"'), ['dq"uote.pt'])
        self.assertEqual(self.bash("swavg", "average", "back\\\\"), ["back\\slash.pt"])
        self.assertEqual(self.bash("swavg", "average", "\\$"), ["$dollar.pt"])
        self.assertEqual(self.bash("swavg", "average", "'$"), ["$dollar.pt"])
        self.assertEqual(self.bash("swavg", "average", "\\*"), ["*star.pt"])
        self.assertEqual(self.bash("swavg", "average", "tab"), ["tab\tbed.pt"])
        self.assertEqual(self.bash("swavg", "average", "-o", "new"), ["new\nline.pt"])
        # A leading dash: an option where options go; the file after --, or as ./-dash.pt.
        self.assertNotIn("-dash.pt", self.bash("swavg", "average", "-"))
        self.assertEqual(self.bash("swavg", "average", "./-"), ["./-dash.pt"])
        self.assertEqual(self.bash("swavg", "average", "a.pt", "--", "-"), ["-dash.pt"])
        self.assertEqual(len(self.bash("swavg", "average", "")), len(ODD_NAMES))
        # A pattern's characters typed are literal: '*' completes the file named *star.pt only.
        self.assertEqual(self.bash("swavg", "average", "'*"), ["*star.pt"])

    def zsh(self, line):
        if shutil.which("zsh") is None:
            self.skipTest("zsh is not installed")
        out = self.tmp + "-zsh-matches"  # outside the folder completed
        for stale in (out, out + ".ready"):
            if os.path.exists(stale):
                os.unlink(stale)
        p = subprocess.run(["zsh", "-f", self.scripts["capture"], self.scripts["zsh"], out, self.tmp, line],
                           capture_output=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        if not os.path.exists(out):
            return []
        with open(out, "rb") as f:
            return sorted(set(w for w in f.read().decode().split("\0") if w))

    def test_zsh(self):
        self.assertEqual(self.zsh("swavg average new"), ["new\nline.pt"])
        self.assertEqual(self.zsh("swavg average with"), ["with space.pt"])
        self.assertEqual(self.zsh("swavg average quote"), ["quote'd.pt"])
        self.assertEqual(self.zsh("swavg average 'dq\""), ['dq"uote.pt'])
        self.assertEqual(self.zsh("swavg average back"), ["back\\slash.pt"])
        self.assertEqual(self.zsh("swavg average \\$"), ["$dollar.pt"])
        self.assertEqual(self.zsh("swavg average tab"), ["tab\tbed.pt"])
        self.assertEqual(self.zsh("swavg inspect ./-"), ["-dash.pt"])

    def fish(self, line):
        if shutil.which("fish") is None:
            self.skipTest("fish is not installed")
        program = 'source $argv[1]; for c in (complete -C $argv[2] | string split0); printf "%s\\0" $c; end'
        program = 'source $argv[1]; complete -C $argv[2] | string collect'
        p = subprocess.run(["fish", "--no-config", "-c", program, self.scripts["fish"], line], capture_output=True,
                           cwd=self.tmp, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return sorted(c.split("\t")[0] for c in p.stdout.decode().split("\n") if c)

    def test_fish(self):
        self.assertEqual(self.fish("swavg average with"), ["with space.pt"])
        self.assertEqual(self.fish("swavg average quote"), ["quote'd.pt"])
        self.assertEqual(self.fish("swavg average back"), ["back\\slash.pt"])
        self.assertEqual(self.fish("swavg average \\$"), ["$dollar.pt"])
        self.assertEqual(self.fish("swavg average ./-"), ["./-dash.pt"])
        self.assertEqual(self.fish("swavg average -- -"), ["-dash.pt"])


class OtherShells(unittest.TestCase):
    def check_parses(self, shell):
        if shutil.which(shell) is None:
            self.skipTest("%s is not installed" % shell)
        script = swavg("completion", shell).stdout
        p = subprocess.run([shell, "-n"], input=script, capture_output=True, text=True, timeout=600)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        for sub in subcommands():
            self.assertIn(sub, script)
        return script

    def test_zsh(self):
        script = self.check_parses("zsh")
        self.assertTrue(script.startswith("#compdef swavg\n"))
        self.assertTrue(re.search(r"^ +'--buffers=\[[^\n]*\]:buffers:\(latest first average\)' \\$", script, re.M))
        self.assertTrue(re.search(r"^ +'\(-o --output\)'\{-o\+,--output=\}'\[[^\n]*\]:output:_files' \\$", script,
                                  re.M))

    def test_fish(self):
        script = self.check_parses("fish")
        self.assertTrue(re.search(r"^complete -c swavg -n '__fish_seen_subcommand_from average' -l buffers -x "
                                  r"-a 'latest first average' -d '", script, re.M))

    def test_fish_completes(self):
        script = self.check_parses("fish")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "swavg.fish")
            with open(path, "w") as f:
                f.write(script)

            def complete(line):
                p = subprocess.run(["fish", "--no-config", "-c", "source %s; complete -C %s" % (path, shlex.quote(line))],
                                   capture_output=True, text=True, timeout=600, cwd=tmp)
                self.assertEqual(p.returncode, 0, p.stderr)
                return sorted(candidate.split("\t")[0] for candidate in p.stdout.splitlines())

            self.assertEqual(complete("swavg "), sorted(subcommands()))
            self.assertEqual(complete("swavg average --buffers "), ["average", "first", "latest"])
            self.assertIn("--max-shard-size", complete("swavg average --max"))
            self.assertEqual(complete("swavg inspect swavg.f"), ["swavg.fish"])

    def test_the_build_wrote_them(self):
        for shell, name in (("bash", "swavg.bash"), ("zsh", "_swavg"), ("fish", "swavg.fish")):
            with open(os.path.join(BUILD, "completions", name)) as f:
                self.assertEqual(f.read(), swavg("completion", shell).stdout, name)

    def test_unknown_shell_is_a_usage_error(self):
        p = swavg("completion", "tcsh", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("expected one of {bash,zsh,fish}, got 'tcsh'", p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertEqual(swavg("completion", check=False).returncode, 2)


class ManPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("man") is None:
            raise unittest.SkipTest("man (man-db) is not installed")
        env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
        p = subprocess.run(["man", "--warnings", "-l", MAN_PAGE], capture_output=True, text=True, env=env,
                           timeout=600)
        cls.rendered, cls.warnings, cls.returncode = p.stdout, p.stderr, p.returncode

    def section(self, heading):
        """The rendered text under a heading at column 0, up to the next one."""
        m = re.search(r"^%s\n(.*?)(?=^\S)" % re.escape(heading), self.rendered, re.S | re.M)
        self.assertIsNotNone(m, "no section %s in the man page" % heading)
        return m.group(1)

    def subsection(self, name):
        m = re.search(r"^   swavg %s\n(.*?)(?=^   swavg |^\S|\Z)" % re.escape(name), self.section("COMMANDS"),
                      re.S | re.M)
        self.assertIsNotNone(m, "no subsection swavg %s in COMMANDS" % name)
        return m.group(1)

    @classmethod
    def source_tags(cls):
        """{subsection ("" for OPTIONS): option names in its item tags}, read from the roff source."""
        with open(MAN_PAGE) as f:
            source = f.read()
        tags, current = {}, None
        lines = source.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(".SH "):
                current = "" if line == ".SH OPTIONS" else None
            elif line.startswith(".SS "):
                current = line[len('.SS "swavg '):-1].replace("\\-", "-")
            elif line == ".TP" and current is not None and i + 1 < len(lines):
                names = re.findall(r"\\fB(.*?)\\fR", lines[i + 1])
                tags.setdefault(current, set()).update(n.replace("\\-", "-") for n in names)
        return tags

    def assert_lists(self, text, names):
        for name in names:
            self.assertRegex(text, r"(?<![\w-])%s(?![\w-])" % re.escape(name))

    def test_renders_without_warnings(self):
        self.assertEqual((self.returncode, self.warnings), (0, ""))
        for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT",
                        "FILES", "SEE ALSO"):
            self.section(heading)
        self.assertIn("swavg - average PyTorch checkpoints", self.section("NAME"))

    def test_the_page_is_what_swavg_prints(self):
        with open(MAN_PAGE) as f:
            self.assertEqual(f.read(), swavg("help-man").stdout)

    def test_every_option_of_every_subcommand(self):
        tags = self.source_tags()
        self.assertEqual(tags[""], set(help_options()))
        self.assert_lists(self.section("OPTIONS"), help_options())
        self.assertEqual(set(tags) - {""}, set(subcommands()))
        for sub in subcommands():
            with self.subTest(sub):
                self.assertEqual(tags[sub], set(help_options(sub)))
                text = self.subsection(sub)
                self.assert_lists(text, help_options(sub))
                for line in sections(help_text(sub)).get("Positionals", []):
                    if re.match(r"^  \S", line):
                        self.assertIn(line.split()[0], text)

    def test_exit_codes(self):
        footer = help_text().split("Exit codes:")[1].strip()
        codes = re.findall(r"(?:^|, |\n)(\d) ", footer)
        self.assertEqual(codes, ["0", "1", "2", "3", "4", "5", "6"])
        listed = re.findall(r"^       (\d)\b", self.section("EXIT STATUS"), re.M)
        self.assertEqual(listed, codes)

    def test_environment(self):
        text = self.section("ENVIRONMENT")
        for name in ("SWAVG_PREFETCH_BYTES", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID", "RANK", "WORLD_SIZE",
                     "JOB_COMPLETION_INDEX", "GOMP_SPINCOUNT", "SWAVG_HANDED_OVER", "SWAVG_PROGRESS", "NO_COLOR",
                     "COLUMNS"):
            self.assertIn(name, text)


if __name__ == "__main__":
    unittest.main()
