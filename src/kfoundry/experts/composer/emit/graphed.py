"""The CUDA-graph variant of a candidate: a forward of many launches (a rolled loop's steps, a whole network) is
bound by the host's launch rate, so the variant captures the kernels' launches in a CUDA graph on the first call
with each set of input shapes, and replays the graph after that: one launch per call. Its forward copies the
inputs into the graph's own tensors (part of every call, and of its time) and returns the graph's output tensors,
which the next call rewrites, as torch.compile's mode="reduce-overhead" does. Off a GPU, or while another graph
is being captured, the kernels run as they are."""

from __future__ import annotations

# a plan launching at least this many kernels a call gets a graph variant (a rolled loop always does)
GRAPH_MIN_LAUNCH_SITES = 8

CUDA_GRAPHED_HELPER = '''def _cuda_graphed(module, run, *args):
    """run(*args) replayed from a CUDA graph captured on the first call with these shapes and these parameters.
    The inputs are copied into the graph's own; what it returns is rewritten by the next call."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors or not tensors[0].is_cuda or torch.cuda.is_current_stream_capturing():
        return run(*args)
    key = tuple((tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args)
    key += tuple(t.data_ptr() for t in module.state_dict(keep_vars=True).values())
    graphs = module.__dict__.setdefault("_cuda_graphs", {})
    if key not in graphs:
        static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        run(*static)  # the kernels compile here: nothing of that may be captured
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run(*static)
        graphs[key] = (graph, static, out)
    graph, static, out = graphs[key]
    for mine, given in zip(static, args):
        if isinstance(given, torch.Tensor):
            mine.copy_(given)
    graph.replay()
    return out
'''


def graphed_methods(signature: str, args: list[str], body: str) -> list[str]:
    """forward (the graph's replay) and _kernels (the launches it captures), as class members."""
    call = ", ".join(["self._kernels"] + args)
    return [f"    def forward({signature}):\n        return _cuda_graphed(self, {call})",
            f"    def _kernels({signature}):\n{body}"]


def can_graph(signature: str, args: list[str]) -> bool:
    """Only a forward of plain positional arguments is called through the graph helper as it is."""
    return "*" not in signature and "=" not in signature and args == [a.strip() for a in signature.split(",")][1:]
