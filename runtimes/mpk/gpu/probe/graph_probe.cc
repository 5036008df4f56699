// MPK's smallest graph without Python: the rmsnorm graph of Mirage's
// tests/runtime_python/test_mode/test_rmsnorm_testmode.py (x [16, 4096],
// w [4096], out [16, 4096], bf16; a 16-block rmsnorm task) built through
// Mirage's C++ API with the calls core.pyx makes for it, then
// generate_task_graph, the call that crashed in every MPK process on the GPU
// machine. Linked against the libmirage_runtime.a of the Mirage build under
// test: if this passes where the Python test crashes, the C++ core is sound
// and the fault lies in the Python extension or the process around it
// (run.sh's probe step). It needs no GPU: graph generation makes no CUDA call.
//   graph_probe [TASK [JSON_OUT]]     TASK: rmsnorm_hopper (default) or rmsnorm
#include "mirage/kernel/graph.h"
#include "mirage/threadblock/graph.h"
#include <cstdio>
#include <vector>

using namespace mirage;

int main(int argc, char **argv) {
  char const *task = argc > 1 ? argv[1] : "rmsnorm_hopper";
  int const batch = 16, hidden = 4096;
  // stand-ins for the torch tensors' device addresses: graph generation only
  // prints them into the generated code
  static char fake[3][64];
  kernel::Graph *g = new kernel::Graph(dim3{1, 1, 1}, true /*disable_fingerprint*/);
  kernel::DTensor *x = g->new_input_ptr({batch, hidden}, {(size_t)hidden, 1},
                                        type::DT_BFLOAT16, layout::DmemRowMajor);
  g->attach_torch_tensor(x, fake[0], "x");
  kernel::DTensor *w = g->new_input_ptr({hidden}, {1}, type::DT_BFLOAT16,
                                        layout::DmemRowMajor);
  g->attach_torch_tensor(w, fake[1], "w");
  kernel::DTensor *o = g->new_input_ptr({batch, hidden}, {(size_t)hidden, 1},
                                        type::DT_BFLOAT16, layout::DmemRowMajor);
  g->attach_torch_tensor(o, fake[2], "out");
  threadblock::Graph *tb = new threadblock::Graph(
      dim3{(unsigned)batch, 1, 1}, dim3{256, 1, 1}, 1 /*forloop_range*/, 64 /*dimx*/);
  tb->new_input(x, int3{0, -1, -1}, 1, layout::SmemRowMajor, true);
  tb->new_input(w, int3{-1, -1, -1}, 0, layout::SmemRowMajor, true);
  tb->new_input(o, int3{0, -1, -1}, 1, layout::SmemRowMajor, true);
  std::vector<kernel::DTensor const *> inputs = {x, w, o};
  static kernel::DTensor *outputs[1024];
  g->customized(inputs, outputs, tb);
  g->register_task(task, {});
  printf("graph_probe: %zu operators, %zu registered; generate_task_graph...\n",
         g->operators.size(), g->task_config.size());
  fflush(stdout);
  runtime::TaskGraphResult r = g->generate_task_graph(1, 0);
  printf("graph_probe: PASSED: %zu bytes of code, %zu bytes of task graph\n",
         r.cuda_code.size(), r.json_file.size());
  if (argc > 2) {
    FILE *f = fopen(argv[2], "w");
    if (f == nullptr || fputs(r.json_file.c_str(), f) < 0 || fclose(f) != 0) {
      perror(argv[2]);
      return 1;
    }
  }
  return 0;
}
