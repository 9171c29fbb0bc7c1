# rules for examples
