from tests.helpers.gpu import gpu  # noqa: F401  (the shared GPU fixture)
