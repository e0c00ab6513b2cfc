"""Tests of the repository as a whole: layers, README, compose, wheel, benchmarks, settings."""
