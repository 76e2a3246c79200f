from dataclasses import dataclass, field

import pytest

from stages.common.params import from_dict, load_section


@dataclass(frozen=True)
class Inner:
    ratio: float = 0.5


@dataclass(frozen=True)
class Outer:
    name: str = "x"
    count: int = 1
    langs: tuple[str, ...] = ("en",)
    inner: Inner = field(default_factory=Inner)
    optional: int | None = None


def test_builds_nested_dataclass_and_coerces_lists():
    p = from_dict(Outer, {"count": 3, "langs": ["zh", "en"], "inner": {"ratio": 1}})
    assert p == Outer(count=3, langs=("zh", "en"), inner=Inner(ratio=1.0))


@pytest.mark.parametrize("data, key", [
    ({"cuont": 3}, "cuont"),
    ({"inner": {"ratoi": 0.1}}, "inner.ratoi"),
])
def test_unknown_key_is_named(data, key):
    with pytest.raises(ValueError, match=f"unknown param '{key}'"):
        from_dict(Outer, data)


@pytest.mark.parametrize("data, key", [
    ({"count": "3"}, "count"),
    ({"count": True}, "count"),
    ({"langs": "en"}, "langs"),
    ({"inner": {"ratio": "high"}}, "inner.ratio"),
    ({"optional": "x"}, "optional"),
])
def test_wrong_type_is_named(data, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        from_dict(Outer, data)


def test_missing_section(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("other: {}\n")
    with pytest.raises(ValueError, match="missing section 'clean'"):
        load_section("clean", Outer, path)
