"""Dedupe: each delivery claimed once by its event id, in a changelog-backed table;
expired entries swept a slice at a time."""
