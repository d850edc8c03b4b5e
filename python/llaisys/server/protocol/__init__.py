"""Protocol and schemas, shared by every API: the request-body validator and the bodies it
checks (request_schemas, response_schemas, schema), OpenAI body parsing (parse), the message
fields kept (messages), the API error (errors) and /openapi.json (openapi)."""
