"""The loader call and its iterator: options resolved, a source opened, an engine started, batches
handed to an adapter, position and accounting kept."""
