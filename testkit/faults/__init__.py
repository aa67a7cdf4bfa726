"""Faults past kill -9, injected into the real processes on this machine (filled in below)."""
