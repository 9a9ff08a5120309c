"""Role images: built on the operator's machine, cached by tag, streamed to hosts."""
