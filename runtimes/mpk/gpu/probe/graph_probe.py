"""The graph of graph_probe.cc (Mirage's rmsnorm test-mode graph) through
Mirage's Python extension (mirage.core, the calls persistent_kernel.py and
kernel.py make for it), then generate_task_graph, in a process arranged one
of five ways, to tell where the crash seen on the GPU machine comes from:

    --torch none    torch never loaded (a stand-in module for core's import)
    --torch after   mirage.core loaded first; it imports torch itself
    --torch before  torch imported first, then mirage.core
    --torch full    `import mirage` as MPK's programs do (torch, z3 stand-in,
                    the Rust stand-ins preloaded, the whole package)
    --torch mpk     MPK's front end as its test drives it: CUDA tensors,
                    get_configurations_from_gpu, PersistentKernel in test mode,
                    rmsnorm_layer, then the graph's generate_task_graph (the
                    test without its kernel compile; needs a GPU)

    python3 graph_probe.py --core PATH_TO_core.cpython-*.so --torch MODE

Prints "graph_probe.py (MODE): PASSED ..." or dies as the test did.  Only
--torch mpk needs a GPU: graph generation itself makes no CUDA call.
"""
import argparse, faulthandler, importlib.util, os, sys, types

faulthandler.enable()
p = argparse.ArgumentParser()
p.add_argument("--core", required=True, help="mirage/core.cpython-*.so of the build under test")
p.add_argument("--torch", choices=("none", "after", "before", "full", "mpk"), default="before")
a = p.parse_args()

if a.torch in ("full", "mpk"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(a.core))))
    import mirage
    core = mirage.core
if a.torch == "mpk":
    import torch
    from mirage.mpk.persistent_kernel import PersistentKernel

    B, H = 16, 4096
    xt = torch.randn(B, H, dtype=torch.bfloat16, device="cuda")
    wt = torch.randn(H, dtype=torch.bfloat16, device="cuda")
    ot = torch.zeros(B, H, dtype=torch.bfloat16, device="cuda")
    workers, schedulers = mirage.get_configurations_from_gpu(0)
    params = PersistentKernel.get_default_init_parameters()
    params.update(test_mode=True, num_workers=workers, num_local_schedulers=schedulers,
                  mpi_rank=0, world_size=1)
    pk = PersistentKernel(**params)
    x = pk.attach_input(xt, name="x")
    w = pk.attach_input(wt, name="w")
    o = pk.attach_input(ot, name="out")
    pk.rmsnorm_layer(input=x, weight=w, output=o, grid_dim=(B, 1, 1),
                     block_dim=(256, 1, 1) if pk.target_cc >= 90 else (128, 1, 1))
    print("graph_probe.py (mpk): generate_task_graph...", flush=True)
    r = pk.kn_graph.generate_task_graph(num_gpus=1, my_gpu_id=0)
    print("graph_probe.py (mpk): PASSED: %d bytes of code, %d bytes of task graph" %
          (len(r["cuda_code"]), len(r["json_file"])), flush=True)
    sys.exit(0)
else:
    if a.torch == "none":
        sys.modules["torch"] = types.ModuleType("torch")
    elif a.torch == "before":
        import torch  # noqa: F401
    # mirage.core without the package's __init__ (which imports torch)
    pkg = types.ModuleType("mirage")
    pkg.__path__ = [os.path.dirname(os.path.abspath(a.core))]
    sys.modules["mirage"] = pkg
    spec = importlib.util.spec_from_file_location("mirage.core", a.core)
    core = importlib.util.module_from_spec(spec)
    sys.modules["mirage.core"] = core
    spec.loader.exec_module(core)


class FakeTensor:
    """attach_torch_tensor reads only data_ptr()."""

    def __init__(self, ptr):
        self.ptr = ptr

    def data_ptr(self):
        return self.ptr


B, H = 16, 4096
g = core.CyKNGraph(disable_fingerprint=True)
x = g.new_input((B, H), (H, 1), core.bfloat16)
g.attach_torch_tensor(x, FakeTensor(0x7f0000000000), "x")
w = g.new_input((H,), (1,), core.bfloat16)
g.attach_torch_tensor(w, FakeTensor(0x7f0000100000), "w")
o = g.new_input((B, H), (H, 1), core.bfloat16)
g.attach_torch_tensor(o, FakeTensor(0x7f0000200000), "out")
tb = core.CyTBGraph((B, 1, 1), (256, 1, 1), 1, 64)
tb.new_input(x, (0, -1, -1), 1, True)
tb.new_input(w, (-1, -1, -1), 0, True)
tb.new_input(o, (0, -1, -1), 1, True)
g.customized([x, w, o], tb)
g.register_task(tb, "rmsnorm_hopper", None)
print("graph_probe.py (%s): generate_task_graph..." % a.torch, flush=True)
r = g.generate_task_graph(1, 0)
print("graph_probe.py (%s): PASSED: %d bytes of code, %d bytes of task graph" %
      (a.torch, len(r["cuda_code"]), len(r["json_file"])), flush=True)
