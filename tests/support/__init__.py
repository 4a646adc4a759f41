"""Helpers the test files share (fakes, the loopback server, recorded runs); no tests here."""
