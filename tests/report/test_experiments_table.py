"""The README's table of experiments: generated from docs/experiments.toml and the
measured wall times `ebm-jax list` prints, every config in exactly one row."""

import json

import pytest

from ebm_jax.report import experiments_table, stored
from ebm_jax.report.provenance import StoredError


def _repo(tmp_path, rows: str, times: dict | None = None):
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "experiments" / "fam").mkdir(parents=True)
    for name in ("a.py", "b.py", "c.py"):
        (root / "experiments" / "fam" / name).write_text(
            "VARIANTS = ('quick',)\n\n\ndef get_config(v):\n    return None\n")
    (root / "docs" / "page.md").write_text("# page\n")
    (root / "docs" / "experiments.toml").write_text(rows)
    (root / "experiments" / "wall_times.json").write_text(json.dumps(times or {}))
    (root / "README.md").write_text("<!-- experiments: README -->\n<!-- /experiments -->\n")
    (root / "docs" / "claims.toml").write_text(  # the check reads it too
        f'[[claim]]\npaper = "P"\nclaim = "c"\nnumber = "1"\nstatus = "holds"\n'
        f'ours = "1"\nrun = "{root / "experiments" / "fam" / "a.py"}:quick"\n'
        'page = "page.md"\n')
    return root


ROW = '[[row]]\nconfigs = {configs}\npaper = "P, Table 1"\npage = "page.md"\n{extra}'


def _entry(seconds, cpu="Intel Xeon"):
    return {"seconds": seconds, "machine": f"2 CPU cores, {cpu}", "date": "2026-11-29",
            "how": "test"}


def test_the_time_column_is_the_catalogues_own_measurement(tmp_path):
    rows = (ROW.format(configs='["fam/a.py"]', extra="")
            + ROW.format(configs='["fam/[bc].py"]', extra='note = "share a\'s stages"\n'))
    times = {"fam/a.py": {"quick": [_entry(300.0), _entry(480.0, "AMD EPYC")],
                          "tiny": [_entry(30.0)]},
             "fam/b.py": {"quick": [_entry(1500.0)]}}
    root = _repo(tmp_path, rows, times)
    assert stored.sync(root) == ["README.md"]
    lines = (root / "README.md").read_text().splitlines()
    a, bc = lines[3], lines[4]
    # the quick variant only (not tiny), over every machine that measured it
    assert "| 5-8 min (Intel Xeon, AMD EPYC) |" in a and "[page](docs/page.md)" in a
    # a glob lists its configs; one not measured is named, and the note follows
    assert "`experiments/fam/b.py`, `experiments/fam/c.py`" in bc
    assert "25 min (Intel Xeon); c not measured whole; share a's stages" in bc
    assert stored.check(root) == []
    # a new measurement changes the table, and the check says the page is stale
    times["fam/a.py"]["quick"].append(_entry(7200.0))
    (root / "experiments" / "wall_times.json").write_text(json.dumps(times))
    assert any("README.md" in p and "out of date" in p for p in stored.check(root))
    stored.sync(root)
    assert "5 min - 2.0 h (Intel Xeon, AMD EPYC)" in (root / "README.md").read_text()


def test_a_config_no_row_lists_is_named(tmp_path):
    root = _repo(tmp_path, ROW.format(configs='["fam/a.py", "fam/b.py"]', extra=""))
    with pytest.raises(StoredError, match=r"no row lists fam/c\.py"):
        experiments_table.load(root)
    problems = stored.check(root)
    assert any("experiments.toml" in p and "fam/c.py" in p for p in problems)


@pytest.mark.parametrize("rows, message", [
    (ROW.format(configs='["fam/a.py", "fam/x.py"]', extra=""), r"'fam/x\.py' names no config"),
    (ROW.format(configs='["fam/*.py"]', extra="") + ROW.format(configs='["fam/a.py"]', extra=""),
     r"row 2: fam/a\.py is in row 1 already"),
    (ROW.format(configs='["fam/*.py"]', extra="").replace("page.md", "gone.md"),
     r"page docs/gone\.md does not exist"),
    (ROW.format(configs='"fam/a.py"', extra=""), "configs must be a list"),
    ('[[row]]\nconfigs = ["fam/*.py"]\npage = "page.md"\n', "lacks paper"),
    ("[[row]\n", "not a table of experiments"),
])
def test_a_bad_rows_file_is_one_line_naming_it(tmp_path, rows, message):
    root = _repo(tmp_path, rows)
    with pytest.raises(StoredError, match=message) as error:
        stored.sync(root)
    assert str(root / "docs" / "experiments.toml") in str(error.value)
    assert "\n" not in str(error.value)


def test_the_table_is_the_readmes_alone(tmp_path):
    root = _repo(tmp_path, ROW.format(configs='["fam/*.py"]', extra=""))
    (root / "docs" / "page.md").write_text("<!-- experiments: page -->\n<!-- /experiments -->\n")
    with pytest.raises(StoredError, match="the README's"):
        stored.sync(root)
