"""Serving: a scheduler that batches requests over the decode engine, and the HTTP server."""
