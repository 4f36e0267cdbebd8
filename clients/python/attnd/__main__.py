"""python -m attnd …: the same as attnd-cli."""
import sys

from .cli import main

sys.exit(main())
