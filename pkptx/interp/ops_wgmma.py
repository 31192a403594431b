"""wgmma: filled in below."""
TABLE = {}
