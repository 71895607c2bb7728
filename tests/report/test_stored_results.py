"""Stored runs and claims: the docs' tables are runs with provenance, fresh, and in sync.

The first test is the repository's own check (`python -m ebm_jax.report.stored
check`); the others build a small repository in tmp_path with a toy config and show
that a changed default makes a stored run stale, naming the field.
"""

import json
import re
from pathlib import Path

import pytest

import ebm_jax
from ebm_jax import cli
from ebm_jax.report import claims, gpu_runs, provenance, stored

ROOT = Path(__file__).resolve().parents[2]


def test_the_repositorys_stored_runs_are_fresh_and_its_pages_in_sync():
    problems = stored.check(ROOT)
    assert not problems, "\n".join(problems)


def test_every_stored_run_has_provenance_and_reproduces_with_one_command():
    for name in stored.stored_names(ROOT):
        data = stored.read_results(ROOT / stored.RESULTS / name)
        p = data["ebm_jax"]["provenance"]
        if "benchmark" in p:  # a benchmark's report: its script, run as printed
            assert p["package"]["commit"] and (ROOT / p["benchmark"]["script"]).is_file()
            continue
        assert p["package"]["commit"] and p["config"]["file"], name
        assert not p["config"]["overrides"], (
            f"{name}: a docs table reproduces with one `ebm-jax run NAME:VARIANT`, no "
            f"overrides; name a variant for {p['config']['overrides']}")


def test_a_run_records_its_provenance_and_a_changed_default_makes_it_stale(
        tmp_path, monkeypatch, capsys, toy_repo, run_and_store):
    root, cfg = toy_repo()
    target = run_and_store(root, cfg)
    data = json.loads((target / "results.json").read_text())
    p = data["ebm_jax"]["provenance"]
    assert p["config"]["variant"] == "small" and p["config"]["overrides"] == []
    assert p["package"]["version"] and p["versions"]["jax"] and p["machine"]["cpu_cores"]
    assert p["package"]["commit"] is None or len(p["package"]["commit"]) == 40
    footer = (target / "results.md").read_text().strip().splitlines()[-1]
    assert footer.startswith(provenance.FOOTER_PREFIX) and p["config"]["identity"] in footer
    # its wall time, with the machine, is what `ebm-jax list` prints
    times = json.loads((root / "experiments" / "wall_times.json").read_text())
    (entry,) = times[str(cfg)]["small"]
    assert entry["seconds"] == p["wall_seconds"] and "CPU cores" in entry["machine"]

    (root / "docs" / "toy.md").write_text(
        "# Toy\n\n<!-- claims: toy.md -->\n<!-- /claims -->\n\n## The table\n\n"
        "<!-- stored: toy-small -->\n<!-- /stored -->\n")
    assert stored.check(root) == [
        "docs/toy.md: its generated blocks are out of date; run `python -m "
        "ebm_jax.report.stored sync`"]
    assert stored.sync(root) == ["docs/toy.md"]
    page = (root / "docs" / "toy.md").read_text()
    assert "| Toy | It learns | loss < 1 | **holds** | it does |" in page
    assert f"ebm-jax run {cfg}:small" in page and p["config"]["identity"] in page
    assert stored.check(root) == []

    # a changed default: the stored run is stale, and the check names the field
    cfg.write_text(cfg.read_text().replace("learning_rate=0.1", "learning_rate=0.2"))
    (problem,) = stored.check(root)
    assert problem.startswith(f"{target / 'results.json'} is stale: ")
    assert "(changed: learning_rate)" in problem
    assert f"rerun `ebm-jax run {cfg}:small`" in problem


@pytest.mark.parametrize("damage, says", [
    (lambda d: d["ebm_jax"].pop("provenance"), "results.json without provenance"),
    (lambda d: d["ebm_jax"]["provenance"]["config"].pop("identity"),
     "results.json without provenance"),
    (lambda d: d["ebm_jax"]["provenance"].update(
        config=None, benchmark={"script": "benchmarks/x.py", "args": []}),
     "results.json without provenance"),  # a benchmark's without its load average
])
def test_a_stored_run_without_provenance_is_one_line_naming_it(tmp_path, damage, says):
    folder = tmp_path / "docs" / "results" / "old"
    folder.mkdir(parents=True)
    data = {"ebm_jax": {"provenance": {"package": {}, "config": {
        "file": "x.py", "variant": "quick", "overrides": [], "identity": "0"},
        "machine": {}, "versions": {}, "wall_seconds": 1}}}
    damage(data)
    (folder / "results.json").write_text(json.dumps(data))
    with pytest.raises(stored.StoredError) as e:
        stored.read_results(folder)
    assert str(folder / "results.json") in str(e.value) and says in str(e.value)
    assert "\n" not in str(e.value)


