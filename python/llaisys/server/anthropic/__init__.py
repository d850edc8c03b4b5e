"""Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens read into a chat
request (routes), their bodies (schema), and the answer as a message or its content-block
stream events, errors in Anthropic's shape (stream)."""
