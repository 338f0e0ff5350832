"""Handlers for the file kinds other than Python sources and dependency files: notebooks, shell, env."""
