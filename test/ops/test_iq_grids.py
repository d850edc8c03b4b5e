"""The i-quants' grids (src/quant/iq_grids.inc) are gguf-py's: the generator, run in --check mode,
rebuilds the file from gguf.quants and compares. The kernels' values against gguf-py's
dequantizer are test_quant_formats.py's and test_quant_linear.py's."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")
ROOT = Path(__file__).resolve().parents[2]


def test_grids_file_is_what_gguf_py_gives():
    child = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_iq_grids.py"), "--check"], capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == 0, child.stdout + child.stderr


def test_check_fails_on_a_changed_entry(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_iq_grids
    finally:
        sys.path.pop(0)
    text = gen_iq_grids.OUT.read_text()
    assert "0x0002," in text
    bad = tmp_path / "iq_grids.inc"
    bad.write_text(text.replace("0x0002,", "0x0003,", 1))
    monkeypatch.setattr(gen_iq_grids, "OUT", bad)
    monkeypatch.setattr(sys, "argv", ["gen_iq_grids.py", "--check"])
    with pytest.raises(SystemExit) as exit_:
        gen_iq_grids.main()
    assert exit_.value.code == 1
