"""The chat page's third-party files (web/vendor/): fetch them from npm, or check them.

    python tools/vendor_web.py            re-fetch the pinned versions (npm pack), rewrite the manifest
    python tools/vendor_web.py --latest   the same at each package's current latest version
    python tools/vendor_web.py --check    offline: every file matches the manifest's sha256

The page has no build step: these are the packages' own browser builds, copied byte for byte
from the npm tarballs (so a file's sha256 can be compared with the published package), with
each package's licence files. web/vendor/manifest.json lists, per file, the package, its
version, the file's path inside the package and its sha256; --check fails on a changed,
missing or unlisted file. The versions live in the manifest; --latest moves them forward.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENDOR = REPO / "web" / "vendor"
MANIFEST = "manifest.json"

# npm package -> [(path inside the package, file name in web/vendor)]
FILES = {
    "markdown-it": [
        ("dist/browser/markdown-it.umd.min.js", "markdown-it.min.js"),  # global: markdownit
        ("LICENSE", "LICENSE.markdown-it"),
    ],
    "dompurify": [
        ("dist/purify.min.js", "purify.min.js"),  # global: DOMPurify
        ("LICENSE", "LICENSE.dompurify"),  # Apache-2.0 text (the package is MPL-2.0 OR Apache-2.0)
        ("LICENSE-MPL", "LICENSE-MPL.dompurify"),
    ],
    "@highlightjs/cdn-assets": [
        ("highlight.min.js", "highlight.min.js"),  # global: hljs, with the common languages
        ("styles/github.min.css", "hljs-github.min.css"),  # light theme
        ("styles/github-dark.min.css", "hljs-github-dark.min.css"),  # dark theme
        ("LICENSE", "LICENSE.highlight.js"),
    ],
}


class VendorError(Exception):
    """npm failed, or a package does not hold a file this script copies."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_manifest(vendor: Path) -> dict:
    path = vendor / MANIFEST
    if not path.is_file():
        raise VendorError(f"{path} is missing (run tools/vendor_web.py to fetch the files)")
    return json.loads(path.read_text())


def check(vendor: Path) -> list[str]:
    """Problems with `vendor` against its manifest; [] when every file matches."""
    manifest = load_manifest(vendor)
    problems = []
    listed = {MANIFEST}
    for entry in manifest["files"]:
        name = entry["file"]
        listed.add(name)
        path = vendor / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif sha256(path) != entry["sha256"]:
            problems.append(f"{name}: sha256 {sha256(path)} differs from the manifest's {entry['sha256']} "
                            f"({entry['package']}@{entry['version']}:{entry['source']})")
    for path in sorted(vendor.iterdir()):
        if path.name not in listed:
            problems.append(f"{path.name}: not in the manifest")
    return problems


def npm(*args: str, cwd: Path) -> str:
    try:
        done = subprocess.run(["npm", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise VendorError("npm is not installed") from e
    if done.returncode != 0:
        raise VendorError(f"npm {' '.join(args)} failed ({done.returncode}):\n{done.stderr.strip()}")
    return done.stdout


def fetch(package: str, version: str, tmp: Path) -> tuple[Path, str]:
    """Unpacks package@version into a fresh folder under tmp; returns it and the tarball's integrity."""
    out = json.loads(npm("pack", f"{package}@{version}", "--json", "--pack-destination", str(tmp), cwd=tmp))[0]
    if out["version"] != version:
        raise VendorError(f"npm pack {package}@{version} gave version {out['version']}")
    root = tmp / out["filename"].removesuffix(".tgz")
    with tarfile.open(tmp / out["filename"]) as tar:
        tar.extractall(root, filter="data")  # "data" refuses absolute paths, .. and links out
    return root / "package", out["integrity"]


def refresh(vendor: Path, latest: bool) -> None:
    old = load_manifest(vendor) if (vendor / MANIFEST).is_file() else {"packages": {}}
    versions = {}
    for package in FILES:
        pinned = old["packages"].get(package, {}).get("version")
        if latest or pinned is None:
            versions[package] = json.loads(npm("view", package, "version", "--json", cwd=REPO))
        else:
            versions[package] = pinned
    packages, files = {}, []
    with tempfile.TemporaryDirectory(prefix="vendor_web-") as tmp_name:
        tmp = Path(tmp_name)
        staged = tmp / "vendor"
        staged.mkdir()
        for package, version in versions.items():
            root, integrity = fetch(package, version, tmp)
            meta = json.loads((root / "package.json").read_text())
            packages[package] = {"version": version, "license": meta.get("license"), "integrity": integrity}
            for source, name in FILES[package]:
                src = root / source
                if not src.is_file():
                    raise VendorError(f"{package}@{version} has no {source}")
                shutil.copyfile(src, staged / name)
                files.append({"file": name, "package": package, "version": version, "source": source,
                              "sha256": sha256(staged / name)})
        doc = {"note": "written by tools/vendor_web.py; check with tools/vendor_web.py --check",
               "packages": packages, "files": files}
        (staged / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")
        if vendor.exists():
            shutil.rmtree(vendor)
        shutil.copytree(staged, vendor)
    for package, info in packages.items():
        before = old["packages"].get(package, {}).get("version")
        moved = f" (was {before})" if before and before != info["version"] else ""
        print(f"{package}@{info['version']}{moved}: {len(FILES[package])} files")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="verify the files against the manifest (offline)")
    p.add_argument("--latest", action="store_true", help="fetch each package's latest version")
    p.add_argument("--vendor-dir", type=Path, default=VENDOR, help="default: web/vendor")
    args = p.parse_args(argv)
    try:
        if args.check:
            problems = check(args.vendor_dir)
            for line in problems:
                print(f"vendor_web: {line}", file=sys.stderr)
            if not problems:
                print(f"vendor_web: {args.vendor_dir}: all files match {MANIFEST}")
            return 1 if problems else 0
        refresh(args.vendor_dir, args.latest)
        return 0
    except VendorError as e:
        print(f"vendor_web: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
