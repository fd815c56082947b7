#!/bin/bash
# As Harbor runs it: the script's own folder is on sys.path, so test_primes.py imports helpers.py.
python3 /tests/test_primes.py
