"""The `nvjpeg` engine: workers pack JPEG bytes, the consumer decodes each batch in one call on its
device and crops it there (nothing here imports torch until the engine is built)."""
