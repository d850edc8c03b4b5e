"""The parity prompts: five chats (code, a system turn, Chinese, a multi-turn fix with an emoji, a
list) whose greedy continuations test/parity/test_qwen05_greedy.py holds against transformers and
tools/bench_kv_dtype.py compares across KV dtypes, NEW_TOKENS tokens each."""

CHATS = [
    [{"role": "user", "content": "Write a Python function that returns the nth Fibonacci number."}],
    [{"role": "system", "content": "You are a terse assistant. Answer in one sentence."},
     {"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "用中文解释一下什么是递归。"}],
    [{"role": "user", "content": "Fix the bug:\n```js\nfunction add(a, b) { return a - b }\n```"},
     {"role": "assistant", "content": "The function subtracts instead of adding."},
     {"role": "user", "content": "Show the corrected code and a test 🙂"}],
    [{"role": "user", "content": "List three sorting algorithms with their time complexity."}],
]
NEW_TOKENS = 64
