"""In-memory search: chunking, Jieba segmentation, FTS5 + vectors, fusion, rerank, cache (SR-1 … SR-6).

Nothing in this package touches the disk: every index lives in process memory
and is dropped on lock (ST-2, ST-10).
"""
