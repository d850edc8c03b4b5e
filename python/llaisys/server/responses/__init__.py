"""OpenAI's Responses API: POST /v1/responses read into a chat request, stored responses and
their retrieval (routes), and the answer as a Response object or its typed stream events
(events)."""
