"""File assets (HI-1 kind "file", FI-1): bodies streamed in sealed 256 KiB chunks.

A file is one more kind on the shared signed DAG. Its body is never held whole: an upload
seals and writes each chunk as it arrives (``FileUpload``) and signs the revision from the
chunk digests at the end; a download opens one chunk at a time (``open_file_chunk``).
"""

from engine.files.stream import (
    FILE_KIND,
    MAX_FILE_BYTES,
    TEXT_SAMPLE_BYTES,
    FileUpload,
    file_info,
    open_file_chunk,
    text_of_sample,
)

__all__ = [
    "FILE_KIND",
    "MAX_FILE_BYTES",
    "TEXT_SAMPLE_BYTES",
    "FileUpload",
    "file_info",
    "open_file_chunk",
    "text_of_sample",
]