def test_a_stored_run_whose_config_is_gone_is_named(
        tmp_path, monkeypatch, capsys, toy_repo, run_and_store):
    root, cfg = toy_repo()
    target = run_and_store(root, cfg)
    cfg.write_text(cfg.read_text().replace('("small",)', '("large",)'))
    (problem,) = [p for p in stored.check(root) if "results.json" in p]
    assert problem.startswith(f"{target / 'results.json'}: its config no longer loads")
    assert "variant must be one of ['large']" in problem


def test_the_claims_file_names_its_bad_entries(tmp_path, monkeypatch, toy_repo):
    root, cfg = toy_repo()
    path = root / "docs" / "claims.toml"
    path.write_text(path.read_text().replace('"holds"', '"mostly"')
                    .replace(":small", ":big") + "\n")
    found = claims.problems(root)
    where = f"{path}: claim 1 ('It learns')"
    assert f"{where}: status must be one of ['holds', 'does not hold', 'unresolved'], " \
           "got 'mostly'" in found
    assert f"{where}: page docs/toy.md does not exist" in found
    assert any(p.startswith(f"{where}: run {cfg}:big: toy.py has no variant 'big'")
               for p in found)
    path.write_text("[[claim]]\npaper = 1\n")
    assert claims.problems(root) == [f"{path}: claim 1 ('?') lacks paper, claim, number, "
                                     "status, ours, run, page"]
    path.write_text("not toml [")
    (problem,) = claims.problems(root)
    assert problem.startswith(f"{path}: not a claims file")


def test_a_marker_naming_a_missing_part_says_which_parts_there_are(
        tmp_path, monkeypatch, capsys, toy_repo, run_and_store):
    root, cfg = toy_repo()
    run_and_store(root, cfg)
    (root / "docs" / "toy.md").write_text(
        '# Toy\n<!-- stored: toy-small part="No such table" -->\n<!-- /stored -->\n')
    (problem,) = [p for p in stored.check(root) if "toy.md" in p and "part" in p]
    assert "stored run toy-small has no part 'No such table' (its headings: " in problem


def test_a_page_includes_a_file_whole_or_one_part_of_it(tmp_path):
    root = tmp_path
    (root / "docs").mkdir()
    (root / "NOTES.md").write_text(
        "# Notes\n\n## One\n\nfirst\n\n```\n# a comment, not a heading\n```\n\n"
        "### One, below\n\nkept\n\n## Two\n\nsecond\n")
    page = root / "docs" / "p.md"
    page.write_text('<!-- include: NOTES.md part="One" -->\n<!-- /include -->\n'
                    "<!-- include: NOTES.md -->\n<!-- /include -->\n")
    text = stored.render_page(root, page, page.read_text())
    part, whole = text.split("<!-- /include -->")[:2]
    assert part.split("-->\n", 1)[1] == (
        "## One\n\nfirst\n\n```\n# a comment, not a heading\n```\n\n"
        "### One, below\n\nkept\n")
    assert whole.split("-->\n", 1)[1] == (root / "NOTES.md").read_text()
    for marker, says in [('NOTES.md part="Three"', "NOTES.md has no part 'Three' (its "
                          "headings: Notes; One; One, below; Two)"),
                         ("../NOTES.md", "names no file of the repository"),
                         ("MISSING.md", "names no file of the repository")]:
        page.write_text(f"<!-- include: {marker} -->\n<!-- /include -->\n")
        with pytest.raises(stored.StoredError, match=re.escape(says)):
            stored.render_page(root, page, page.read_text())


def test_store_refuses_a_run_without_provenance(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"ebm_jax": {"recipe": "x"}}))
    assert stored.main(["--root", str(tmp_path), "store", str(run)]) == 2
    assert not (tmp_path / "docs" / "results").exists()


def test_shipped_configs_run_by_short_name_outside_a_clone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", "socl_table1_ablation:tiny"]) == 0
    assert "tracking/socl_table1_ablation.py:tiny" in capsys.readouterr().out
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "socl_table1_ablation.py" in out and "table1_toy1d.py" in out
    assert cli.main(["show", "no_such_config:quick"]) == 2
    assert "neither" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.startswith(f"ebm-jax {ebm_jax.__version__} ")


