"""Index builds: the H3 geo-time index and the content tower's embeddings, published atomically.

``run`` holds the job functions; ``geo`` the pure index; ``publish`` the versioned store.
"""
