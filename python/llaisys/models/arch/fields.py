"""The typed field readers every architecture's config parser shares: each value is type- and range-checked
(config.LIMITS) before anything is sized by it, and a bad one is a ModelFileError naming the file and the field."""

import math
from typing import Optional

from ..config import LIMITS, MAX_EOS_IDS
from ..files import ModelFileError


def req(d: dict, key: str, kind: type, source: str):
    if key not in d:
        raise ModelFileError(source, key, f"missing required field {key!r}")
    return typed(d[key], key, kind, source)


def typed(value, key: str, kind: type, source: str):
    """`value` checked as `kind` (int excludes bool; float accepts ints, must be finite)."""
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            try:
                value = float(value)
            except OverflowError:  # an int too large for a float
                ok = False
            ok = ok and math.isfinite(value)
    else:
        ok = isinstance(value, kind)
    if not ok:
        want = "a finite number" if kind is float else kind.__name__
        raise ModelFileError(source, key, f"field {key!r} must be {want}, got {type(value).__name__} {shown(value)}")
    return value


def in_range(source: str, key: str, value, low, high) -> None:
    """low < value <= high for floats (low exclusive), low <= value <= high for ints."""
    ok = (low < value <= high) if isinstance(value, float) else (low <= value <= high)
    if not ok:
        if isinstance(value, int) and value <= 0:
            raise ModelFileError(source, key, f"field {key!r} must be positive, got {value}")
        raise ModelFileError(source, key, f"field {key!r} is {value}, outside the supported range "
                                          f"{'(' if isinstance(value, float) else '['}{low}, {high}]")


def limited(d: dict, key: str, kind: type, source: str, default=None, limit_key: Optional[str] = None):
    """d[key] (or `default` when absent), typed and within LIMITS[limit_key or key]."""
    value = typed(d[key], key, kind, source) if key in d else default
    in_range(source, key, value, *LIMITS[limit_key or key])
    return value


def token_ids(value, key: str, source: str, vocab: int) -> tuple:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if len(items) > MAX_EOS_IDS:
        raise ModelFileError(source, key, f"field {key!r} lists {len(items)} ids (at most {MAX_EOS_IDS})")
    ids = tuple(typed(v, key, int, source) for v in items)
    for tid in ids:
        if not 0 <= tid < vocab:
            raise ModelFileError(source, key, f"special token id {tid} ({key}) outside the vocabulary (size {vocab})")
    return ids


def shown(value) -> str:
    """A short repr of a value from a file (never huge, never raising)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."
