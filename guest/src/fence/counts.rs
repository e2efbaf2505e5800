//! Test-count parsers: read the counts a test runner claims from its whole output stream.
