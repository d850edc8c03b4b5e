"""An R1-distill-style model directory for the reasoning tests (the hub cannot be reached):
the real Qwen2.5 0.5B weights (linked), its tokenizer with DeepSeek-R1-Distill-Qwen's special
tokens added (`<｜User｜>`, `<｜Assistant｜>`, begin/end of sentence, and `<think>` / `</think>`
as plain added tokens, as R1-Distill has them), and R1-Distill-Qwen's chat template, whose
generation prompt opens the `<think>` block."""

from __future__ import annotations

import json
import os
from pathlib import Path

# DeepSeek-R1-Distill-Qwen's tokenizer_config.json chat_template, verbatim
R1_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}"
    "{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}"
    "{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜>"
    "<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + "
    "tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}"
    "{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + "
    "'\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}"
    "{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}"
    "{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"
    "{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}{%- else %}"
    "{{'\\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}"
    "{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)
SPECIAL = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
           "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>",
           "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁sep｜>")
PLAIN = ("<think>", "</think>")  # added, not special: they stay in the decoded text


def make_r1_checkpoint(path: Path, qwen_dir: Path) -> Path:
    """Write the directory into `path` and return it."""
    import tokenizers

    path, qwen_dir = Path(path), Path(qwen_dir)
    path.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        if (qwen_dir / name).exists() and not (path / name).exists():
            os.symlink(qwen_dir / name, path / name)
    spec = json.loads((qwen_dir / "tokenizer.json").read_text(encoding="utf-8"))
    added = spec["added_tokens"]
    vocab = spec["model"]["vocab"]
    next_id = max(t["id"] for t in added) + 1  # 151665 in Qwen2.5: inside the model's 151936 rows
    for k, text in enumerate(SPECIAL + PLAIN):
        vocab.pop(f"[PAD{next_id + k}]", None)  # a converted vocabulary pads to the model's rows
        vocab[text] = next_id + k
        added.append({"id": next_id + k, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": text in SPECIAL})
    (path / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))  # it must load
    cfg = {"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "add_bos_token": True, "chat_template": R1_TEMPLATE}
    (path / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=1))
    return path
