"""dlpackshim's benchmark suite (``python3 -m bench``; see bench/README.md)."""
