"""Serving state: the served models (registry), admission and its limits (limits), the HTTP
server's connections (connections), one HTTP request's run on the engine (generation),
sessions and stored responses (sessions), Prometheus metrics (metrics)."""
