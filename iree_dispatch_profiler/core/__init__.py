"""Vocabulary every layer shares; imports nothing else of the package."""
