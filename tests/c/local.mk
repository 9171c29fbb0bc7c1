# rules for tests/c
