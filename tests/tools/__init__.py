"""Tests of the data and docs tools under tools/."""