def test_the_package_data_lists_every_config():
    """pyproject's package-data globs take every config file into the wheel."""
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["ebm_jax"]
    root = ROOT / "experiments"
    shipped = {p for g in globs for p in (ROOT / "ebm_jax").glob(g)}
    wanted = {ROOT / "ebm_jax" / p.relative_to(ROOT) for p in root.rglob("*")
              if p.is_file() and p.suffix in (".py", ".json")}
    assert wanted and wanted <= shipped
    assert (ROOT / "ebm_jax" / "experiments").is_symlink()


def test_a_run_from_cached_stages_gives_no_wall_time_unless_the_whole_runs_is_given(
        tmp_path, monkeypatch, capsys, toy_repo, run_and_store):
    root, cfg = toy_repo()
    run_and_store(root, cfg)  # trains the stage
    times = root / "experiments" / "wall_times.json"
    first = json.loads(times.read_text())
    out = tmp_path / "out2"
    assert cli.main(["run", f"{cfg}:small", "--workdir", str(tmp_path / "w"), "--out",
                     str(out), "--no-progress"]) == 0
    p = json.loads((out / "results.json").read_text())["ebm_jax"]["provenance"]
    assert p["stages"] == {"entered": 1, "reused": 1}
    lines = []
    stored.store(root, out, "toy-small", log=lines.append)
    assert "reused 1 finished stage(s)" in lines[0]
    assert json.loads(times.read_text()) == first  # not a whole run's time
    (root / "docs" / "toy.md").write_text("<!-- stored: toy-small -->\n<!-- /stored -->\n")
    stored.sync(root)
    assert "a whole run was not timed" in (root / "docs" / "toy.md").read_text()
    stored.store(root, out, "toy-small", measured=(1234.0, "the first run's log"))
    (entry,) = json.loads(times.read_text())[str(cfg)]["small"]
    assert entry["seconds"] == 1234.0 and "the first run's log" in entry["note"]
    stored.sync(root)
    assert "21 min on" in (root / "docs" / "toy.md").read_text()


def test_a_compare_block_pairs_two_stored_runs(
        tmp_path, monkeypatch, capsys, toy_repo, run_and_store):
    root, cfg = toy_repo()
    run_and_store(root, cfg)
    (root / "docs" / "toy.md").write_text(
        "<!-- compare: toy-small a toy-small b -->\n<!-- /compare -->\n")
    with pytest.raises(stored.StoredError) as error:
        stored.sync(root)
    assert str(root / "docs" / "toy.md") in str(error.value)
    (root / "docs" / "toy.md").write_text("<!-- compare: toy-small a -->\n<!-- /compare -->\n")
    with pytest.raises(stored.StoredError, match="needs STORED_A RUN_A STORED_B RUN_B"):
        stored.sync(root)


