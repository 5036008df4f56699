"""One MPK process for runtimes/mpk/gpu/drive.py: a Qwen3-shaped model with
random weights of the real shapes, built with MPK's own front end the way
Mirage's demo/qwen3/demo_hopper.py builds Qwen3 (its layer calls, tensor
names and grids), compiled into a persistent kernel and served in offline
mode.  The driver talks to it over stdin/stdout, one line each:

    run TAG      serve every request once more (requests re-initialised), print
                 "done TAG MS ITERS" (ITERS: -1 when MPK does not count them)
    quit         finalize and exit

The variant is the environment's: MKS_MPK_NVCC_FLAGS set (hook sites compiled
in) or not, --profiling (MPK's profiler build).  Weights are random: the
tokens mean nothing, the shapes and the work are Qwen3-8B's.
"""
import argparse, faulthandler, os, sys, tempfile, time, types

# The protocol has fd 1 to itself: MPK's Python prints and its C printf
# (one per launch) go to stderr, the process's log.
proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
faulthandler.enable()  # a crash in MPK's C++ or CUDA code still names where

import torch

p = argparse.ArgumentParser()
p.add_argument("--name", required=True)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--requests", type=int, default=0, help="total requests (default: batch)")
p.add_argument("--layers", type=int, default=8)
p.add_argument("--seq", type=int, default=512, help="max sequence length")
p.add_argument("--workers", type=int, default=0, help="worker SMs (default MPK's choice)")
p.add_argument("--profiling", action="store_true")
p.add_argument("--out", required=True)
a = p.parse_args()

# Qwen3-8B's shapes (config.json of Qwen/Qwen3-8B)
H, I, NQ, NKV, HD, V, THETA = 4096, 12288, 32, 8, 128, 151936, 1000000.0
VPAD = 153600  # MPK's demo pads the vocabulary to this
PAGE, PAGES = 4096, 16
import mirage as mi

torch.manual_seed(1234)
torch.set_default_dtype(torch.bfloat16)
dev = "cuda"
B = a.batch
R = a.requests or B
S = a.seq


def rnd(*shape, scale=0.02):
    return (torch.randn(*shape, device=dev, dtype=torch.float32) * scale).to(torch.bfloat16)


def ones(n):
    return torch.ones(n, device=dev, dtype=torch.bfloat16)


t0 = time.time()
embed = rnd(V, H)
layers = []
for l in range(a.layers):
    layers.append(dict(
        ln1=ones(H), q=rnd(NQ * HD, H), k=rnd(NKV * HD, H), v=rnd(NKV * HD, H),
        qn=ones(HD), kn=ones(HD), o=rnd(H, NQ * HD), ln2=ones(H),
        gate=rnd(I, H), up=rnd(I, H), down=rnd(H, I)))
norm = ones(H)
lm_head = torch.cat((rnd(V, H), torch.zeros(VPAD - V, H, device=dev)), 0)
k_cache = torch.zeros(a.layers, PAGES, PAGE, NKV, HD, device=dev)
v_cache = torch.zeros(a.layers, PAGES, PAGE, NKV, HD, device=dev)
# rotary tables as Qwen3's rotary embedding makes them (default rope)
inv = 1.0 / (THETA ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float32) / HD))
fr = torch.outer(torch.arange(4096, device=dev, dtype=torch.float32), inv)
emb = torch.cat((fr, fr), -1)
cos, sin = emb.cos().to(torch.bfloat16).contiguous(), emb.sin().to(torch.bfloat16).contiguous()

tokens = torch.randint(0, V, (R, S), dtype=torch.long, device=dev)
prompt_lengths = torch.full((R,), 1, dtype=torch.int32, device=dev)
input_tokens = torch.zeros(B, 1, dtype=torch.long, device=dev)
output_tokens = torch.zeros(B, 1, dtype=torch.long, device=dev)
step = torch.zeros(R, dtype=torch.int32, device=dev)
num_new_tokens = torch.ones(R, dtype=torch.int32, device=dev)


def grid_linear(size, with_residual=False):
    if with_residual and size % 64 == 0:
        return size // 64
    if size >= 100000:
        return size // 256
    for g in (128, 96, 64):
        if size % g == 0:
            return g


def grid_rmsnorm(size):
    for g in (128, 96, 64):
        if size % g == 0:
            return g


