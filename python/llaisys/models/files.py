"""Reading model files that may be hostile: the error type, bounded reads, bounded JSON.

Every problem with a model file is a `ModelFileError` (a `ValueError`, so a 4xx in the
server and exit code 2 in the CLI) whose message starts with the file and names the
field. Nothing here trusts a size, a count or a nesting depth found in a file.
"""

import json
import os
from pathlib import Path
from typing import Optional, Union

# Largest JSON side file read whole, by file name (bytes). Real Qwen2 files are 1-10 KB
# (config, generation_config), ~7 KB (tokenizer_config) and ~7 MB (tokenizer.json).
JSON_FILE_LIMITS = {
    "config.json": 4 << 20,
    "generation_config.json": 4 << 20,
    "tokenizer_config.json": 64 << 20,
    "tokenizer.json": 256 << 20,
    "model.safetensors.index.json": 64 << 20,
}
DEFAULT_JSON_LIMIT = 4 << 20


class ModelFileError(ValueError):
    """A model file llaisys refuses: malformed, out of range, or inconsistent with the others.

    str(e) is "<path>: <what is wrong>", the message naming the field; `path` and `field`
    carry them for programs (field is None when the problem is the file as a whole).
    """

    def __init__(self, path, field: Optional[str], message: str):
        self.path = str(path)  # the file (or directory) at fault
        self.field = field  # the field, key, tensor or header entry at fault, or None
        self.message = message  # the text after "<path>: "
        super().__init__(f"{path}: {message}")


def read_bytes_bounded(path: Path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file `path`, refusing more than `limit` bytes.

    Reads at most limit + 1 bytes, whatever stat says (a FIFO, a device or a /proc file
    never makes this block or read without end).
    """
    if not path.is_file():
        reason = "not found" if not path.exists() else "not a regular file"
        raise ModelFileError(path, None, f"{what} {reason}")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ModelFileError(path, None, f"cannot read {what}: {e.strerror or e}") from None
    if len(data) > limit:
        raise ModelFileError(path, None, f"{what} is larger than the limit of {limit} bytes")
    return data


def decode_utf8(data: bytes, source, field: Optional[str] = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"{field}: " if field else ""
        raise ModelFileError(source, field, f"{where}not valid UTF-8 (byte {e.start})") from None


def loads_json(text: Union[str, bytes], source, field: Optional[str] = None, object_pairs_hook=None):
    """JSON as Python reads it; too-deep nesting and bad syntax are ModelFileErrors.

    NaN, Infinity and 1e999 parse (as transformers reads them) and are refused by the
    checks of the field that holds them, which can name it.
    """
    if isinstance(text, bytes):
        text = decode_utf8(text, source, field)
    where = f"{field}: " if field else ""
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise ModelFileError(source, field, f"{where}JSON nested too deeply") from None
    except ValueError as e:
        raise ModelFileError(source, field, f"{where}invalid JSON: {e}") from None


def read_json_file(path: Union[str, os.PathLike], required: bool = True, limit: Optional[int] = None):
    """The JSON object in `path`; {} for an absent optional file."""
    path = Path(path)
    if not required and not path.exists():
        return {}
    limit = limit or JSON_FILE_LIMITS.get(path.name, DEFAULT_JSON_LIMIT)
    data = loads_json(read_bytes_bounded(path, limit, path.name), path)
    if not isinstance(data, dict):
        raise ModelFileError(path, None, f"must hold a JSON object, got {type(data).__name__}")
    return data


def unicode_problem(text: str) -> Optional[str]:
    """None if `text` is valid Unicode, else a description of its first lone surrogate."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"contains a lone surrogate (U+{ord(text[e.start]):04X} at index {e.start}), which is not valid Unicode"
    return None
