// Keeps the attnkit_text object library non-empty on every checkout; holds no code.
