"""The guide cannot rot: every shell command and Python block in the README and
docs/ runs, in order, in a checkout where `make run` has run; the README stays a guide."""

import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The longest pages run with `make test-all`; the README runs in `make test`.
LONG = {"reference.md", "model.md", "results.md", "history.md"}
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# Lines a test cannot run, each with why.
SKIPPED = {
    r"\$BHIVE_DATA": "BHive's full data, which the repository does not ship (benchmarks and full runs)",
    r"warehouse/(full|once)\.duckdb": "a warehouse the full profile filled from $BHIVE_DATA",
    r"^make ui\b|^\.venv/bin/difftune ui\b": "a server that runs until stopped (tests/test_ui.py starts it)",
    r"^make test": "this test suite itself",
    r"^make (bench|screenshots)\b": "the benchmarks and the browser check, minutes each",
    r"^ray start\b|RAY_ADDRESS=": "a Ray cluster of its own",
    r"\bruns/": "runs of the sample profile, minutes each, in folders of their own (results.md)",
}


def blocks(page: Path) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of a page, in order."""
    return [(lang, code) for lang, code in FENCE.findall(page.read_text())]


def commands(code: str) -> list[str]:
    """The commands of a shell block: a line ending in a backslash goes on."""
    return [c.strip() for c in re.sub(r"\\\n", " ", code).splitlines() if c.strip() and not c.startswith("#")]


def skipped(command: str) -> str | None:
    return next((why for what, why in SKIPPED.items() if re.search(what, command)), None)


def test_the_readme_is_a_guide_that_links_the_rest():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for target in ("docs/reference.md", "docs/model.md", "docs/results.md", "ARCHITECTURE.md"):
        assert f"]({target}" in readme and (ROOT / target).exists()
    # every page has something to run, and every runnable block is sh or python
    assert all(blocks(page) for page in PAGES)


@pytest.mark.browser
@pytest.mark.parametrize(
    "page", [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in LONG else []) for p in PAGES]
)
def test_every_command_in_the_docs_runs(smoke_run, page):
    root, _ = smoke_run
    env = clean_env(root)
    ran = 0
    for lang, code in blocks(page):
        if lang == "sh":
            for command in commands(code):
                if skipped(command):  # not run here, but what it names must exist
                    for script in re.findall(r"\b(?:bench|tests)/\S+\.py\b", command):
                        assert (ROOT / script).exists(), f"{page.name}: {command} names {script}"
                    continue
                run = subprocess.run(
                    ["bash", "-c", command], cwd=root, env=env, capture_output=True, text=True, timeout=600
                )
                assert run.returncode == 0, f"{page.name}: {command}\n{run.stdout}\n{run.stderr}"
                assert "Traceback" not in run.stderr, f"{page.name}: {command}\n{run.stderr}"
                ran += 1
        elif lang == "python":
            run = subprocess.run(
                [".venv/bin/python", "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=600
            )
            assert run.returncode == 0, f"{page.name}:\n{code}\n{run.stderr}"
            ran += 1
        else:
            assert lang in ("text", ""), f"{page.name}: a ```{lang} block: sh, python or text"
    assert ran or page.name in ("results.md", "history.md"), f"{page.name} shows nothing that runs"
