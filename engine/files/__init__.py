"""File assets (HI-1 kind "file", FI-1): bodies streamed in sealed 256 KiB chunks.

A file is one more kind on the shared signed DAG. Its body is never held whole: an upload
seals and writes chunks as they arrive, in a bounded pipeline (``FileUpload``), and signs
the revision from the chunk digests at the end; a download opens a batch of chunks at a
time into one buffer (``open_file_chunks``).
"""

from engine.files.stream import (
    FILE_KIND,
    MAX_FILE_BYTES,
    TEXT_SAMPLE_BYTES,
    FileUpload,
    file_info,
    is_searchable,
    open_file_chunk,
    open_file_chunks,
    text_of_sample,
    uses_pack,
)

__all__ = [
    "FILE_KIND",
    "MAX_FILE_BYTES",
    "TEXT_SAMPLE_BYTES",
    "FileUpload",
    "file_info",
    "is_searchable",
    "open_file_chunk",
    "open_file_chunks",
    "text_of_sample",
    "uses_pack",
]
