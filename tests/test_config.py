"""Config loading and typed overrides (ebm_jax.config)."""

import dataclasses

import pytest

from ebm_jax.config import (Checks, ConfigError, apply_overrides, config_identity, load_config,
                            split_spec)


@dataclasses.dataclass(frozen=True)
class Cfg:
    epochs: int = 3
    lr: float = 0.1
    name: str = "a"
    flag: bool = False
    methods: tuple[str, ...] = ("nce",)
    sigmas: tuple[float, float] = (0.1, 0.8)
    limit: int | None = None
    seed: int = 0

    def __post_init__(self):
        c = Checks(self)
        c.int_range("epochs", 1, 100)
        c.positive("lr")
        c.each_in("methods", ("nce", "nce+", "ml-is"))
        c.seed()


def test_good_overrides_are_typed():
    cfg = apply_overrides(Cfg(), ["epochs=7", "--config.lr=1e-3", "name=b", "flag=true",
                                  "methods=nce,nce+", "sigmas=0.2,1.6", "limit=5"])
    assert cfg == Cfg(7, 1e-3, "b", True, ("nce", "nce+"), (0.2, 1.6), 5)
    assert apply_overrides(cfg, ["limit=none"]).limit is None
    assert apply_overrides(cfg, ["flag=0"]).flag is False


@pytest.mark.parametrize("override,match", [
    ("epoch=3", r"no field 'epoch' \(did you mean epochs\?\)"),
    ("epochs=three", r"--config.epochs must be an integer, got 'three'"),
    ("epochs=2.5", r"--config.epochs must be an integer"),
    ("lr=fast", r"--config.lr must be a number"),
    ("lr=nan", r"--config.lr must be a finite number"),
    ("flag=maybe", r"--config.flag must be true or false"),
    ("sigmas=0.1", r"--config.sigmas needs 2 comma-separated values"),
    ("limit=x", r"--config.limit must be an integer"),
    ("epochs", r"must be --config.FIELD=VALUE"),
])
def test_bad_overrides_name_the_field(override, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(Cfg(), [override])


@pytest.mark.parametrize("override,match", [
    ("epochs=0", r"--config.epochs must be an integer in \[1, 100\], got 0"),
    ("epochs=101", r"--config.epochs must be an integer in \[1, 100\]"),
    ("lr=-1", r"--config.lr must be a finite number > 0"),
    ("methods=nce,sm", r"--config.methods must be a non-empty list drawn from"),
    ("seed=-1", r"--config.seed must be an integer in \[0, 2147483647\]"),
    ("seed=4294967296", r"--config.seed must be an integer in"),
])
def test_out_of_range_values_fail_in_post_init(override, match):
    with pytest.raises(ConfigError, match=match):
        apply_overrides(Cfg(), [override])
    # the same check for Python users, who build the dataclass directly
    field, value = override.split("=")
    typed = {"epochs": int, "lr": float, "seed": int}.get(field)
    value = typed(value) if typed else tuple(value.split(","))
    with pytest.raises(ConfigError, match=match):
        Cfg(**{field: value})


CONFIG = '''"""ebm-jax run {path}:small

A test config.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class C:
    n: int = 1


VARIANTS = ("small", "big")


def get_config(variant):
    return C(n={{"small": 1, "big": 10}}[variant])
'''


FLOATS = '''"""ebm-jax run {path}:ints

A config whose float fields are written as ints.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Inner:
    scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class C:
    n: int = 1
    side: float = 0.5
    sigmas: tuple[float, ...] = (0.5,)
    flag: bool = False
    inner: Inner = Inner()


VARIANTS = ("ints", "floats")


def get_config(variant):
    if variant == "ints":
        return C(n=2, side=2, sigmas=(1, 2), flag=True, inner=Inner(scale=3))
    return C(n=2, side=2.0, sigmas=(1.0, 2.0), flag=True, inner=Inner(scale=3.0))
'''


def test_a_float_field_written_as_an_int_is_the_same_setting(tmp_path):
    """A file's `side=2` is the setting (and the identity) of `side=2.0` and of the
    override `--config.side=2`; an int field and a bool stay as they are."""
    path = tmp_path / "floats.py"
    path.write_text(FLOATS.format(path=path))
    ints, floats = load_config(f"{path}:ints"), load_config(f"{path}:floats")
    assert repr(ints.side) == "2.0" and repr(ints.sigmas) == "(1.0, 2.0)"
    assert repr(ints.inner.scale) == "3.0" and repr(ints.n) == "2" and ints.flag is True
    overridden = load_config(f"{path}:floats", ["side=2", "sigmas=1,2"])
    assert config_identity(ints) == config_identity(floats) == config_identity(overridden)


def test_load_config_by_path_and_variant(tmp_path):
    path = tmp_path / "exp.py"
    path.write_text(CONFIG.format(path=path))
    assert load_config(str(path)).n == 1  # the first variant is the default
    assert load_config(f"{path}:big").n == 10
    assert load_config(f"{path}:big", ["n=3"]).n == 3
    assert split_spec(f"{path}:big") == (path, "big")
    with pytest.raises(ConfigError, match=r"variant must be one of \['small', 'big'\], "
                       r"got 'huge'"):
        load_config(f"{path}:huge")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "missing.py"))
    with pytest.raises(ConfigError, match="must be a .py file"):
        load_config(str(tmp_path / "exp.txt"))
    bad = tmp_path / "bad.py"
    bad.write_text("VARIANTS = ('a',)\ndef get_config(v):\n    return 1/0\n")
    with pytest.raises(ConfigError, match=rf"config file {bad}:3: get_config\('a'\) "
                       r"failed: ZeroDivisionError: division by zero") as e:
        load_config(str(bad))
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    with pytest.raises(ConfigError, match="failed to load: SyntaxError"):
        load_config(str(broken))
    novariants = tmp_path / "nov.py"
    novariants.write_text("def get_config(v):\n    return 1\n")
    with pytest.raises(ConfigError, match="defines no VARIANTS"):
        load_config(str(novariants))


