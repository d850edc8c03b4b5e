"""`llaisys download`, `models ls|rm`, `convert-gguf` and `export-gguf`: argparse registration and handlers.

Each `add_*_parser(subparsers)` adds one subcommand and sets `func`, a handler that
takes the parsed args and returns the process exit code (0 ok, 1 failure, 2 bad input).
`llaisys export-gguf` is the reverse of convert-gguf.
The result path is printed on stdout; progress and errors go to stderr.
"""

import argparse
import sys

# What a bare model name runs here, in words (models.hub.default_quant decides it the same way).
QUANT_DEFAULT = ("q4_k_m where the CPU has VNNI (AVX-512 VNNI or AVX-VNNI) or AMX, else bf16; "
                 "`llaisys info` says which")


def add_download_parser(subparsers) -> argparse.ArgumentParser:
    from .models import hub

    names = ", ".join(hub.REGISTRY)
    p = subparsers.add_parser(
        "download", help="download a known model (its GGUF as it is, a Q8_0 GGUF, or a bf16 HuggingFace directory)",
        description=f"Download a known model into the cache ($LLAISYS_HOME or ~/.cache/llaisys). Known: {names}. "
                    f"--quant q4_k_m keeps the downloaded GGUF (Q4_K_M) and runs it as it is; bf16 converts it "
                    f"to a HuggingFace directory; q8_0 writes a Q8_0 GGUF from that directory.")
    p.add_argument("name", nargs="?", default=hub.DEFAULT_MODEL, help=f"model name (default {hub.DEFAULT_MODEL})")
    p.add_argument("--quant", default=None, choices=list(hub.QUANTS),
                   help=f"the format to produce (default: what serve runs here: {QUANT_DEFAULT})")
    p.add_argument("--list", action="store_true", help="list the known models and which formats are cached")
    p.add_argument("--keep-gguf", action="store_true",
                   help="with --quant bf16/q8_0: keep a GGUF this download fetched beside the converted model "
                        "(default: removed once converted; a GGUF already in the cache always stays)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_download)
    return p


def add_models_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("models", help="list or remove the models in the cache",
                              description="The models in the cache ($LLAISYS_HOME or ~/.cache/llaisys) and their "
                                          "sizes; remove one to free its disk space.")
    sub = p.add_subparsers(dest="models_command", required=True, metavar="{ls,rm}")
    ls = sub.add_parser("ls", help="list the cached models: name, kind, size, path and files",
                        description="List what the cache ($LLAISYS_HOME or ~/.cache/llaisys) holds: converted "
                                    "models, downloaded or exported GGUF files and unfinished downloads, each with "
                                    "its format, size and path, and the total.")
    ls.set_defaults(func=run_models_ls)
    rm = sub.add_parser("rm", help="remove a cached model (asks first)",
                        description="Remove a model from the cache to free its disk space: everything stored "
                                    "under its name, or with --gguf only its GGUF files. Lists what goes and asks "
                                    "first, unless -y.")
    rm.add_argument("name", help="a name that `llaisys models ls` shows")
    rm.add_argument("--gguf", action="store_true",
                    help="remove only its GGUF files (a kept download, exports), not the model")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask")
    rm.set_defaults(func=run_models_rm)
    return p


def add_convert_gguf_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "convert-gguf", help="convert a GGUF file (Qwen2/3, their MoE, Llama, Mistral, Mixtral) into a HuggingFace directory (bf16 safetensors)",
        description="Convert a Qwen2 or Qwen3 GGUF file into a HuggingFace directory: every tensor dequantized "
                    "to bf16 in one model.safetensors, with config.json and the tokenizer built from the file's "
                    "metadata. Not needed to run a GGUF: `llaisys serve --model FILE.gguf` runs it as it is.")
    p.add_argument("gguf_file", metavar="FILE.gguf", help="the GGUF file to convert")
    p.add_argument("out_dir", metavar="OUT_DIR", help="output directory (must not exist, or be empty)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_convert_gguf)
    return p


def add_export_gguf_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "export-gguf", help="write a Qwen2 HuggingFace directory as a GGUF file with the same values (for llama.cpp)",
        description="Write a Qwen2 HuggingFace directory (or a known model, by name) as a GGUF file holding the "
                    "same values, so llama.cpp can run exactly these weights; --dtype converts them first or "
                    "quantizes the matrices to Q8_0.")
    p.add_argument("model", help="a model directory or a known model name")
    p.add_argument("out_file", metavar="OUT.gguf", help="the GGUF file to write (replaced if it exists)")
    p.add_argument("--dtype", choices=["bf16", "f16", "f32", "q8_0", "q4_k_m"],
                   help="convert the weights first, or quantize the matrices to Q8_0 or llama.cpp's Q4_K_M "
                        "recipe (default: keep them)")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=run_export_gguf)
    return p


def run_download(args) -> int:
    from .models import hub

    if args.list:
        for name, spec in hub.REGISTRY.items():
            cached = [q for q in hub.QUANTS if hub.is_downloaded(name, q)]
            state = "cached: " + ",".join(cached) if cached else "not downloaded"
            print(f"{name:32} {state:28} {spec.description}")
        return 0
    try:
        path = hub.download(args.name, progress=not args.quiet, keep_gguf=args.keep_gguf,
                            quant=args.quant or hub.default_quant())
    except ValueError as e:
        print(f"llaisys download: error: {e}", file=sys.stderr)
        return 2
    except (hub.DownloadError, OSError) as e:
        print(f"llaisys download: failed: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


_NOTES = {"gguf": "a GGUF, run as it is (llaisys serve --model PATH)",
          "export": "a GGUF written from the model (tools/bench_compare.py, llaisys export-gguf)",
          "partial": "an unfinished download or conversion"}


def run_models_ls(args) -> int:
    from .models import hub, hub_cache

    found = hub_cache.entries()
    if not found:
        print(f"no models in {hub.cache_root()} (llaisys download NAME fetches one)")
        return 0
    models = {e.name for e in found if e.kind == "model"}
    width = max(len(e.name) for e in found)
    for e in found:
        print(f"{e.name:{width}}  {e.kind:7} {e.quant or '-':7} {hub_cache.human(e.size):>9}  {e.path}")
        if e.kind == "model":
            print(f"{'':{width}}  files: {', '.join(e.files)}")
        else:
            print(f"{'':{width}}  {_NOTES[e.kind]}")
    total = sum(e.size for e in found)
    print(f"total {hub_cache.human(total)} in {hub.cache_root()}")
    extra = sorted({e.name for e in found if e.kind in ("gguf", "export") and e.name in models})
    if extra:
        print(f"more than one format of: {', '.join(extra)} (llaisys models rm NAME --gguf frees the GGUF files)")
    return 0


def run_models_rm(args) -> int:
    from .models import hub_cache

    kinds = ("gguf", "export") if args.gguf else hub_cache.KINDS
    try:
        doomed = hub_cache.select(args.name, kinds)
    except ValueError as e:
        print(f"llaisys models rm: error: {e}", file=sys.stderr)
        return 2
    for e in doomed:
        print(f"  {e.kind:7} {hub_cache.human(e.size):>9}  {e.path}")
    if not args.yes:
        try:
            answer = input(f"remove these {len(doomed)} item(s) of {args.name}? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed (pass --yes to skip the question)", file=sys.stderr)
            return 1
    try:
        gone = hub_cache.remove(args.name, kinds)
    except (ValueError, OSError) as e:
        print(f"llaisys models rm: failed: {e}", file=sys.stderr)
        return 1
    print(f"removed {len(gone)} item(s), {hub_cache.human(sum(e.size for e in gone))}")
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
