# rules for tests/python
