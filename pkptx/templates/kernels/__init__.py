"""One operator per module: a Config, ``build(config) -> Kernel`` and a numpy ``reference``."""