def test_every_stored_file_is_in_the_repository():
    """A stored run that git ignores is missing from every clone (the pages' blocks
    would then name files that are not there)."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git clone")
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "--stdin"],
        input="\n".join(str(p.relative_to(ROOT)) for p in (ROOT / stored.RESULTS).rglob("*")
                        if p.is_file()), capture_output=True, text=True).stdout.split()
    assert not ignored, f"git ignores stored files: {ignored[:5]}"


def test_every_table_is_stored_generated_or_labelled(tmp_path, monkeypatch, toy_repo):
    """A table outside the generated blocks says what it is: a hand copy names the
    runs that rerun it (and check fails on one whose variant is gone), a reference
    table says it holds no result; `check` names an unlabelled one by page and line."""
    root, cfg = toy_repo()
    page = root / "docs" / "toy.md"
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    page.write_text(f"# Toy\n\nText.\n\n{table}\n```\n| in a fence |\n```\n\n"
                    "    | indented code |\n")
    (problem,) = [p for p in stored.check(root) if "toy.md" in p]
    assert problem.startswith("docs/toy.md:5: a table that is neither a stored run nor "
                              "labelled")
    page.write_text(f"# Toy\n\n<!-- copy: {cfg}:small -->\n<!-- /copy -->\n\n{table}\n"
                    f"Then another.\n\n{table}")
    (problem,) = [p for p in stored.check(root) if "neither" in p]
    assert problem.startswith("docs/toy.md:12:")  # one label covers one table
    page.write_text(f"# Toy\n\n<!-- copy: {cfg}:small -->\n<!-- /copy -->\n\n{table}\n"
                    f"{stored.REFERENCE}\n\n{table}\n## Next\n\n{stored.REFERENCE}\n\n"
                    f"### Deeper\n\n{table}")
    (problem,) = [p for p in stored.check(root) if "neither" in p]
    assert problem.startswith("docs/toy.md:22:")  # a heading ends a label's reach
    page.write_text(f"# Toy\n\n- a list item:\n\n  | a | b |\n  |---|---|\n")
    (problem,) = [p for p in stored.check(root) if "neither" in p]
    assert problem.startswith("docs/toy.md:5:")  # a table indented in a list
    page.write_text(f"# Toy\n\n<!-- copy: {cfg}:small -->\n<!-- /copy -->\n\n{table}")
    stored.sync(root)
    assert f"`ebm-jax run {cfg}:small` reruns it" in page.read_text()
    assert stored.copies(root) == {"docs/toy.md": 1}
    assert not [p for p in stored.check(root) if "toy.md" in p]
    page.write_text(f"# Toy\n\n<!-- copy: {cfg}:large -->\n<!-- /copy -->\n\n{table}")
    (problem,) = [p for p in stored.check(root) if "toy.md" in p]
    assert f"<!-- copy: {cfg}:large -->: {cfg}:large no longer loads" in problem
    page.write_text(f"<!-- copy: python benchmarks/none.py -->\n<!-- /copy -->\n\n{table}")
    (problem,) = [p for p in stored.check(root) if "toy.md" in p]
    assert "names no benchmark of benchmarks/" in problem


def test_a_run_from_cached_stages_alone_is_a_lower_bound_in_list_not_in_the_readme(
        tmp_path, monkeypatch, capsys, toy_repo):
    """Where a variant's only stored run reused finished stages, its time is recorded
    as a lower bound: `ebm-jax list` prints "over ...", the README's column leaves it
    out; a whole run's time stored later replaces it."""
    from ebm_jax.config_catalog import wall_time_text, wall_times
    from ebm_jax.report.experiments_table import time_cell

    root, cfg = toy_repo()
    workdir = tmp_path / "w"
    assert cli.main(["run", f"{cfg}:small", "--workdir", str(workdir), "--out",
                     str(tmp_path / "first"), "--no-progress"]) == 0  # trains the stage
    out = tmp_path / "second"
    assert cli.main(["run", f"{cfg}:small", "--workdir", str(workdir), "--out", str(out),
                     "--no-progress"]) == 0
    lines = []
    stored.store(root, out, "toy-small", log=lines.append)
    assert "recorded in wall_times.json as a lower bound" in lines[0]
    (entry,) = wall_times(root / "experiments")[str(cfg)]["small"]
    assert entry["reused_stages"] == 1 and "reused 1 finished stage(s)" in entry["note"]
    assert wall_time_text([entry]).startswith("over ")
    assert "reused 1 finished stage(s)" in wall_time_text([entry])
    assert "not measured" in time_cell([str(cfg)], {str(cfg): {"quick": [entry]}})
    stored.store(root, tmp_path / "first", "toy-small")  # the whole run replaces it
    (entry,) = wall_times(root / "experiments")[str(cfg)]["small"]
    assert "reused_stages" not in entry


@pytest.mark.parametrize("seconds, recorded", [
    (0.0432, 0.043), (0.4, 0.4), (0.98765, 0.99), (1.04, 1.0), (5308.44, 5308.4)])
def test_a_run_of_milliseconds_records_a_wall_time_above_zero(seconds, recorded):
    """A run of cached stages alone can finish in 40 ms: rounded to 0.1 s it read as
    0.0 s, which wall_times.json refuses (a time must be > 0), so storing it failed on
    a fast machine."""
    from ebm_jax.config_catalog import _is_wall_time

    got = provenance.wall_seconds(100.0, 100.0 + seconds)
    assert got == pytest.approx(recorded, rel=1e-9) and _is_wall_time(got)


