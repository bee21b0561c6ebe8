"""The command line: the server entry point, `proxai translate`, lint and the docs generator."""
