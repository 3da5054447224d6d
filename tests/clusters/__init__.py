"""Tests of clusters."""
