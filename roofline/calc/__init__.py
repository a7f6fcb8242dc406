"""The calculator: pure functions over spec records (no I/O, no printing, no torch, no numpy)."""
