"""A backend without an engine: sandboxes in memory, commands answered by a script."""