def test_todo_lists_the_copies_left_with_the_runs_that_replace_them(
        tmp_path, monkeypatch, capsys, toy_repo):
    """`stored todo`: a line per set of runs, most tables first, with each run's
    measured wall time where wall_times.json has one."""
    root, cfg = toy_repo()
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    copy = f"<!-- copy: {cfg}:small -->\n<!-- /copy -->\n\n{table}\n"
    (root / "docs" / "toy.md").write_text(f"# Toy\n\n{copy}## Again\n\n{copy}")
    bench = "<!-- copy: python benchmarks/b.py -->\n<!-- /copy -->\n\n"
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "b.py").write_text("")
    (root / "docs" / "bench.md").write_text(f"# Bench\n\n{bench}{table}")
    assert stored.todo(root) == [
        f"2 tables (docs/toy.md 2): `ebm-jax run {cfg}:small`, not measured",
        "1 table (docs/bench.md 1): `python benchmarks/b.py`"]
    (root / "experiments" / "wall_times.json").write_text(json.dumps({str(cfg): {"small": [
        {"seconds": 600.0, "machine": "2 CPU cores", "date": "2026-11-29",
         "how": "docs/results/toy-small"}]}}))
    assert stored.todo(root)[0].endswith(f"`ebm-jax run {cfg}:small`, 10 min (2 CPU cores)")
    assert stored.main(["--root", str(root), "todo"]) == 0
    assert "2 tables (docs/toy.md 2)" in capsys.readouterr().out
    (root / "docs" / "toy.md").write_text("# Toy\n")
    (root / "docs" / "bench.md").write_text("# Bench\n")
    assert stored.main(["--root", str(root), "todo"]) == 0
    assert capsys.readouterr().out == "no hand copies left\n"


def test_a_marker_quoted_inside_a_line_is_text(tmp_path, monkeypatch, toy_repo):
    """A page that explains the markers quotes them in a line (a code block's comment);
    only a marker on a line of its own is filled in."""
    root, _ = toy_repo()
    page = root / "docs" / "toy.md"
    page.write_text("# Toy\n\n```bash\n# on the page: <!-- stored: gone -->\n"
                    "#              <!-- /stored -->\n```\n")
    assert stored.render_page(root, page, page.read_text()) == page.read_text()
    page.write_text("# Toy\n\n<!-- stored: gone -->\n<!-- /stored -->\n")
    with pytest.raises(stored.StoredError, match="gone"):
        stored.render_page(root, page, page.read_text())


def test_a_run_whose_figure_did_not_come_back_is_stored_saying_so(
        tmp_path, monkeypatch, capsys, toy_repo):
    """A run made on a lent machine whose figures were not brought back: storing it
    names the missing file; `without` stores the rest, and results.json says which
    figures are missing and why; naming results.md (or a file the run does not list)
    is refused."""
    root, cfg = toy_repo()
    out = tmp_path / "out"
    assert cli.main(["run", f"{cfg}:small", "--workdir", str(tmp_path / "w"), "--out",
                     str(out), "--no-progress"]) == 0
    capsys.readouterr()
    (out / "toy.png").unlink()
    with pytest.raises(stored.StoredError, match="lists toy.png among its files"):
        stored.store(root, out, "toy-small")
    for bad in (("results.md",), ("other.png",)):
        with pytest.raises(stored.StoredError, match="--without must name figures"):
            stored.store(root, out, "toy-small", without=(bad, "not copied"))
    target = stored.store(root, out, "toy-small", without=(("toy.png",), "not copied"))
    data = json.loads((target / "results.json").read_text())["ebm_jax"]
    assert data["stored_without"] == {"files": ["toy.png"], "why": "not copied"}
    assert "toy.png" not in data["files"] and not (target / "toy.png").exists()
    assert sorted(p.name for p in target.iterdir()) == ["results.json", "results.md"]


def _on_a_gpu(target):
    """The stored run at `target` as if made on one H200."""
    path = target / "results.json"
    data = json.loads(path.read_text())
    data["ebm_jax"]["provenance"]["machine"].update(
        backend="gpu", accelerators=["NVIDIA H200"], device_count=1)
    path.write_text(json.dumps(data))
    return data["ebm_jax"]["provenance"]


