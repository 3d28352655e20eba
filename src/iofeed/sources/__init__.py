"""Opening what the loader reads: an image folder, an iofeed dataset (local or by URL) or a Mix, as
a flat table of samples; the epoch order over it."""
