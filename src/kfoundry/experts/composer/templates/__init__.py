"""The kernel templates, one per group kind, each with its tile configurations: pointwise chains (`pointwise`),
rows with reductions (`reduction`, its passes in `row_passes`), GEMMs (`gemm`), convolutions (`conv`) and pooling
(`pool`)."""