def test_the_gpu_table_takes_a_stored_runs_gpu_from_its_provenance_and_misses_none(
        tmp_path, monkeypatch, capsys, toy_repo, run_and_store):
    """A stored run made on a GPU must be a row of the one table of GPU runs; its
    row's GPU, JAX version, date and command come from its provenance."""
    root, cfg = toy_repo()
    target = run_and_store(root, cfg)
    p = _on_a_gpu(target)
    runs = root / gpu_runs.RUNS
    (root / "docs" / "toy.md").write_text("# Toy\n")
    assert stored.check(root) == [
        f"{runs}: stored run toy-small was made on 1 x NVIDIA H200 but the table of GPU "
        'runs does not list it; add `[[run]]` with `stored = "toy-small"`']
    runs.write_text('[[run]]\nwhat = "The toy"\nstored = "toy-small"\nfigures = "fast"\n\n'
                    '[[run]]\nwhat = "Its tests"\ngpu = "one NVIDIA H100 80GB"\n'
                    'jax = "0.11.2"\ndate = "by 2026-11-26"\ncommand = "pytest docs"\n'
                    'figures = "3 passed"\n')
    (root / "docs" / "gpu.md").write_text("# GPU\n\n<!-- gpu: runs -->\n<!-- /gpu -->\n")
    assert stored.sync(root) == ["docs/gpu.md"] and stored.check(root) == []
    page = (root / "docs" / "gpu.md").read_text()
    assert (f"| The toy | one NVIDIA H200 | {p['versions']['jax']} | {p['started'][:10]} | "
            f"`ebm-jax run {cfg}:small` | fast | stored run `docs/results/toy-small` |"
            in page)
    assert ("| Its tests | one NVIDIA H100 80GB | 0.11.2 | by 2026-11-26 | `pytest docs` | "
            "3 passed | by hand, before provenance |" in page)
    # a run listed as stored must have been made on a GPU
    data = json.loads((target / "results.json").read_text())
    data["ebm_jax"]["provenance"]["machine"]["accelerators"] = []
    (target / "results.json").write_text(json.dumps(data))
    (problem,) = gpu_runs.problems(root)
    assert problem.startswith(f"{runs}: run 1 ('The toy'): stored run toy-small was "
                              "made on ")
    assert problem.endswith("not a GPU")


@pytest.mark.parametrize("entry, says", [
    ('what = "x"\nfigures = "y"\ngpu = "one GPU"\n',
     "run 1 ('x') lacks jax, date, command (a run names `stored = NAME`, or gpu, jax, "
     "date, command recorded by hand)"),
    ('what = "x"\nfigures = "y"\nstored = "toy-small"\ngpu = "one GPU"\n',
     "run 1 ('x') is stored run 'toy-small', whose provenance gives gpu; drop them"),
    ('what = "x"\nfigures = "y"\ngpu = "g"\njax = "0.11"\ndate = "Nov 26"\n'
     'command = "pytest docs"\n', "date must be YYYY-MM-DD or 'by YYYY-MM-DD', got 'Nov 26'"),
    ('what = "x"\nfigures = "y"\ngpu = "g"\njax = "0.11"\ndate = "2026-11-26"\n'
     'command = "ebm-jax run CFG:large"\n', "command 'ebm-jax run CFG:large': "),
    ('what = "x"\nfigures = "y"\ngpu = "g"\njax = "0.11"\ndate = "2026-11-26"\n'
     'command = "ebm-jax run CFG:small --config.no_such=1"\n', "no_such"),
    ('what = "x"\nfigures = "y"\ngpu = "g"\njax = "0.11"\ndate = "2026-11-26"\n'
     'command = "bash benchmarks/gone.sh OUT_DIR"\n', "names no script of benchmarks/"),
    ('what = "x"\nfigures = "y"\ngpu = "g"\njax = "0.11"\ndate = "2026-11-26"\n'
     'command = "pytest tests/gone"\n', "no tests/gone in the repository"),
    ('what = "x"\nfigures = "y"\ngpu = "g"\njax = "0.11"\ndate = "2026-11-26"\n'
     'command = "make it"\n', "is none of `ebm-jax run NAME:VARIANT`"),
])
def test_the_gpu_table_names_its_bad_entries(tmp_path, monkeypatch, entry, says, toy_repo):
    root, cfg = toy_repo()
    runs = root / gpu_runs.RUNS
    runs.write_text("[[run]]\n" + entry.replace("CFG", str(cfg)))
    (problem,) = gpu_runs.problems(root)
    assert problem.startswith(f"{runs}: ") and says.replace("CFG", str(cfg)) in problem
    runs.write_text("not toml [")
    (problem,) = gpu_runs.problems(root)
    assert problem.startswith(f"{runs}: not a table of GPU runs")


def test_a_benchmarks_command_leaves_out_where_one_machine_wrote_its_report():
    from ebm_jax.report.stored_runs import run_command

    bench = {"benchmark": {"script": "benchmarks/b.py", "args": [
        "--steps", "4", "--out", "/tmp/o/t1", "--rounds", "3"]}}
    assert run_command(bench) == "python benchmarks/b.py --steps 4 --rounds 3"
    bench["benchmark"]["args"][3] = "results/bench"  # a path relative to the clone stays
    assert run_command(bench) == ("python benchmarks/b.py --steps 4 --out results/bench "
                                  "--rounds 3")
