"""The composer's IR: primitive ops on values with shapes and dtypes (`graph`), and building it with shapes
and dtypes inferred the way PyTorch infers them (`builder`)."""