def test_errors_inside_a_config_file_name_its_file_and_line(tmp_path):
    """A typo'd field or a missing import in a user-edited get_config was a raw
    traceback; now one ConfigError naming the file and line."""
    import re

    typo = tmp_path / "typo.py"
    typo.write_text(CONFIG.format(path=typo).replace("C(n=", "C(m="))
    line = next(i for i, t in enumerate(typo.read_text().splitlines(), 1) if "C(m=" in t)
    with pytest.raises(ConfigError, match=re.escape(f"config file {typo}:{line}: "
                                                    "get_config('small') failed: TypeError")):
        load_config(str(typo))
    noimport = tmp_path / "noimport.py"
    noimport.write_text("VARIANTS = ('a',)\n\n\ndef get_config(v):\n"
                        "    return dataclasses.replace(v)\n")
    with pytest.raises(ConfigError, match=re.escape(f"{noimport}:5: get_config('a') failed: "
                                                    "NameError")):
        load_config(str(noimport))
    toplevel = tmp_path / "toplevel.py"
    toplevel.write_text("import math\nVARIANTS = ('a',)\nX = math.tau(\n")
    with pytest.raises(ConfigError, match=re.escape(f"{toplevel}:3 failed to load: "
                                                    "SyntaxError")):
        load_config(str(toplevel))


def test_cli_names_the_config_line_in_one_line(tmp_path, capsys):
    from ebm_jax.cli import main

    bad = tmp_path / "bad.py"
    bad.write_text("VARIANTS = ('a',)\ndef get_config(v):\n    return undefined_name\n")
    assert main(["run", f"{bad}:a", "--workdir", str(tmp_path / "w"),
                 "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{bad}:3: get_config('a') failed: NameError" in err


def test_tuples_of_tuples_take_semicolon_groups():
    @dataclasses.dataclass(frozen=True)
    class Sets:
        sigma_sets: tuple[tuple[float, float, float], ...] = ()
        pairs: tuple[tuple[str, float], ...] = ()

    cfg = apply_overrides(Sets(), ["sigma_sets=0.1,0.2,0.4;0.05,0.1,0.2", "pairs=nce,0.5"])
    assert cfg.sigma_sets == ((0.1, 0.2, 0.4), (0.05, 0.1, 0.2))
    assert cfg.pairs == (("nce", 0.5),)
    with pytest.raises(ConfigError, match="needs 3 comma-separated values"):
        apply_overrides(Sets(), ["sigma_sets=0.1,0.2;0.3,0.4,0.5"])


@dataclasses.dataclass(frozen=True)
class Inner:
    steps: int = 10
    sigmas: tuple[float, ...] = (0.05, 0.5)

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"Inner.steps must be an integer >= 1, got {self.steps}")


@dataclasses.dataclass(frozen=True)
class Outer:
    inner: Inner = Inner()
    name: str = "a"


def test_a_field_holding_settings_takes_dotted_overrides():
    cfg = apply_overrides(Outer(), ["--config.inner.steps=3", "inner.sigmas=0.1,0.2",
                                    "name=b"])
    assert cfg == Outer(Inner(3, (0.1, 0.2)), "b")
    with pytest.raises(ConfigError, match=r"--config.inner.step: Inner has no field "
                                          r"'step' \(did you mean inner.steps\?\)"):
        apply_overrides(Outer(), ["inner.step=3"])
    with pytest.raises(ConfigError, match=r"--config.inner.steps must be an integer"):
        apply_overrides(Outer(), ["inner.steps=x"])
    with pytest.raises(ConfigError, match=r"Inner.steps must be an integer >= 1, got 0"):
        apply_overrides(Outer(), ["inner.steps=0"])
    with pytest.raises(ConfigError, match=r"--config.name.x: name is not a group"):
        apply_overrides(Outer(), ["name.x=1"])


def test_a_field_added_at_its_old_behaviour_stays_out_of_the_identity():
    """A field added later with ADDED_FIELD: at its default the identity is what it was
    without the field (stored results stay fresh); any other value is another identity."""
    import dataclasses

    from ebm_jax.config import ADDED_FIELD, config_identity

    @dataclasses.dataclass(frozen=True)
    class Before:
        steps: int = 10

    @dataclasses.dataclass(frozen=True)
    class After:
        steps: int = 10
        chain: str = dataclasses.field(default="auto", metadata=ADDED_FIELD)

    assert config_identity(After()) == config_identity(Before())
    assert config_identity(After(chain="fused")) != config_identity(Before())
    assert config_identity(After(steps=11)) == config_identity(Before(steps=11))
