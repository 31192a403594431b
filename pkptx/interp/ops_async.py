"""Bulk asynchronous copies (PTX ISA 9.7.9.25): filled in below."""
TABLE = {}
