"""The one timeout setting: how long any bounded wait of pkptx, on the host or on the device, waits.

Seconds everywhere, as a float. The value a wait uses is the first of: the call's own ``timeout=``,
its World's (``World(timeout=...)``), and the default, which ``PKPTX_TIMEOUT_S`` sets (read when asked,
so a change takes effect for worlds made afterwards) and is otherwise :data:`DEFAULT_TIMEOUT_S`.
Device-side waits take nanoseconds as a kernel argument: :func:`to_ns` converts.
"""
from __future__ import annotations

import numbers
import os

from ..errors import SettingError

ENV = "PKPTX_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 1e6     # ~11.6 days: far above any sane wait, far below u64 %globaltimer overflow


_RANGE = f"a number of seconds > 0 and <= {MAX_TIMEOUT_S:g}"


def check_timeout_s(value, what: str = "timeout") -> float:
    """``value`` as seconds (float), or a SettingError naming ``what``, the value and the legal range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= MAX_TIMEOUT_S:
        raise SettingError(f"{what}={value!r}: expected {_RANGE}")
    return float(value)


def default_timeout_s() -> float:
    """``PKPTX_TIMEOUT_S`` when set (seconds), else :data:`DEFAULT_TIMEOUT_S`."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S
    try:
        return check_timeout_s(float(text))
    except (ValueError, SettingError):
        raise SettingError(f"{ENV}={text!r} (environment): expected {_RANGE}, e.g. {ENV}=30") from None


def resolve_timeout_s(call=None, world=None) -> float:
    """The timeout of one wait, in seconds: ``call`` (the call's ``timeout=``) if not None, else
    ``world.timeout`` if a world is given, else :func:`default_timeout_s`."""
    if call is not None:
        return check_timeout_s(call)
    if world is not None:
        return world.timeout
    return default_timeout_s()


def to_ns(seconds: float) -> int:
    """Seconds as the integer nanoseconds a device-side wait takes (``timeout_ns`` kernel argument)."""
    return round(check_timeout_s(seconds) * 1e9)