num_workers, num_schedulers = mi.get_configurations_from_gpu(0)
if a.workers:
    num_workers = a.workers
# MPK's profiler writes 8 bytes per task begin/end and scheduling event per
# worker block with no bound check: room for ~150 records a block per step
prof = (torch.zeros(1 + 160 * 160 * (R // B + 2), dtype=torch.uint64, device=dev)
        if a.profiling else None)
qo = torch.empty(B + 1, dtype=torch.int32, device=dev)
kvp = torch.empty(B + 1, dtype=torch.int32, device=dev)
kvi = torch.empty(PAGES, dtype=torch.int32, device=dev)
kvl = torch.empty(B, dtype=torch.int32, device=dev)
mpk = mi.PersistentKernel(
    mode="offline", world_size=1, mpi_rank=0, num_workers=num_workers,
    num_local_schedulers=num_schedulers, num_remote_schedulers=0, max_seq_length=S,
    max_num_batched_requests=B, max_num_batched_tokens=B, max_num_pages=PAGES,
    page_size=PAGE, eos_token_id=-1,
    meta_tensors={"step": step, "tokens": tokens, "input_tokens": input_tokens,
                  "output_tokens": output_tokens, "num_new_tokens": num_new_tokens,
                  "prompt_lengths": prompt_lengths, "qo_indptr_buffer": qo,
                  "paged_kv_indptr_buffer": kvp, "paged_kv_indices_buffer": kvi,
                  "paged_kv_last_page_len_buffer": kvl},
    profiler_tensor=prof, trace_name="", spec_decode_config=None, use_cutlass_kernel=False)

fused1 = (NQ + 2 * NKV) * HD
x = mpk.attach_input(torch_tensor=input_tokens, name="input_token")
cpe = mpk.attach_input(torch_tensor=cos, name="cos_position_embedding")
spe = mpk.attach_input(torch_tensor=sin, name="sin_position_embedding")
nt = lambda dims, name, dt=mi.bfloat16: mpk.new_tensor(dims=dims, dtype=dt, name=name,
                                                         io_category="cuda_tensor")
y = nt((B, H), "embed_out")
rms = nt((B, H), "rmsnorm_out")
attn_in = nt((B, fused1), "attn_in")
attn_out = nt((B, NQ * HD), "attn_out")
attn_proj = nt((B, H), "attn_proj_out")
mlp_mid = nt((B, 2 * I), "mlp_mid")
silu = nt((B, I), "silu_mul_out")
mlp_out = nt((B, H), "mlp_out")
argmax_in = nt((B, VPAD), "argmax_in")
pv = nt((B, num_workers), "argmax_part_value")
pi = nt((B, num_workers), "argmax_part_index", mi.int64)
argmax_out = mpk.attach_input(torch_tensor=output_tokens, name="output_token")
w = mpk.attach_input(torch_tensor=embed, name="embed_tokens")
mpk.embed_layer(input=x, weight=w, output=y, grid_dim=(1, 1, 1), block_dim=(256, 1, 1),
                input_source=1)
x = y
for i, L in enumerate(layers):
    wn = mpk.attach_input(torch_tensor=L["ln1"], name=f"layer_{i}_input_layernorm")
    wq = mpk.attach_input(torch_tensor=L["q"], name=f"layer_{i}_q_proj")
    wk = mpk.attach_input(torch_tensor=L["k"], name=f"layer_{i}_k_proj")
    wv = mpk.attach_input(torch_tensor=L["v"], name=f"layer_{i}_v_proj")
    wqkv = mpk.shuffle_tensors(inputs=[wq, wk, wv], shuffled_dim=0, num_groups=NKV,
                               name=f"layer_{i}_qkv_proj")
    mpk.rmsnorm_layer(input=x, weight=wn, output=rms, grid_dim=(B, 1, 1), block_dim=(256, 1, 1))
    mpk.linear_layer(input=rms, weight=wqkv, output=attn_in,
                     grid_dim=(grid_linear(fused1), 1, 1), block_dim=(256, 1, 1))
    wqn = mpk.attach_input(torch_tensor=L["qn"], name=f"layer_{i}_q_norm")
    wkn = mpk.attach_input(torch_tensor=L["kn"], name=f"layer_{i}_k_norm")
    kc = mpk.attach_input(torch_tensor=k_cache[i], name=f"layer_{i}_k_cache")
    vc = mpk.attach_input(torch_tensor=v_cache[i], name=f"layer_{i}_v_cache")
    mpk.paged_attention_layer(input=attn_in, k_cache=kc, v_cache=vc, q_norm=wqn, k_norm=wkn,
                              cos_pos_embed=cpe, sin_pos_embed=spe, output=attn_out,
                              grid_dim=(B, NKV, 1), block_dim=(128, 1, 1))
    wo = mpk.attach_input(torch_tensor=L["o"], name=f"layer_{i}_o_proj")
    mpk.linear_with_residual_layer(input=attn_out, weight=wo, residual=x, output=attn_proj,
                                   grid_dim=(grid_linear(H, True), 1, 1), block_dim=(256, 1, 1))
    x = attn_proj
    wn2 = mpk.attach_input(torch_tensor=L["ln2"], name=f"layer_{i}_post_attn_layernorm")
    wg = mpk.attach_input(torch_tensor=L["gate"], name=f"layer_{i}_gate_proj")
    wu = mpk.attach_input(torch_tensor=L["up"], name=f"layer_{i}_up_proj")
    nrt = grid_rmsnorm(2 * I)
    wgu = mpk.shuffle_tensors(inputs=[wg, wu], shuffled_dim=0, num_groups=nrt // 2,
                              name=f"layer_{i}_gatedup_proj")
    mpk.rmsnorm_layer(input=x, weight=wn2, output=rms, grid_dim=(B, 1, 1), block_dim=(256, 1, 1))
    mpk.linear_layer(input=rms, weight=wgu, output=mlp_mid,
                     grid_dim=(grid_linear(2 * I), 1, 1), block_dim=(256, 1, 1))
    mpk.silu_mul_layer(input=mlp_mid, output=silu, grid_dim=(nrt // 2, 1, 1),
                       block_dim=(256, 1, 1))
    wd = mpk.attach_input(torch_tensor=L["down"], name=f"layer_{i}_down_proj")
    mpk.linear_with_residual_layer(input=silu, weight=wd, residual=x, output=mlp_out,
                                   grid_dim=(grid_linear(H, True), 1, 1), block_dim=(256, 1, 1))
    x = mlp_out
wn = mpk.attach_input(torch_tensor=norm, name="model_norm_weight")
wl = mpk.attach_input(torch_tensor=lm_head, name="lm_head")
mpk.rmsnorm_layer(input=x, weight=wn, output=rms, grid_dim=(B, 1, 1), block_dim=(256, 1, 1))
mpk.linear_layer(input=rms, weight=wl, output=argmax_in, grid_dim=(grid_linear(VPAD), 1, 1),
                 block_dim=(256, 1, 1))
mpk.argmax_partial_layer(input=argmax_in, output=(pv, pi), grid_dim=(num_workers, 1, 1),
                         block_dim=(256, 1, 1))
mpk.argmax_reduce_layer(input=(pv, pi), output=argmax_out, grid_dim=(1, 1, 1),
                        block_dim=(256, 1, 1))
t1 = time.time()
os.makedirs(a.out, exist_ok=True)
# MPK compiles into a temporary folder it removes; keep it, so that the
# driver can read the kernel's machine code (cuobjdump) afterwards
keep = os.path.join(a.out, "build")
os.makedirs(keep, exist_ok=True)
tempfile.TemporaryDirectory = lambda *x, **k: types.SimpleNamespace(name=keep)
mpk.compile(output_dir=a.out)
t2 = time.time()
print("ready %s build %.1f s compile+init %.1f s workers %d schedulers %d" %
      (a.name, t1 - t0, t2 - t1, num_workers, num_schedulers), file=proto, flush=True)
mod = mpk.launch_func.__self__  # MPK's extension module: init_request_func re-arms requests
stream = torch.cuda.Stream()
first = True
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "quit":
        break
    if cmd[0] != "run":
        print("error unknown command %s" % cmd[0], file=proto, flush=True)
        continue
    if not first:
        mod.init_request_func()
    first = False
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        e0.record(stream)
        mpk.launch_func(stream.cuda_stream)  # mpk() minus its trace export
        e1.record(stream)
    torch.cuda.synchronize()
    ms = e0.elapsed_time(e1)
    print("done %s %.3f %d" % (cmd[1] if len(cmd) > 1 else "-", ms, int(step.sum().item())),
          file=proto, flush=True)
mpk.finalize()
print("bye", file=proto, flush=True)
