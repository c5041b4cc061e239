"""README.md is a front door (short, the two tagged commands first) and every written page under docs/ is
reachable from it through links that resolve: relative files exist, and #anchors name a heading of their page."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
# the written pages (the others under docs/ are run outputs: results.md of a comparison, a grid's table)
WRITTEN = [README, *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "usage").glob("*.md")),
           *sorted((ROOT / "docs" / "results").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower()).replace(" ", "-")


def _outside_code(text: str) -> list[str]:
    lines, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            lines.append(line)
    return lines


def _anchors(path: pathlib.Path) -> set[str]:
    return {_slug(line) for line in _outside_code(path.read_text()) if re.match(r"#{1,6} ", line)}


def _links(path: pathlib.Path) -> list[str]:
    return [m for line in _outside_code(path.read_text()) for m in LINK.findall(line)]


def test_readme_is_short_and_starts_with_the_two_tagged_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (the user's guide's limit is 150)"
    long = [f"{i}: {len(line)}" for i, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, f"README.md lines over 120 characters (line: length): {long}"
    code = [line for line in lines if line.startswith("./") or line.startswith(".venv/")]
    assert code[:2] == ["./setup.sh && .venv/bin/python -m experiments.tiny_pipeline  # main job",
                        "./setup.sh && .venv/bin/python -m pytest -q  # tests"], code[:2]


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        for link in _links(page):
            if re.match(r"[a-z]+:", link):
                continue                                    # http(s), mailto: not checked offline
            target, _, anchor = link.partition("#")
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                bad.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                bad.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert not bad, "\n".join(bad)


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = set(), [README.resolve()]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for link in _links(page):
            target = link.partition("#")[0]
            if target and not re.match(r"[a-z]+:", target):
                path = (page.parent / target).resolve()
                if path.suffix == ".md" and path.exists():
                    todo.append(path)
    assert len(WRITTEN) >= 25, WRITTEN
    unreachable = [str(p.relative_to(ROOT)) for p in WRITTEN if p.resolve() not in seen]
    assert not unreachable, unreachable


def test_the_results_index_lists_every_file_of_docs_results():
    """docs/results/README.md links every file in docs/results/ (measurements live there, so none may hide)."""
    index = ROOT / "docs" / "results" / "README.md"
    linked = {(index.parent / link.partition("#")[0]).resolve() for link in _links(index)}
    files = [p for p in sorted(index.parent.iterdir()) if p.is_file() and p != index]
    assert len(files) >= 15, files
    missing = [p.name for p in files if p.resolve() not in linked]
    assert not missing, f"docs/results/README.md does not list: {missing}"


def test_the_layout_page_names_every_module_entry_point_and_notebook():
    """docs/usage/layout.md names each module of maxk_jax/, each entry point under experiments/ and each notebook."""
    text = (ROOT / "docs" / "usage" / "layout.md").read_text()
    names = sorted({p.stem for folder in ("maxk_jax", "experiments") for p in (ROOT / folder).rglob("*.py")
                    if p.stem != "__init__"} | {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")})
    assert len(names) >= 120, names
    missing = [name for name in names if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text)]
    assert not missing, f"docs/usage/layout.md does not name: {missing}"


def test_the_readme_library_quickstart_runs():
    """The README's python block runs as written (the quickstart a user copies first)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README.md has no python block"
    for block in blocks:
        scope: dict = {}
        exec(compile(block, "README.md", "exec"), scope)
        if "fn" in scope:
            rewards = scope["rewards"]
            out = scope["fn"](rewards, k=4, log_ratio=0 * rewards)
            assert out.shape == rewards.shape and float(abs(out).sum()) > 0
