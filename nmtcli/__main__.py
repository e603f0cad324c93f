"""`python -m nmtcli ...` is `nmt ...` (and what torchrun launches)."""

from nmtcli.cli import main

if __name__ == "__main__":
    main()
