"""tools/bench_limits: a bench_compare.py --quant report is judged against the bytes of the GGUF
file that ran (every weight but the untied token embedding), not the model directory's, and
its path is the int8 one. The read loop runs in its --quick form; the fraction itself is a
timing and is not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from llaisys.models import hub

ROOT = Path(__file__).resolve().parents[2]


def test_quant_report_counts_the_gguf_bytes(qwen05_gguf, tmp_path):
    import gguf

    reader = gguf.GGUFReader(str(qwen05_gguf))
    names = {t.name for t in reader.tensors}
    tied = "output.weight" not in names
    want = sum(int(t.n_bytes) for t in reader.tensors if tied or t.name != "token_embd.weight")
    report = {"threads": 2, "spec": {"quant": "q4_k_m"},
              "models": {"qwen2.5-coder-0.5b-instruct": {"llaisys": [{"decode": 10.0, "meta": {"isa": "avx2"}}]}}}
    src, out = tmp_path / "report.json", tmp_path / "limits.json"
    src.write_text(json.dumps(report))
    assert Path(hub.resolve_model("qwen2.5-coder-0.5b-instruct", quant="q4_k_m")) == Path(qwen05_gguf)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_limits" / "bench_limits.py"), "--quick",
                          "--threads", "2", "--models-json", str(src), "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    row = json.loads(out.read_text())["models"][0]
    assert row["decode_bytes_per_token"] == want
    assert row["weight_dtype"] == "quantized" and row["path"]["ceiling"] == "int8_maddubs_ymm"
    assert row["decode_gb_s"] == round(10.0 * want / 1e9, 2)
