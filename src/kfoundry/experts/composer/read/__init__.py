"""Reading a problem into the IR: the model, its sample inputs and its trace (`trace`), torch.fx and ATen nodes
lowered by handlers (`lower_fx`, `lower_aten`, `fx_functions`, `fx_modules`, `fx_views`), composite ops written
as primitives (`decompose`, `norm`), and ModelNew's constructor copied from the problem file (`model_init`)."""
