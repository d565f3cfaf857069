"""Planning: the IR graph cut into kernels (groups) and host steps (`fusion`), which make a plan (`steps`)."""
