"""Per-file processing: find files, read bytes, resolve names, decide, apply, validate, write."""
