/*
 * A stand-in for the kernel MPK's front end generates (the .cu that
 * persistent_kernel.py compiles): MPK's runtime header with two of its
 * Hopper task bodies and an empty task graph, enough to compile the
 * persistent kernel with and without mkscope's hook sites for sm_90a and to
 * compare their machine code (mpk_compile_test.sh).  The real kernel comes
 * from MPK's front end on a GPU machine (runtimes/mpk/gpu/run.sh).
 */
#include "persistent_kernel.cuh"

__device__ __forceinline__ void _execute_task(TaskDesc const *task_desc,
                                              RuntimeConfig const &runtime_config)
{
    if (task_desc->task_type == TASK_RMS_NORM_HOPPER && task_desc->variant_id == 0) {
        kernel::rms_norm_hopper_impl<bfloat16, 8, 4096>(task_desc->input_ptrs[0],
                                                        task_desc->input_ptrs[1],
                                                        task_desc->output_ptrs[0], 1e-6f);
    } else if (task_desc->task_type == TASK_SILU_MUL_HOPPER && task_desc->variant_id == 0) {
        kernel::silu_mul_task_impl_hopper<bfloat16, 8, 192, 24576, 12288>(
            task_desc->input_ptrs[0], task_desc->output_ptrs[0],
            runtime_config.qo_indptr_buffer[MPK_MAX_NUM_BATCHED_REQUESTS]);
    }
}

static void _init_persistent_kernel(std::vector<FullTaskDesc> &all_tasks,
                                    std::vector<EventDesc> &all_events,
                                    std::vector<TaskId> &first_tasks, int num_gpus,
                                    int my_gpu_id)
{
    (void)all_tasks, (void)all_events, (void)first_tasks, (void)num_gpus, (void)my_gpu_id;
}
