import morphcache


def test_version() -> None:
    assert morphcache.__version__
