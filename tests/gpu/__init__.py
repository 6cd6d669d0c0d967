"""The prepared check for a lent GPU machine (tests/gpu/run_check.sh); see README.md here."""
