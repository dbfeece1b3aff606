"""Test support shipped with h5flow: the pytest MPI plugin and, per interface, conformance suites."""
