"""web/vendor/ against its manifest, offline: `tools/vendor_web.py --check` passes on the
committed files and fails, naming the file, on a changed, missing or unlisted one; every
vendored file index.html loads is in the manifest, and each package's licence is there."""

import json
import re
import shutil
import subprocess
import sys

from web_helpers import REPO, WEB_DIR

SCRIPT = REPO / "tools" / "vendor_web.py"
VENDOR = WEB_DIR / "vendor"


def check(vendor_dir):
    done = subprocess.run([sys.executable, str(SCRIPT), "--check", "--vendor-dir", str(vendor_dir)],
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_committed_files_match():
    rc, out = check(VENDOR)
    assert rc == 0, out


def test_changed_missing_and_extra_files_fail(tmp_path):
    copy = tmp_path / "vendor"
    shutil.copytree(VENDOR, copy)
    target = copy / "purify.min.js"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    target.write_bytes(bytes(data))
    rc, out = check(copy)
    assert rc == 1 and "purify.min.js: sha256" in out, out

    shutil.copyfile(VENDOR / "purify.min.js", target)
    (copy / "highlight.min.js").unlink()
    (copy / "extra.js").write_text("// not vendored\n")
    rc, out = check(copy)
    assert rc == 1 and "highlight.min.js: missing" in out and "extra.js: not in the manifest" in out, out


def test_page_loads_only_listed_files_and_licences_ship():
    manifest = json.loads((VENDOR / "manifest.json").read_text())
    listed = {f["file"] for f in manifest["files"]}
    used = re.findall(r'(?:src|href)="vendor/([^"]+)"', (WEB_DIR / "index.html").read_text())
    assert len(used) == 5 and set(used) <= listed, (used, listed)
    for package, info in manifest["packages"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", info["version"]), (package, info)  # exact pins
        files = [f["file"] for f in manifest["files"] if f["package"] == package]
        assert any(name.startswith("LICENSE") for name in files), (package, files)
