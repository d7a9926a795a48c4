"""Example data shipped with the package (written for mnemovault, not taken from a data set)."""
