"""What a night's discovery of a drop folder passes on (attack 22 F3): bytes of the list the flow used to take as its
parameter (Prefect refuses a flow run whose parameters pass 524,288 bytes), bytes of the largest item an ingest task
takes, and the process's peak memory, for a drop of one or more OTF2 archives of many ranks.

Run the copy in each checkout to compare code versions (it imports the checkout it lies in), under
``/usr/bin/time -v`` for the max RSS:

    /usr/bin/time -v python benchmarks/bench_night23_big_drop.py DROP [--build RANKS]

``--build RANKS`` first writes one archive of RANKS ranks (an events file and a local definitions file each) into
``DROP/campaign/run_<RANKS>`` when none is there.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testing/


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drop", type=Path)
    parser.add_argument("--build", type=int, metavar="RANKS")
    args = parser.parse_args()
    from testing.otf2_variants import many_ranks

    if args.build and not (args.drop / "campaign" / f"run_{args.build}" / "traces.otf2").exists():
        many_ranks(args.drop / "campaign" / f"run_{args.build}", args.build)

    from synthtrace.pipelines.nightly import discovered
    from synthtrace.warehouse import Warehouse

    with tempfile.TemporaryDirectory() as wh:
        start = time.perf_counter()
        found = discovered(args.drop, Warehouse(Path(wh) / "wh"), settle_s=0)
        took = time.perf_counter() - start
    files = sum(1 for f in args.drop.rglob("*") if f.is_file())
    print(json.dumps({"traces": len(found), "files": files, "found_json_bytes": len(json.dumps(found)),
                      "largest_item_bytes": max((len(json.dumps(f)) for f in found), default=0),
                      "discover_s": round(took, 1),
                      "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


if __name__ == "__main__":
    main()
