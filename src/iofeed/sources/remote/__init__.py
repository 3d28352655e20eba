"""Datasets in object storage (s3://, gs://, http(s)://): URLs, a node-local shard cache, downloads ahead, upload."""
