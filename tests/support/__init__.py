"""Helpers that tests of several folders use (one place each); a folder's own helpers live in it."""
