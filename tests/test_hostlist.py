import pytest

from slurm_attrib.hostlist import expand


@pytest.mark.parametrize(
    "expr,hosts",
    [
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("a,b a", ["a", "b"]),
        ("", []),
    ],
)
def test_expand(expr, hosts):
    assert expand(expr) == hosts


@pytest.mark.parametrize("bad", ["gpu[01-", "gpu[3-1]", "gpu]1["])
def test_malformed_is_an_error(bad):
    with pytest.raises(ValueError):
        expand(bad)
