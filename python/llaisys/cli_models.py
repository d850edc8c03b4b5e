"""`llaisys download`, `llaisys convert-gguf` and `llaisys export-gguf`: argparse registration and handlers.

Each `add_*_parser(subparsers)` adds one subcommand and sets `func`, a handler that
takes the parsed args and returns the process exit code (0 ok, 1 failure, 2 bad input).
`llaisys export-gguf` is the reverse of convert-gguf.
The result path is printed on stdout; progress and errors go to stderr.
"""

import argparse
import sys


def add_download_parser(subparsers) -> argparse.ArgumentParser:
    from .models import hub

    names = ", ".join(hub.REGISTRY)
    p = subparsers.add_parser(
        "download", help="download a known model and convert it to a HuggingFace directory",
        description=f"Download a known model into the cache ($LLAISYS_HOME or ~/.cache/llaisys). Known: {names}.")
    p.add_argument("name", nargs="?", default=hub.DEFAULT_MODEL, help=f"model name (default {hub.DEFAULT_MODEL})")
    p.add_argument("--list", action="store_true", help="list the known models and whether each is cached")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_download)
    return p


def add_convert_gguf_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "convert-gguf", help="convert a Qwen2 or Qwen3 GGUF file into a HuggingFace directory (bf16 safetensors)")
    p.add_argument("gguf_file", metavar="FILE.gguf", help="the GGUF file to convert")
    p.add_argument("out_dir", metavar="OUT_DIR", help="output directory (must not exist, or be empty)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_convert_gguf)
    return p


def add_export_gguf_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export-gguf", help="write a Qwen2 HuggingFace directory as a GGUF file with the same values (for llama.cpp)")
    p.add_argument("model", help="a model directory or a known model name")
    p.add_argument("out_file", metavar="OUT.gguf", help="the GGUF file to write (replaced if it exists)")
    p.add_argument("--dtype", choices=["bf16", "f16", "f32"], help="convert the weights first (default: keep them)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_export_gguf)
    return p


def run_download(args) -> int:
    from .models import hub

    if args.list:
        for name, spec in hub.REGISTRY.items():
            state = "cached" if hub.is_downloaded(name) else "not downloaded"
            print(f"{name:32} {state:15} {spec.description}")
        return 0
    try:
        path = hub.download(args.name, progress=not args.quiet)
    except ValueError as e:
        print(f"llaisys download: error: {e}", file=sys.stderr)
        return 2
    except (hub.DownloadError, OSError) as e:
        print(f"llaisys download: failed: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


def run_convert_gguf(args) -> int:
    from .models import gguf_convert, hub

    bar = None if args.quiet else hub.ProgressBar("converting", 1)
    try:
        out = gguf_convert.convert_gguf(args.gguf_file, args.out_dir, progress=bar)
    except ValueError as e:
        print(f"llaisys convert-gguf: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"llaisys convert-gguf: failed: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


def run_export_gguf(args) -> int:
    from .models import gguf_export, hub

    try:
        out = gguf_export.export_gguf(hub.resolve_model(args.model), args.out_file, dtype=args.dtype,
                                       progress=not args.quiet)
    except ValueError as e:
        print(f"llaisys export-gguf: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"llaisys export-gguf: failed: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0
