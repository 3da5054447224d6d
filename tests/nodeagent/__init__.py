"""Tests of nodeagent."""
