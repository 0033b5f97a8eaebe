"""Every rank exits with the code given as the first argument."""

import sys

print(f"exit_with: leaving with {sys.argv[1]}", flush=True)
sys.exit(int(sys.argv[1]))
