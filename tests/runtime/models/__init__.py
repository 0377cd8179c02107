"""Tests of the models adapter."""
