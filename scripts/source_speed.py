"""Preprocess speed per image from WebDataset shards and Parquet against the class folder they
were made from (the same images), and each run's peak RSS.

    python scripts/source_speed.py data/c256-small --work /tmp/source-speed --rounds 3 --workers 2

Writes the folder's accepted images once as WebDataset shards (`webdataset.TarWriter`, 1,000
samples each, `cls` labels) and as one Parquet file (pyarrow, row groups of 256 rows, `image`
bytes and `label`), then runs `preprocess` on each source in turn, `--rounds` times, each run in
a child process (so its peak RSS is its own). Prints seconds per image, the ratio to the folder,
and the preprocess process's peak RSS.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def make_sources(folder: Path, work: Path) -> dict[str, Path]:
    """The folder's images as WebDataset shards and a Parquet file (made once, then reused)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset as wds

    from iofeed.image.sniff import sniff_bytes
    from iofeed.sources.folder_scan import scan_folder

    shards, parquet = work / "wds", work / "images.parquet"
    if not parquet.exists():
        scan = scan_folder(folder)
        shards.mkdir(parents=True, exist_ok=True)
        extension = {"jpeg": "jpg", "png": "png", "webp": "webp", "gif": "gif", "bmp": "bmp", "tiff": "tiff"}
        with wds.ShardWriter(str(shards / "shard-%06d.tar"), maxcount=1000, verbose=0) as sink:
            for i, (rel, label) in enumerate(zip(scan.files, scan.labels)):
                data = (scan.root / rel).read_bytes()
                sink.write({"__key__": f"{i:08d}", extension[sniff_bytes(data[:16])]: data, "cls": label})
        schema = pa.schema({"image": pa.binary(), "label": pa.int64()})
        with pq.ParquetWriter(parquet, schema) as writer:
            for start in range(0, len(scan.files), 256):
                rows = range(start, min(start + 256, len(scan.files)))
                writer.write_table(pa.table({"image": [(scan.root / scan.files[i]).read_bytes() for i in rows],
                                             "label": [scan.labels[i] for i in rows]}, schema=schema))
    return {"folder": folder, "webdataset": shards, "parquet": parquet}


def child(src: str, out: str, workers: int) -> None:
    """One preprocess run; prints its seconds, images found and this process's peak RSS (the workers
    are the forkserver's children, not this process's: their RSS is not included)."""
    from iofeed.prepare.run import preprocess

    start = time.perf_counter()
    summary = preprocess(src, Path(out), workers=workers, overwrite=True, progress=False)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "found": summary.found, "written": sum(summary.written.values()),
                      "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/source-speed"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", nargs=2, metavar=("SRC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.workers)
        return
    sources = make_sources(args.folder, args.work)
    runs: dict[str, list[dict]] = {name: [] for name in sources}
    for _ in range(args.rounds):
        for name, src in sources.items():  # alternated, so drift of a shared machine hits every source alike
            command = [sys.executable, __file__, str(args.folder), "--child", str(src), str(args.work / f"{name}.iof"),
                       "--workers", str(args.workers)]
            out = subprocess.run(command, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = statistics.median(r["seconds"] / r["found"] for r in runs["folder"])
    print(f"{'source':<11} {'images':>7} {'ms/image (median)':>18} {'vs folder':>9} {'peak RSS MiB':>13}")
    for name, results in runs.items():
        per = statistics.median(r["seconds"] / r["found"] for r in results)
        rss = max(r["rss_mib"] for r in results)
        seconds = ", ".join(f"{r['seconds']:.1f}s" for r in results)
        print(f"{name:<11} {results[0]['found']:>7} {per * 1000:>18.3f} {per / base:>9.2f} "
              f"{rss:>13.0f}  runs: {seconds}")


if __name__ == "__main__":
    main()
