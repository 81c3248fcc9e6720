"""The translation server: dynamic batching of concurrent requests."""
