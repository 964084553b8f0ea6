"""morphcache.kernels: the Triton cache kernels, each beside a plain-torch reference.

Writers (no lease): ``store`` (raw KV of new tokens), ``compress`` (compressed entries and
indexer keys of complete pages), ``gather_pages`` / ``scatter_pages`` (offload / prefetch data
path), ``gdn_prefill`` / ``gdn_decode`` (the gated delta rule of linear layers, chunked prefill and
recurrent step, on a sequence's own state slot, saving checkpoints at page boundaries).  Readers
(require a live ``KernelLease`` and re-check generations on the device): ``indexer_topk``,
``compressed_read``, ``sparse_read``, ``window_read``, ``gdn_restore`` (a recurrent-state checkpoint
into a working slot).

Every launcher validates its arguments first and raises a ``KernelContractError`` subclass on a
violation; readers raise ``StaleReadError`` when the device-side generation guard fires.
"""

from .compress import compress, reference_compress
from .compressed_read import compressed_read, reference_compressed_read
from .errors import (
    AliasingError,
    AlignmentError,
    DeviceError,
    DTypeError,
    DuplicateIndexError,
    IndexRangeError,
    KernelContractError,
    LayoutError,
    LeaseRequiredError,
    ParameterError,
    ShapeError,
    StaleReadError,
)
from .gdn_decode import gdn_decode, reference_gdn_decode
from .gdn_prefill import gdn_prefill, reference_gdn_prefill
from .gdn_restore import gdn_restore, reference_gdn_restore
from .indexer_topk import indexer_topk, reference_indexer_topk
from .lease import KernelLease
from .page_copy import gather_pages, reference_gather_pages, reference_scatter_pages, scatter_pages
from .sparse_read import reference_sparse_read, sparse_read
from .store import reference_store, store
from .window_read import reference_window_read, window_read

__all__ = [
    "AlignmentError",
    "AliasingError",
    "DTypeError",
    "DeviceError",
    "DuplicateIndexError",
    "IndexRangeError",
    "KernelContractError",
    "KernelLease",
    "LayoutError",
    "LeaseRequiredError",
    "ParameterError",
    "ShapeError",
    "StaleReadError",
    "compress",
    "compressed_read",
    "gather_pages",
    "gdn_decode",
    "gdn_prefill",
    "gdn_restore",
    "indexer_topk",
    "reference_compress",
    "reference_compressed_read",
    "reference_gather_pages",
    "reference_gdn_decode",
    "reference_gdn_prefill",
    "reference_gdn_restore",
    "reference_indexer_topk",
    "reference_scatter_pages",
    "reference_sparse_read",
    "reference_store",
    "reference_window_read",
    "scatter_pages",
    "sparse_read",
    "store",
    "window_read",
]
