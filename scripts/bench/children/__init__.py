"""The Python processes the benchmarks time or start, each run as a script by its path (under this
or another Python): peer.py (the Python peer, the I/O floor and the launcher), real_peers.py (timm,
transformers, mergekit) and dcp_torch.py (DCP inputs and their reference). They import nothing
from the package; this folder holds nothing else, so that none of its names hides a module from
what they import."""
