"""llama-server's code infill: POST /infill and suffix on /v1/completions (routes), its body
(schema), and the answer with the editor limits applied to the text (run)."""
