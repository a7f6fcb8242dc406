"""Specs: the Hardware and Model records, strict YAML and config.json loading, the parameter anatomy."""
