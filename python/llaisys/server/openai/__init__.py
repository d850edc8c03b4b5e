"""The OpenAI routes (routes: /v1/chat/completions, /v1/completions, /v1/embeddings, /tokenize,
sessions, cancel) and what shapes their answers: a run's JSON or SSE answer (respond), one
chat choice's output (chat_output: reasoning split, stop strings, tool calls), the bodies and
logprobs (bodies), tool calls and their parser, embeddings, prompt embeddings."""
