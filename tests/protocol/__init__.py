"""Tests of the Alicia protocol (alicia.protocol): codec, envelopes, ids, stanzas, steps."""
