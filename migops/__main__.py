import sys

from migops.cli import main

sys.exit(main())
