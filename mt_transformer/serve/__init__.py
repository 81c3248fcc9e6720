"""The translation server: LibreTranslate's API and dynamic batching of concurrent requests."""
