"""Tests of driver."""
