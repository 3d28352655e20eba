"""Time to the first batch of a pass that follows an abandoned one (`break`, then `set_epoch`
elsewhere): what the workers still had queued for the old pass is waited for first.

    python scripts/abandoned_epoch.py data/c256.iof
"""
import statistics
import sys
import time

import iofeed

ld = iofeed.loader(sys.argv[1], split="val", batch_size=256, image_size=224, workers=2, augment=True)
sum(1 for _ in ld)  # warm: workers started, files in the page cache
times = []
for k in range(5):
    it = iter(ld)
    next(it)
    del it  # abandon after one batch
    ld.set_epoch(10 + k)
    t = time.perf_counter()
    next(iter(ld))
    times.append(time.perf_counter() - t)
print("first batch after an abandoned epoch:", [round(x, 3) for x in times], "s, median",
      round(statistics.median(times), 3), "s; queued tasks left undone:", getattr(ld.engine, "stopped_early", None))
ld.close()
