"""The nccl-tests style benchmark: ``python bench/collectives.py`` is
``python -m jaxcoll.tools.bench``.

    python bench/collectives.py -b 1K -e 16M -f 4 --op allreduce,allgather --plot sweep.png

See ``jaxcoll/tools/bench.py`` (or ``--help``) for the flags and what size, algbw and busbw mean.
"""

import sys

from jaxcoll.tools.bench import main

if __name__ == "__main__":
    sys.exit(main())
