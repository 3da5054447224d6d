"""Tests of fakegpu."""
